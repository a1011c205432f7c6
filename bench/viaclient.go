package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-dev/baton/client"
)

// Ways to reach the server (Config.Via).
const (
	// ViaWire speaks the protocol directly: the server's capacity.
	ViaWire = "wire"
	// ViaClient goes through package client, a blocking call per request:
	// what an application sees, client overhead included.
	ViaClient = "client"
)

// viaMergeEvery bounds how many cycles a client-mode slot keeps to itself
// before publishing its statistics; the progress line is at most that
// stale, and the shared recorder's lock is taken once per batch.
const viaMergeEvery = 64

// runViaClient runs the uncontended or contended workload through package
// client: Conns clients (each with its own connections, as Conns separate
// processes would have), each used by Depth long-lived goroutines, one per
// cycle slot, calling Acquire (AcquireShared with Config.Permits) and then
// Lock.Release. Keys, checks and figures are those of the wire driver (see
// runCycles); latencies are those of the client calls. With Rate set, the Depth slots of a client share its
// Pacer, as the slots of a wire connection do: a slot that is free waits
// for the client's next intended start, and a start that is due while every
// slot is busy goes to the first slot to free up, its latency counted from
// the intended start.
func runViaClient(ctx context.Context, cfg *Config) (*Result, error) {
	spec := cycleSpecs[cfg.Workload]
	// client.New dials in the background; a server that cannot be reached
	// at all, or refuses the TLS handshake or the secret, is a failure to
	// start, as in wire mode.
	for _, a := range cfg.Addrs {
		w, err := dialWire(ctx, cfg, a)
		if err != nil {
			return nil, fmt.Errorf("cannot connect: %w", err)
		}
		_ = w.nc.Close()
	}
	clients := make([]*client.Client, cfg.Conns)
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	opts := []client.Option{client.WithDialTimeout(dialTimeout)}
	if cfg.TLS != nil {
		opts = append(opts, client.WithTLS(cfg.TLS))
	}
	if cfg.Secret != "" {
		opts = append(opts, client.WithSecret(cfg.Secret))
	}
	for i := range clients {
		c, err := client.New(cfg.Addrs, opts...)
		if err != nil {
			return nil, err
		}
		clients[i] = c
	}

	rec := newRecorder()
	rec.tickKind = spec.tickKind
	p := newPhase()
	budget := &opsBudget{limit: cfg.Ops}
	keys, lines := cycleKeys(cfg, &spec)
	// Calls still outstanding at the drain deadline are abandoned through
	// this context (the client then releases a late grant itself).
	callCtx, cancelCalls := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelCalls()
	// Open loop: sending ends when the phase stops (time, ops, ctx), which
	// wakes the slots waiting for a start that will not come.
	sending, stopSending := context.WithCancel(context.Background())
	defer stopSending()
	var pacers []*Pacer
	if cfg.Rate > 0 {
		pacers = NewPacers(cfg.Rate, len(clients))
	}

	var wg sync.WaitGroup
	for i, cl := range clients {
		slots := make([]cycleSlot, cfg.Depth)
		initSlots(slots, i)
		ks := keys(i)
		var pace *Pacer
		if pacers != nil {
			pace = pacers[i]
		}
		for j := range slots {
			w := &viaSlot{cfg: cfg, spec: &spec, p: p, rec: rec, ops: budget, lines: lines, cl: cl,
				keys: ks, slot: j, s: &slots[j], ctx: callCtx, pace: pace, sending: sending}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.loop()
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	res := newResult(cfg)
	res.Unit = spec.unit
	prog := progress{cfg: cfg, rec: rec, res: res, label: latNames[spec.tickKind]}
	var drainTimer *time.Timer
	end := p.control(ctx, done, rec, phaseOpts{end: cfg.Warmup + cfg.Duration, tick: prog.tick},
		func(dl time.Time) {
			stopSending()
			drainTimer = time.AfterFunc(time.Until(dl), cancelCalls)
		},
		cancelCalls)
	if drainTimer != nil {
		drainTimer.Stop()
	}
	prog.finish(p.now())
	finishResult(res, cfg, &spec, rec, end, lines, keys(0).count())
	if pacers != nil {
		res.NoteBehind(TotalBehind(pacers, end.haltAt))
	}
	return res, nil
}

// viaSlot is one cycle slot of the client mode, run by its own goroutine.
type viaSlot struct {
	cfg   *Config
	spec  *cycleSpec
	p     *phase
	rec   *recorder
	ops   *opsBudget
	lines *keyLines
	cl    *client.Client
	keys  keyspace
	slot  int
	s     *cycleSlot
	ctx   context.Context
	// pace is the client's schedule, shared by its slots; nil: closed loop.
	pace *Pacer
	// sending is done once the phase stops starting cycles.
	sending context.Context
	st      connStats
}

func (v *viaSlot) loop() {
	defer v.rec.merge(&v.st)
	for n := 0; !v.p.stopping.Load(); n++ {
		start := v.p.now()
		if v.pace != nil {
			// A slot about to sleep for its next start publishes what it
			// has first, so that a low rate does not leave the progress
			// line seconds stale.
			if n%viaMergeEvery == 0 || v.pace.Next() > start {
				v.rec.merge(&v.st)
			}
			var ok bool
			if start, ok = v.pace.Wait(v.sending, v.p.base); !ok || v.p.stopping.Load() {
				return
			}
		} else if n%viaMergeEvery == 0 {
			v.rec.merge(&v.st)
		}
		if !v.cycle(start) {
			return
		}
	}
}

// cycle runs one lock cycle that starts at start (open loop: its intended
// start, which may be past); it reports false when the slot has no more
// work (the ops budget is used up).
func (v *viaSlot) cycle(start time.Duration) bool {
	s := v.s
	s.measured = start >= v.cfg.Warmup
	if s.measured && !v.ops.take() {
		return false
	}
	defer func() {
		if s.measured {
			v.ops.done(v.p)
		}
	}()
	s.key, s.idx = v.keys.appendKey(s.key[:0], v.slot, s.n)
	s.n++
	key := string(s.key)
	if v.lines != nil {
		// The FIFO check wants when the acquire was really sent, not
		// when it should have been (as the wire driver gives it).
		v.lines.queued(s.idx, s.client, v.p.now())
	}
	var lock *client.Lock
	var err error
	if v.cfg.Permits > 0 {
		lock, err = v.cl.AcquireShared(v.ctx, key, v.cfg.Permits, v.cfg.Lease, v.cfg.Wait)
	} else {
		lock, err = v.cl.Acquire(v.ctx, key, v.cfg.Lease, v.cfg.Wait)
	}
	now := v.p.now()
	if err != nil {
		v.st.addErr(clientErrKind(err), 1)
		if v.lines != nil {
			v.lines.abandoned(s.idx, s.client)
		}
		return true
	}
	v.st.add(latAcquire, now-start, s.measured)
	v.st.requests += boolInt(s.measured)
	checkGrant(&v.st, v.lines, v.spec, v.cfg.Lease, s, lock.Token(), now)

	sent := v.p.now()
	if v.lines != nil {
		v.lines.releasing(s.idx, sent)
	}
	err = lock.Release(v.ctx)
	now = v.p.now()
	if err != nil {
		v.st.addErr(clientErrKind(err), 1)
		return true
	}
	v.st.add(latRelease, now-sent, s.measured)
	v.st.requests += boolInt(s.measured)
	if v.spec.count == countCycles {
		v.st.done++
	}
	if s.measured {
		v.st.add(latCycle, now-start, true)
		v.st.measured++
		v.st.lastDone = now
	}
	return true
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// clientErrKind names a client error like the wire driver names a status,
// so that the error counts of both modes read alike.
func clientErrKind(err error) string {
	var se *client.ServerError
	switch {
	case errors.Is(err, client.ErrTimeout):
		return "TIMEOUT"
	case errors.Is(err, client.ErrNotHeld):
		return "NOTHELD"
	case errors.As(err, &se):
		return "ERR " + se.Code
	case errors.Is(err, client.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled), errors.Is(err, client.ErrClosed):
		return errUnanswered
	}
	return "client error"
}
