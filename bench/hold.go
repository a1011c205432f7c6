package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/codec"
)

// holder acquires (or releases) a list of hold keys on one connection, with
// up to depth requests in flight.
type holder struct {
	w       *wire
	p       *phase
	rec     *recorder
	op      byte    // codec.OpAcquire or codec.OpRelease
	keys    []int32 // key numbers this connection works through
	nextKey int
	depth   int
	leaseMs uint32
	waitMs  int64
	// tokens is shared by all holders of a run, indexed by key number; each
	// key belongs to one holder per phase, so no two goroutines touch the
	// same element.
	tokens []uint64
	sent   map[int32]time.Duration // in flight: key number -> when sent
	ok     int64                   // successful answers
	st     connStats
	key    []byte
	req    codec.Request
}

func newHolder(w *wire, p *phase, rec *recorder, op byte, keys []int32, cfg *Config, tokens []uint64) *holder {
	return &holder{
		w: w, p: p, rec: rec, op: op, keys: keys, depth: cfg.Depth,
		leaseMs: cfg.leaseMs(), waitMs: cfg.waitMs(), tokens: tokens,
		sent: make(map[int32]time.Duration, cfg.Depth),
	}
}

func (h *holder) begin(now time.Duration) { h.fill(now) }
func (h *holder) pending() int            { return len(h.sent) }
func (h *holder) batchDone(time.Duration) { h.rec.merge(&h.st) }
func (h *holder) next() time.Duration     { return -1 }
func (h *holder) fire(time.Duration)      {}

// fill tops the window up to depth requests.
func (h *holder) fill(now time.Duration) {
	for len(h.sent) < h.depth && h.nextKey < len(h.keys) && !h.p.stopping.Load() {
		i := h.keys[h.nextKey]
		h.nextKey++
		h.key = appendHoldKey(h.key[:0], int(i))
		if h.op == codec.OpAcquire {
			h.req = codec.Request{Op: codec.OpAcquire, Key: h.key, LeaseMs: h.leaseMs, WaitMs: h.waitMs}
		} else {
			h.req = codec.Request{Op: codec.OpRelease, Key: h.key, Token: h.tokens[i]}
		}
		h.w.out = codec.AppendRequest(h.w.out, &h.req)
		h.sent[i] = now
	}
}

func (h *holder) response(r *codec.Response, now time.Duration) {
	if r.Status != codec.StatusOK {
		h.st.addErr(statusKind(r), 1)
	}
	n, ok := parseHoldKey(r.Key)
	i := int32(n)
	at, pending := h.sent[i]
	if !ok || n >= len(h.tokens) || !pending || r.Op != h.op {
		h.st.addErr(errUnpaired, 1)
		return
	}
	delete(h.sent, i)
	if r.Status == codec.StatusOK {
		h.ok++
		h.st.done++
		if h.op == codec.OpAcquire {
			h.tokens[i] = r.Token
			h.st.add(latAcquire, now-at, true)
			h.st.measured++
			h.st.lastDone = now
		} else {
			h.tokens[i] = 0
		}
	}
	h.fill(now)
}

// holdPhase runs op over keys, spread round-robin over the healthy wires,
// and returns how many succeeded.
func holdPhase(ctx context.Context, cfg *Config, wires []*wire, rec *recorder, op byte, keys []int32, tokens []uint64, what string) (int64, phaseEnd) {
	p := newPhase()
	per := make([][]int32, len(wires))
	for j, k := range keys {
		per[j%len(wires)] = append(per[j%len(wires)], k)
	}
	hs := make([]handler, len(wires))
	holders := make([]*holder, len(wires))
	for j, w := range wires {
		holders[j] = newHolder(w, p, rec, op, per[j], cfg, tokens)
		hs[j] = holders[j]
	}
	sum := func() (n int64) {
		for _, h := range holders {
			n += h.ok
		}
		return n
	}
	var last time.Duration
	var total int64
	tick := func(now time.Duration) {
		t := rec.takeTick()
		total += t.done
		dt := now - last
		last = now
		if cfg.Progress == nil || dt <= 0 {
			return
		}
		fmt.Fprintf(cfg.Progress, "%6.1fs %s %d/%d %10.0f/s", now.Seconds(), what, total, len(keys), float64(t.done)/dt.Seconds())
		if op == codec.OpAcquire {
			fmt.Fprintf(cfg.Progress, "  acquire p50 %7s  p99 %7s", fmtUs(t.p50), fmtUs(t.p99))
		}
		fmt.Fprintf(cfg.Progress, "  errors %d\n", t.errTotal)
	}
	end := p.run(ctx, wires, hs, rec, phaseOpts{stall: stallTimeout, tick: tick})
	rec.takeTick()
	return sum(), end
}

func runHold(ctx context.Context, cfg *Config) (*Result, error) {
	wires, err := dialAll(ctx, cfg, cfg.Conns)
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(wires) }()
	res := newResult(cfg)
	res.IdleConns = cfg.IdleConns
	res.WarmupS = 0 // hold has no warm-up
	rec := newRecorder()
	readRSS := func(into *int64, when string) {
		if cfg.RSS == nil {
			return
		}
		if !sleepCtx(ctx, cfg.Settle) {
			return
		}
		v, err := cfg.RSS()
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("RSS %s: %v", when, err))
			return
		}
		*into = v
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "server RSS %s: %s\n", when, fmtBytes(v))
		}
	}

	// The load connections are already open, so that the per-lock figure
	// does not include them.
	readRSS(&res.RSSBefore, "before")

	tokens := make([]uint64, cfg.Hold)
	keys := make([]int32, cfg.Hold)
	for i := range keys {
		keys[i] = int32(i)
	}
	if cfg.Hold > 0 {
		held, end := holdPhase(ctx, cfg, wires, rec, codec.OpAcquire, keys, tokens, "held")
		res.Held = held
		res.HoldSetupS = end.haltAt.Seconds()
		if res.HoldSetupS > 0 {
			res.AcquiresPerSec = float64(held) / res.HoldSetupS
		}
		if end.reason != endFinished {
			res.Notes = append(res.Notes, fmt.Sprintf("acquiring stopped early (%s): %d of %d held", end.reason, held, cfg.Hold))
		}
		rec.mu.Lock()
		res.AcquireUs = summarize(rec.hist[latAcquire])
		rec.mu.Unlock()
		readRSS(&res.RSSAfter, "after hold")
	}

	var idle []*wire
	defer func() { closeAll(idle) }()
	if cfg.IdleConns > 0 && ctx.Err() == nil {
		if cfg.Hold == 0 {
			res.RSSAfter = res.RSSBefore
		}
		start := time.Now()
		// Bounded as a whole too: a server that stops accepting would
		// otherwise cost a dial timeout per connection.
		dctx, cancel := context.WithTimeout(ctx, idleDialTime)
		var dialErr error
		for i := 0; i < cfg.IdleConns && dialErr == nil; i++ {
			var w *wire
			if w, dialErr = dialWire(dctx, cfg, cfg.Addrs[i%len(cfg.Addrs)]); dialErr == nil {
				idle = append(idle, w)
			}
		}
		cancel()
		if dialErr != nil && ctx.Err() == nil {
			rec.addErr(errDial, 1)
			res.Notes = append(res.Notes, fmt.Sprintf("opened %d of %d idle connections (at most %v allowed): %v",
				len(idle), cfg.IdleConns, idleDialTime, dialErr))
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "opened %d idle connections in %.1fs\n", len(idle), time.Since(start).Seconds())
		}
		res.IdleConns = len(idle)
		readRSS(&res.RSSAfterIdle, "after idle conns")
	}
	if res.RSSBefore > 0 && res.RSSAfter > 0 && res.Held > 0 {
		res.BytesPerLock = float64(res.RSSAfter-res.RSSBefore) / float64(res.Held)
	}
	if res.RSSAfter > 0 && res.RSSAfterIdle > 0 && len(idle) > 0 {
		res.BytesPerIdleConn = float64(res.RSSAfterIdle-res.RSSAfter) / float64(len(idle))
	}

	// Hold everything for Duration, so that the server can be inspected.
	holdStart := time.Now()
	if cfg.Progress != nil && cfg.Duration > 0 {
		fmt.Fprintf(cfg.Progress, "holding %d locks and %d idle connections for %v\n", res.Held, len(idle), cfg.Duration)
	}
	sleepCtx(ctx, cfg.Duration)
	res.DurationS = time.Since(holdStart).Seconds()
	closeAll(idle)
	idle = nil

	if cfg.Keep || res.Held == 0 {
		res.Errors = rec.errors()
		return res, nil
	}
	// Release even when interrupted: the locks would otherwise stay held for
	// their (long) lease. The release is bounded by its stall timeout.
	rctx := context.WithoutCancel(ctx)
	held := keys[:0]
	for i, t := range tokens {
		if t != 0 {
			held = append(held, int32(i))
		}
	}
	healthy := wires[:0:0]
	for _, w := range wires {
		if w.broken {
			if err := w.redial(rctx); err != nil {
				continue
			}
		}
		healthy = append(healthy, w)
	}
	if len(healthy) == 0 {
		res.Notes = append(res.Notes, "could not reconnect to release the locks")
	} else {
		released, end := holdPhase(rctx, cfg, healthy, rec, codec.OpRelease, held, tokens, "released")
		res.Released = released
		if end.reason != endFinished {
			res.Notes = append(res.Notes, fmt.Sprintf("releasing stopped early (%s)", end.reason))
		}
	}
	res.Errors = rec.errors()
	return res, nil
}

// sleepCtx sleeps for d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
