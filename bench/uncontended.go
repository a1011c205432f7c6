package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Slot states of an uncontended lock cycle.
const (
	slotIdle      = iota // no cycle: the run is ending for this slot
	slotAcquiring        // A sent
	slotReleasing        // A granted, R sent
)

// cycleSlot is one of a connection's Depth concurrent lock cycles. The slot
// owns its keys (see appendCycleKey), so it has at most one request
// outstanding per key, and an answer is paired with its slot by the key.
type cycleSlot struct {
	key      []byte // the current cycle's key
	idx      int    // its number within the slot's keys
	n        int    // cycles started so far
	state    uint8
	token    uint64
	start    time.Duration // when the acquire was sent
	measured bool          // started after warm-up
	order    tokenOrder    // per key of this slot
}

// cycler runs the uncontended workload on one connection.
type cycler struct {
	w            *wire
	p            *phase
	rec          *recorder
	ops          *opsBudget
	conn         int
	perSlot      int
	leaseMs      uint32
	waitMs       int64
	measureStart time.Duration
	slots        []cycleSlot
	inflight     int
	st           connStats
	req          codec.Request
}

func (c *cycler) begin(now time.Duration) {
	for i := range c.slots {
		c.start(i, now)
	}
}

func (c *cycler) pending() int { return c.inflight }

func (c *cycler) batchDone(time.Duration) { c.rec.merge(&c.st) }

// start begins the next cycle of slot i, unless the run is ending.
func (c *cycler) start(i int, now time.Duration) {
	if c.p.stopping.Load() {
		return
	}
	measured := now >= c.measureStart
	if measured && !c.ops.take() {
		return
	}
	s := &c.slots[i]
	s.idx = s.n % c.perSlot
	s.n++
	s.key = appendCycleKey(s.key[:0], c.conn, i, s.idx)
	s.state = slotAcquiring
	s.start = now
	s.measured = measured
	s.token = 0
	c.req = codec.Request{Op: codec.OpAcquire, Key: s.key, LeaseMs: c.leaseMs, WaitMs: c.waitMs}
	c.w.out = codec.AppendRequest(c.w.out, &c.req)
	c.inflight++
}

// finish ends slot i's cycle, successful or not, and starts the next.
func (c *cycler) finish(i int, now time.Duration) {
	s := &c.slots[i]
	s.state = slotIdle
	c.inflight--
	if s.measured {
		c.ops.done(c.p)
	}
	c.start(i, now)
}

func (c *cycler) response(r *codec.Response, now time.Duration) {
	if r.Status != codec.StatusOK {
		c.st.addErr(statusKind(r), 1)
	}
	i, ok := c.pair(r)
	if !ok {
		c.st.addErr(errUnpaired, 1)
		return
	}
	s := &c.slots[i]
	switch {
	case r.Op == codec.OpAcquire && r.Status == codec.StatusOK:
		if !s.order.observe(s.idx, r.Token) {
			c.st.violations++
		}
		c.st.acq = append(c.st.acq, sample{toUs(now - s.start), s.measured})
		s.token = r.Token
		s.state = slotReleasing
		c.req = codec.Request{Op: codec.OpRelease, Key: s.key, Token: s.token}
		c.w.out = codec.AppendRequest(c.w.out, &c.req)
	case r.Op == codec.OpRelease && r.Status == codec.StatusOK:
		c.st.done++
		if s.measured {
			c.st.cyc = append(c.st.cyc, toUs(now-s.start))
			c.st.measured++
			c.st.lastDone = now
		}
		c.finish(i, now)
	default:
		// A failed acquire or release ends the cycle; a lock a failed
		// release leaves behind runs out with its lease.
		c.finish(i, now)
	}
}

// pair finds the slot an answer belongs to: the echoed key names it, and the
// op must be the one the slot is waiting for.
func (c *cycler) pair(r *codec.Response) (int, bool) {
	conn, i, _, ok := parseCycleKey(r.Key)
	if !ok || conn != c.conn || i >= len(c.slots) {
		return 0, false
	}
	s := &c.slots[i]
	var want byte
	switch s.state {
	case slotAcquiring:
		want = codec.OpAcquire
	case slotReleasing:
		want = codec.OpRelease
	default:
		return 0, false
	}
	return i, r.Op == want && bytes.Equal(r.Key, s.key)
}

func runUncontended(ctx context.Context, cfg *Config) (*Result, error) {
	wires, err := dialAll(ctx, cfg.Addrs, cfg.Conns)
	if err != nil {
		return nil, err
	}
	defer closeAll(wires)

	rec := newRecorder()
	p := newPhase()
	budget := &opsBudget{limit: cfg.Ops}
	perSlot := max(1, cfg.Keys/(cfg.Conns*cfg.Depth))
	hs := make([]handler, len(wires))
	for i, w := range wires {
		hs[i] = &cycler{
			w: w, p: p, rec: rec, ops: budget,
			conn: i, perSlot: perSlot,
			leaseMs: cfg.leaseMs(), waitMs: cfg.waitMs(),
			measureStart: cfg.Warmup,
			slots:        make([]cycleSlot, cfg.Depth),
		}
	}
	last := time.Duration(0)
	tick := func(now time.Duration) {
		t := rec.takeTick()
		from := last
		dt := now - from
		last = now
		if cfg.Progress == nil || dt <= 0 {
			return
		}
		phase := ""
		if from < cfg.Warmup {
			phase = "  (warm-up)"
		}
		fmt.Fprintf(cfg.Progress, "%6.1fs %10.0f cycles/s  acquire p50 %7s  p99 %7s  errors %d%s\n",
			now.Seconds(), float64(t.done)/dt.Seconds(), fmtUs(t.p50), fmtUs(t.p99), t.errTotal, phase)
	}
	end := p.run(ctx, wires, hs, rec, phaseOpts{end: cfg.Warmup + cfg.Duration, tick: tick})

	res := newResult(cfg)
	res.Keys = perSlot * cfg.Conns * cfg.Depth
	res.Stop = end.reason
	rec.mu.Lock()
	res.Cycles = rec.measured
	res.AcquireUs = summarize(rec.acq)
	res.CycleUs = summarize(rec.cyc)
	res.TokenViolations = rec.violations
	measuredEnd := max(end.haltAt, rec.lastDone)
	rec.mu.Unlock()
	res.Errors = rec.errors()
	if elapsed := measuredEnd - cfg.Warmup; elapsed > 0 {
		res.DurationS = elapsed.Seconds()
		res.CyclesPerSec = float64(res.Cycles) / res.DurationS
	}
	return res, nil
}
