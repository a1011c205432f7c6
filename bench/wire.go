package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/codec"
)

// Time limits that keep every phase bounded even when the server stops
// answering.
const (
	dialTimeout  = 5 * time.Second
	drainTimeout = 5 * time.Second  // answers still awaited after a phase stops sending
	stallTimeout = 10 * time.Second // a phase with no answer for this long stops
	idleDialTime = time.Minute      // the most that opening idle connections may take
)

// wire is one client connection. While a phase runs, only the connection's
// own goroutine touches in and out; the controller touches nc alone
// (deadlines, Close), which net.Conn allows concurrently.
type wire struct {
	cfg    *Config // its TLS and secret, for a redial
	addr   string
	nc     net.Conn
	in     *codec.LineReader
	out    []byte
	resp   codec.Response
	broken bool // requests left unanswered or I/O failed: the stream cannot be trusted
}

// inBufSize holds many response lines per read, so that a busy connection
// costs one read syscall per batch, not per line.
const inBufSize = 64 << 10

// dialWire opens a connection to addr as cfg says: TCP, or TLS (cfg.TLS),
// then H (cfg.Secret), as package client opens its own (client.Open).
func dialWire(ctx context.Context, cfg *Config, addr string) (*wire, error) {
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	in := codec.NewLineReader(inBufSize)
	if cfg.TLS != nil || cfg.Secret != "" {
		octx, cancel := context.WithTimeout(ctx, dialTimeout)
		nc, err = client.Open(octx, nc, addr, cfg.TLS, cfg.Secret, in)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return &wire{cfg: cfg, addr: addr, nc: nc, in: in}, nil
}

// dialAll opens n connections spread round-robin over cfg.Addrs, or none.
func dialAll(ctx context.Context, cfg *Config, n int) ([]*wire, error) {
	ws := make([]*wire, 0, n)
	for i := range n {
		w, err := dialWire(ctx, cfg, cfg.Addrs[i%len(cfg.Addrs)])
		if err != nil {
			closeAll(ws)
			return nil, fmt.Errorf("cannot connect: %w", err)
		}
		ws = append(ws, w)
	}
	return ws, nil
}

func closeAll(ws []*wire) {
	for _, w := range ws {
		_ = w.nc.Close()
	}
}

// redial replaces a broken connection with a fresh one to the same address.
func (w *wire) redial(ctx context.Context) error {
	_ = w.nc.Close()
	fresh, err := dialWire(ctx, w.cfg, w.addr)
	if err != nil {
		return err
	}
	*w = *fresh
	return nil
}

// handler is a workload's logic for one connection. It is called only from
// that connection's goroutine and appends its requests to the wire's out
// buffer.
type handler interface {
	// begin appends the first requests.
	begin(now time.Duration)
	// response handles one answer and may append requests.
	response(r *codec.Response, now time.Duration)
	// batchDone is called after each batch of answers (and once at the end),
	// before the requests go out; it is where statistics are published.
	batchDone(now time.Duration)
	// pending is the number of requests sent and not answered yet.
	pending() int
	// next is the phase offset at which the handler wants fire to be called
	// (an open-loop schedule), or a negative value when it waits for
	// nothing but answers.
	next() time.Duration
	// fire appends the requests that are due at now.
	fire(now time.Duration)
}

// pollInterval bounds how long a connection that waits for its schedule
// blocks in a read, so that it notices the end of the phase promptly even
// when its next send is far away (a low --rate over many connections).
const pollInterval = 100 * time.Millisecond

// badResponseError wraps a response the codec rejects; the connection is then
// dropped, since the two ends no longer agree on the stream.
type badResponseError struct{ err error }

func (e badResponseError) Error() string { return "bad response: " + e.err.Error() }

// drive runs h on w until nothing is pending and nothing is scheduled: one
// read, every complete line handled, one write, repeat. A handler with a
// schedule (see handler.next) is woken by a read deadline at its next send
// time; the phase's drain deadline (set by the controller when it halts)
// still ends the last reads.
func (w *wire) drive(h handler, p *phase) error {
	now := p.now()
	h.begin(now)
	h.batchDone(now)
	if err := w.flush(); err != nil {
		return err
	}
	armed := false // a schedule deadline of ours is set
	for {
		stopping := p.stopping.Load()
		due := h.next()
		if h.pending() == 0 && (stopping || due < 0) {
			return nil
		}
		switch {
		case stopping:
			// The controller wakes every reader when it halts (an
			// immediate deadline); from then on reads wait for the
			// drain deadline, set again on each read since the wake-up
			// may land after ours.
			_ = w.nc.SetReadDeadline(p.drainDeadline())
		case due >= 0:
			_ = w.nc.SetReadDeadline(p.base.Add(min(due, p.now()+pollInterval)))
			armed = true
		case armed:
			_ = w.nc.SetReadDeadline(time.Time{})
			armed = false
		}
		n, err := w.nc.Read(w.in.Free())
		if n > 0 {
			w.in.Filled(n)
			now := p.now()
			lines := int64(0)
			for {
				line, serr := w.in.Next()
				if serr != nil {
					return badResponseError{serr}
				}
				if line == nil {
					break
				}
				lines++
				if perr := codec.ParseResponse(line, &w.resp); perr != nil {
					return badResponseError{perr}
				}
				h.response(&w.resp, now)
			}
			p.responses.Add(lines)
		}
		if err != nil {
			// A timeout of our own deadline is the schedule's wake-up; only
			// the drain deadline passing is a failure.
			if !errors.Is(err, os.ErrDeadlineExceeded) || (p.stopping.Load() && !time.Now().Before(p.drainDeadline())) {
				return err
			}
		}
		now = p.now()
		if !p.stopping.Load() && h.next() >= 0 {
			h.fire(now)
		}
		h.batchDone(now)
		if err := w.flush(); err != nil {
			return err
		}
	}
}

func (w *wire) flush() error {
	if len(w.out) == 0 {
		return nil
	}
	_, err := w.nc.Write(w.out)
	w.out = w.out[:0]
	return err
}

// phase is one closed-loop stretch of work over a set of connections, with a
// controller that decides when to stop sending.
type phase struct {
	base      time.Time
	stopping  atomic.Bool  // handlers start no new work once set
	drainAt   atomic.Int64 // unix nanoseconds: when the drain ends; set before stopping
	responses atomic.Int64 // answers so far, to detect a stall
	opsDone   chan struct{}
	opsOnce   sync.Once
}

func newPhase() *phase {
	return &phase{base: time.Now(), opsDone: make(chan struct{})}
}

// now is the time since the phase began; one clock read per batch.
func (p *phase) now() time.Duration { return time.Since(p.base) }

// drainDeadline is when outstanding answers stop being awaited; valid once
// stopping is set.
func (p *phase) drainDeadline() time.Time { return time.Unix(0, p.drainAt.Load()) }

// finishOps tells the controller that the operation budget is used up.
func (p *phase) finishOps() { p.opsOnce.Do(func() { close(p.opsDone) }) }

type phaseOpts struct {
	end   time.Duration           // stop sending at this offset from the start; 0: no limit
	stall time.Duration           // stop when nothing was answered for this long; 0: never
	tick  func(now time.Duration) // called every second
}

// Why a phase ended.
const (
	endFinished = "finished" // every connection ran out of work
	endTime     = "time"
	endOps      = "ops"
	endCanceled = "canceled"
	endStalled  = "stalled"
)

type phaseEnd struct {
	haltAt time.Duration // when sending stopped
	reason string
}

// run drives hs[i] on wires[i], each on its own goroutine, until they run out
// of work or the phase is stopped (end time, ops budget, ctx, stall). After a
// stop, outstanding requests get drainTimeout to be answered; then the
// connections are closed, so run always returns.
func (p *phase) run(ctx context.Context, wires []*wire, hs []handler, rec *recorder, o phaseOpts) phaseEnd {
	for _, w := range wires {
		_ = w.nc.SetDeadline(time.Time{})
	}
	var wg sync.WaitGroup
	for i, w := range wires {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.drive(hs[i], p)
			hs[i].batchDone(p.now())
			if err == nil {
				return
			}
			w.broken = true
			var bad badResponseError
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
			case errors.As(err, &bad):
				rec.addErr(errBadResponse, 1)
			default:
				rec.addErr(errDisconnect, 1)
			}
			rec.addErr(errUnanswered, int64(hs[i].pending()))
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return p.control(ctx, done, rec, o, func(dl time.Time) {
		// Every reader wakes up now, sees the phase stopping, and waits for
		// its outstanding answers until dl (or leaves, with none); a
		// writer blocked on a full socket gives up at dl.
		now := time.Now()
		for _, w := range wires {
			_ = w.nc.SetWriteDeadline(dl)
			_ = w.nc.SetReadDeadline(now)
		}
	}, func() {
		// A deadline should have ended every read and write; closing is
		// the last resort that cannot be ignored.
		closeAll(wires)
	})
}

// control is a phase's controller: it decides when the workers (which
// close done when they have all returned) stop starting new work: at the
// end time, when the ops budget is used up, when ctx is cancelled, or when
// nothing was answered for o.stall. Then it calls halt with the drain
// deadline, by which outstanding requests must be answered, and force a
// second after that deadline if the workers are still not done. It calls
// o.tick every second, and returns once done is closed.
func (p *phase) control(ctx context.Context, done <-chan struct{}, rec *recorder, o phaseOpts, halt func(drainAt time.Time), force func()) phaseEnd {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var endC <-chan time.Time
	if o.end > 0 {
		t := time.NewTimer(o.end - p.now())
		defer t.Stop()
		endC = t.C
	}
	var forceC <-chan time.Time
	var res phaseEnd
	stop := func(reason string) {
		if p.stopping.Load() {
			return
		}
		dl := time.Now().Add(drainTimeout)
		p.drainAt.Store(dl.UnixNano())
		p.stopping.Store(true)
		res = phaseEnd{haltAt: p.now(), reason: reason}
		halt(dl)
		forceC = time.NewTimer(drainTimeout + time.Second).C
	}
	ctxC, opsC := ctx.Done(), p.opsDone
	lastResp, lastChange := int64(-1), time.Duration(0)
	for {
		select {
		case <-done:
			if !p.stopping.Swap(true) {
				res = phaseEnd{haltAt: p.now(), reason: endFinished}
			}
			return res
		case <-ctxC:
			ctxC = nil
			stop(endCanceled)
		case <-endC:
			stop(endTime)
		case <-opsC:
			opsC = nil
			stop(endOps)
		case <-ticker.C:
			now := p.now()
			if o.tick != nil {
				o.tick(now)
			}
			if n := p.responses.Load(); n != lastResp {
				lastResp, lastChange = n, now
			} else if o.stall > 0 && now-lastChange >= o.stall && !p.stopping.Load() {
				rec.addErr(endStalled, 1)
				stop(endStalled)
			}
		case <-forceC:
			forceC = nil
			force()
		}
	}
}

// opsBudget shares Config.Ops between the connections of a run: a measured
// cycle must take a ticket before it starts, and the last one to finish
// stops the phase. Tickets, not completions, are limited so that cycles in
// flight do not overshoot the count.
type opsBudget struct {
	limit    int64 // 0: unlimited
	started  atomic.Int64
	finished atomic.Int64
}

func (b *opsBudget) take() bool {
	return b.limit <= 0 || b.started.Add(1) <= b.limit
}

func (b *opsBudget) done(p *phase) {
	if b.limit > 0 && b.finished.Add(1) == b.limit {
		p.finishOps()
	}
}

// statusKind names a non-OK answer for the error counts.
func statusKind(r *codec.Response) string {
	switch r.Status {
	case codec.StatusTimeout, codec.StatusNotHeld, codec.StatusMoved:
		return r.Status.String()
	case codec.StatusErr:
		return "ERR " + string(r.Code)
	default:
		return fmt.Sprintf("unexpected %c %s", r.Op, r.Status)
	}
}
