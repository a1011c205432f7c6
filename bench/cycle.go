package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/codec"
)

// What a workload's progress line (and Result.Series) counts per second.
const (
	countCycles   = iota // completed lock cycles
	countGrants          // grants (contended: hand-offs)
	countOps             // requests answered OK (mixed)
	countExpiries        // grants that followed an unreleased grant (expiry)
)

// cycleSpec is what one lock-cycle workload is made of.
type cycleSpec struct {
	// steps are the ops of one cycle, in order; the first is always A. A
	// cycle whose last step is A (expiry) never releases.
	steps []byte
	// shared: the slots of all connections share a few keys (contended),
	// and the order checks need a view across connections (keyLines).
	shared bool
	prefix string
	// count is what the progress line counts (count*), named unit.
	count int
	unit  string
	// tickKind is the latency the progress line and the percentiles show.
	tickKind int
}

var cycleSpecs = map[string]cycleSpec{
	WorkloadUncontended: {steps: []byte{codec.OpAcquire, codec.OpRelease}, prefix: cyclePrefix,
		count: countCycles, unit: "cycles", tickKind: latAcquire},
	WorkloadContended: {steps: []byte{codec.OpAcquire, codec.OpRelease}, prefix: contendedPrefix, shared: true,
		count: countGrants, unit: "hand-offs", tickKind: latAcquire},
	WorkloadMixed: {steps: []byte{codec.OpAcquire, codec.OpExtend, codec.OpQuery, codec.OpRelease}, prefix: mixedPrefix,
		count: countOps, unit: "ops", tickKind: latAcquire},
	WorkloadExpiry: {steps: []byte{codec.OpAcquire}, prefix: expiryPrefix,
		count: countExpiries, unit: "expiries", tickKind: latExpiry},
}

// latNames name the latency kinds in Result.PercentilesOf.
var latNames = [numLat]string{latAcquire: "acquire", latRelease: "release", latExtend: "extend",
	latQuery: "query", latCycle: "cycle", latHandoff: "handoff", latExpiry: "expiry_delay",
	latRoundA: "acquire_round", latRoundR: "release_round"}

// cycleSlot is one of a connection's Depth concurrent lock cycles: one
// client that runs its cycles one after the other. It has at most one
// request outstanding, so an answer is paired with its slot by the key.
type cycleSlot struct {
	key      []byte // the current cycle's key
	idx      int    // its number (see keyspace.appendKey)
	n        int    // cycles started so far
	step     int    // index in steps of the request in flight; -1: none
	token    uint64
	start    time.Duration // the cycle's start: A sent, or intended (open loop)
	sent     time.Duration // the request in flight was sent
	measured bool          // started after warm-up
	client   int           // the slot's number over all connections
	// lastGrant (expiry) is when the previous grant of the key was read;
	// -1 when the key's previous holder is not ours or released.
	lastGrant time.Duration
	order     tokenOrder // per key of this slot (own keys only)
	owner     []byte     // Config.Owners: this cycle's owner (owner.go)
}

// cycler runs a lock-cycle workload on one connection.
type cycler struct {
	w            *wire
	p            *phase
	rec          *recorder
	ops          *opsBudget
	spec         *cycleSpec
	keys         keyspace
	lines        *keyLines // shared keys only
	leaseMs      uint32
	lease        time.Duration
	waitMs       int64
	measureStart time.Duration
	slots        []cycleSlot
	inflight     int
	pace         *Pacer // nil: closed loop
	idle         []int  // open loop: slots waiting for the schedule
	exhausted    bool   // the ops budget is used up
	st           connStats
	req          codec.Request
	owners       *ownerSource // nil: acquires without an owner
	// acqOp is the op of the cycle's acquire step (the A of steps): A, or
	// S with permits (Config.Permits).
	acqOp   byte
	permits uint32
}

func (c *cycler) begin(now time.Duration) {
	for i := range c.slots {
		c.start(i, now)
	}
}

func (c *cycler) pending() int { return c.inflight }

func (c *cycler) batchDone(time.Duration) { c.rec.merge(&c.st) }

func (c *cycler) next() time.Duration {
	if c.pace == nil || len(c.idle) == 0 || c.exhausted {
		return -1
	}
	return c.pace.Next()
}

func (c *cycler) fire(now time.Duration) {
	for len(c.idle) > 0 && c.pace.Next() <= now && !c.exhausted && !c.p.stopping.Load() {
		i := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		c.start(i, now)
	}
}

// start begins the next cycle of slot i, unless the run is ending. In open
// loop a slot whose next cycle is not due yet waits in idle.
func (c *cycler) start(i int, now time.Duration) {
	if c.p.stopping.Load() || c.exhausted {
		return
	}
	start := now
	if c.pace != nil {
		t, ok := c.pace.Take(now)
		if !ok {
			c.idle = append(c.idle, i)
			return
		}
		start = t
	}
	measured := start >= c.measureStart
	if measured && !c.ops.take() {
		c.exhausted = true
		return
	}
	c.startCycle(i, start, measured, now)
}

// startCycle sends the first step of slot i's next cycle, which began at
// start (open loop: was due then), at now; a measured cycle has taken its
// ticket of the ops budget.
func (c *cycler) startCycle(i int, start time.Duration, measured bool, now time.Duration) {
	s := &c.slots[i]
	s.key, s.idx = c.keys.appendKey(s.key[:0], i, s.n)
	if c.owners != nil {
		s.owner = c.owners.appendOwner(s.owner[:0], s.client, s.n)
	}
	s.n++
	s.start = start
	s.measured = measured
	s.token = 0
	c.send(i, 0, now)
}

// send puts step of slot i's cycle on the wire.
func (c *cycler) send(i, step int, now time.Duration) {
	s := &c.slots[i]
	s.step = step
	s.sent = now
	switch op := c.spec.steps[step]; op {
	case codec.OpAcquire:
		c.req = codec.Request{Op: c.acqOp, Key: s.key, Permits: c.permits, LeaseMs: c.leaseMs, WaitMs: c.waitMs, Owner: s.owner}
		if c.lines != nil {
			c.lines.queued(s.idx, s.client, now)
		}
	case codec.OpRelease:
		c.req = codec.Request{Op: op, Key: s.key, Token: s.token}
		if c.lines != nil {
			c.lines.releasing(s.idx, now)
		}
	case codec.OpExtend:
		c.req = codec.Request{Op: op, Key: s.key, Token: s.token, LeaseMs: c.leaseMs}
	default:
		c.req = codec.Request{Op: op, Key: s.key}
	}
	c.w.out = codec.AppendRequest(c.w.out, &c.req)
	c.inflight++
}

// finish ends slot i's cycle, successful or not, and starts the next.
func (c *cycler) finish(i int, now time.Duration) {
	s := &c.slots[i]
	s.step = -1
	if s.measured {
		c.ops.done(c.p)
	}
	c.start(i, now)
}

func (c *cycler) response(r *codec.Response, now time.Duration) {
	i, ok := c.answered(r)
	if !ok {
		return
	}
	s := &c.slots[i]
	good := r.Status == codec.StatusOK
	if r.Op == codec.OpQuery {
		// Our own key, held by us: anything but HELD with our token is
		// the server contradicting what it acknowledged.
		good = r.Status == codec.StatusHeld && r.Token == s.token
		if !good && (r.Status == codec.StatusHeld || r.Status == codec.StatusFree) {
			c.st.addErr(errQueryMismatch, 1)
		} else if !good {
			c.st.addErr(statusKind(r), 1)
		}
	} else if !good {
		c.st.addErr(statusKind(r), 1)
	}
	if !good {
		if r.Op == c.acqOp {
			s.lastGrant = -1
			if c.lines != nil {
				c.lines.abandoned(s.idx, s.client)
			}
		}
		// A failed step ends the cycle; a lock a failed release leaves
		// behind runs out with its lease.
		c.finish(i, now)
		return
	}
	if s.measured {
		c.st.requests++
	}
	if c.spec.count == countOps {
		c.st.done++
	}
	if r.Op == c.acqOp {
		c.st.add(latAcquire, now-s.start, s.measured)
		c.granted(s, r.Token, now)
	} else {
		c.st.add(opLat(r.Op), now-s.sent, s.measured)
	}
	if s.step+1 < len(c.spec.steps) {
		c.send(i, s.step+1, now)
		return
	}
	if c.spec.count == countCycles {
		c.st.done++
	}
	if s.measured {
		c.st.add(latCycle, now-s.start, true)
		c.st.measured++
		c.st.lastDone = now
	}
	c.finish(i, now)
}

// unpaired counts an answer to nothing in flight, and its status when it
// is not OK.
func (c *cycler) unpaired(r *codec.Response) {
	if r.Status != codec.StatusOK {
		c.st.addErr(statusKind(r), 1)
	}
	c.st.addErr(errUnpaired, 1)
}

// granted checks a grant of token to slot s and records what it ended.
func (c *cycler) granted(s *cycleSlot, token uint64, now time.Duration) {
	checkGrant(&c.st, c.lines, c.spec, c.lease, s, token, now)
}

// checkGrant checks a grant of token to slot s, read at now, and records
// in st what it ended: a hand-off (shared keys) or an expiry (a grant of a
// key whose previous grant, ours, was never released). Both drivers (wire
// and client) call it, so the checks are the same.
func checkGrant(st *connStats, lines *keyLines, spec *cycleSpec, lease time.Duration, s *cycleSlot, token uint64, now time.Duration) {
	s.token = token
	if spec.count == countGrants {
		st.done++
	}
	if lines != nil {
		g := lines.granted(s.idx, s.client, token, now)
		if !g.tokenOK {
			st.violations++
		}
		if !g.fifoOK {
			st.fifo++
		}
		if !g.permitsOK {
			st.overPermits++
		}
		if g.handoff >= 0 {
			st.add(latHandoff, g.handoff, s.measured)
		}
	} else if !s.order.observe(s.idx, token) {
		st.violations++
	}
	if spec.count == countExpiries {
		if s.lastGrant >= 0 {
			// The lease started when the grant took effect, a little
			// before its OK was read: this delay is slightly too small,
			// and a negative one is recorded as the minimum.
			st.add(latExpiry, now-(s.lastGrant+lease), s.measured)
			st.done++
			if s.measured {
				st.expiries++
			}
		}
		s.lastGrant = now
	}
}

// answered takes in an answer read from the server: the slot it belongs
// to, whose request is no longer in flight, or false for an answer that
// pairs with none (counted as such).
func (c *cycler) answered(r *codec.Response) (int, bool) {
	i, ok := c.pair(r)
	if !ok {
		c.unpaired(r)
		return 0, false
	}
	c.inflight--
	return i, true
}

// pair finds the slot an answer belongs to: the echoed key names it, and the
// op must be the one the slot is waiting for.
func (c *cycler) pair(r *codec.Response) (int, bool) {
	i, ok := c.keys.slotOf(r.Key)
	if !ok {
		return 0, false
	}
	s := &c.slots[i]
	if s.step < 0 || !bytes.Equal(r.Key, s.key) {
		return 0, false
	}
	want := c.spec.steps[s.step]
	if want == codec.OpAcquire {
		want = c.acqOp
	}
	return i, want == r.Op
}

// runCycles runs the uncontended, contended, mixed or expiry workload.
func runCycles(ctx context.Context, cfg *Config) (*Result, error) {
	if cfg.Via == ViaClient {
		return runViaClient(ctx, cfg)
	}
	spec := cycleSpecs[cfg.Workload]
	wires, err := dialAll(ctx, cfg, cfg.Conns)
	if err != nil {
		return nil, err
	}
	defer closeAll(wires)

	rec := newRecorder()
	rec.tickKind = spec.tickKind
	p := newPhase()
	budget := &opsBudget{limit: cfg.Ops}
	keys, lines := cycleKeys(cfg, &spec)
	hs := make([]handler, len(wires))
	var pacers []*Pacer
	if cfg.Rate > 0 {
		pacers = NewPacers(cfg.Rate, len(wires))
	}
	var owners *ownerSource
	if cfg.Owners {
		owners = newOwnerSource()
	}
	for i, w := range wires {
		c := &cycler{
			w: w, p: p, rec: rec, ops: budget, spec: &spec, lines: lines,
			leaseMs: cfg.leaseMs(), lease: time.Duration(cfg.leaseMs()) * time.Millisecond, waitMs: cfg.waitMs(),
			measureStart: cfg.Warmup,
			slots:        make([]cycleSlot, cfg.Depth),
			owners:       owners,
			acqOp:        cfg.acquireOp(), permits: uint32(cfg.Permits),
		}
		c.keys = keys(i)
		initSlots(c.slots, i)
		if pacers != nil {
			c.pace = pacers[i]
		}
		hs[i] = c
		if cfg.Shape == ShapeBatch {
			hs[i] = &batcher{cycler: c}
		}
	}
	res := newResult(cfg)
	res.Unit = spec.unit
	prog := progress{cfg: cfg, rec: rec, res: res, label: latNames[spec.tickKind]}
	end := p.run(ctx, wires, hs, rec, phaseOpts{end: cfg.Warmup + cfg.Duration, tick: prog.tick})
	prog.finish(p.now())

	finishResult(res, cfg, &spec, rec, end, lines, keys(0).count())
	if pacers != nil {
		res.NoteBehind(TotalBehind(pacers, end.haltAt))
	}
	return res, nil
}

// cycleKeys returns the keyspace of each connection of a cycle workload,
// and for shared keys the cross-connection checks.
func cycleKeys(cfg *Config, spec *cycleSpec) (func(conn int) keyspace, *keyLines) {
	if spec.shared {
		lines := newKeyLines(cfg.Keys, cfg.FIFOSlack, cfg.Permits)
		return func(conn int) keyspace {
			return sharedKeys{prefix: spec.prefix, conn: conn, depth: cfg.Depth, keys: cfg.Keys}
		}, lines
	}
	perSlot := max(1, cfg.Keys/(cfg.Conns*cfg.Depth))
	if cfg.Workload == WorkloadExpiry {
		// A key per slot: its next acquire waits for its own lease.
		perSlot = 1
	}
	return func(conn int) keyspace {
		return ownKeys{prefix: spec.prefix, conn: conn, perSlot: perSlot, slots: cfg.Depth, conns: cfg.Conns}
	}, nil
}

// initSlots readies the slots of connection conn: nothing in flight, no
// previous grant, and each slot's number over all connections.
func initSlots(slots []cycleSlot, conn int) {
	for j := range slots {
		slots[j].step = -1
		slots[j].lastGrant = -1
		slots[j].client = conn*len(slots) + j
	}
}

// finishResult fills res in from what rec gathered in a cycle workload's
// phase that ended with end.
func finishResult(res *Result, cfg *Config, spec *cycleSpec, rec *recorder, end phaseEnd, lines *keyLines, keys int) {
	res.Keys = keys
	res.Stop = end.reason
	rec.mu.Lock()
	res.Cycles = rec.measured
	res.AcquireUs = summarize(rec.hist[latAcquire])
	res.CycleUs = summarize(rec.hist[latCycle])
	opt := func(kind int) *Latency {
		if rec.hist[kind].TotalCount() == 0 {
			return nil
		}
		l := summarize(rec.hist[kind])
		return &l
	}
	res.ReleaseUs, res.ExtendUs, res.QueryUs = opt(latRelease), opt(latExtend), opt(latQuery)
	res.HandoffUs, res.ExpiryDelayUs = opt(latHandoff), opt(latExpiry)
	if cfg.Shape == ShapeBatch {
		res.RoundUs = &RoundLatency{Acquire: summarize(rec.hist[latRoundA]), Release: summarize(rec.hist[latRoundR])}
	}
	res.Percentiles = percentiles(rec.hist[spec.tickKind])
	res.PercentilesOf = latNames[spec.tickKind]
	res.TokenViolations = rec.violations
	res.FIFOViolations = rec.fifo
	res.PermitViolations = rec.overPermits
	requests, expiries := rec.requests, rec.expiries
	measuredEnd := max(end.haltAt, rec.lastDone)
	rec.mu.Unlock()
	res.Errors = rec.errors()
	if lines != nil {
		res.FIFOChecked = lines.checked()
		res.FIFOSlackMs = float64(cfg.FIFOSlack) / float64(time.Millisecond)
	}
	if cfg.Workload == WorkloadExpiry {
		res.Expiries = expiries
	}
	if elapsed := measuredEnd - cfg.Warmup; elapsed > 0 {
		res.DurationS = elapsed.Seconds()
		res.CyclesPerSec = float64(res.Cycles) / res.DurationS
		switch cfg.Workload {
		case WorkloadContended:
			res.HandoffsPerSec = res.CyclesPerSec
		case WorkloadMixed:
			res.OpsPerSec = float64(requests) / res.DurationS
		case WorkloadExpiry:
			res.ExpiriesPerSec = float64(expiries) / res.DurationS
		}
	}
}

// progress writes the line a person watches every second and keeps the
// same figures in Result.Series for the plot. It runs on the phase's
// controller goroutine only.
type progress struct {
	cfg   *Config
	rec   *recorder
	res   *Result
	label string // the latency shown
	last  time.Duration
}

// finish adds the last, partial second (the end of the run and its drain)
// to the series, unless it is too short to give a meaningful rate.
func (pr *progress) finish(now time.Duration) {
	if now-pr.last >= 100*time.Millisecond {
		pr.tick(now)
	}
}

func (pr *progress) tick(now time.Duration) {
	t := pr.rec.takeTick()
	from := pr.last
	dt := now - from
	pr.last = now
	if dt <= 0 {
		return
	}
	rate := float64(t.done) / dt.Seconds()
	warm := from < pr.cfg.Warmup
	pr.res.Series = append(pr.res.Series, Point{T: now.Seconds(), PerSec: rate, P50Us: t.p50, P99Us: t.p99, Errors: t.errTotal, Warmup: warm})
	if pr.cfg.Progress == nil {
		return
	}
	phase := ""
	if warm {
		phase = "  (warm-up)"
	}
	fmt.Fprintf(pr.cfg.Progress, "%6.1fs %10.0f %s/s  %s p50 %7s  p99 %7s  errors %d%s\n",
		now.Seconds(), rate, pr.res.Unit, pr.label, fmtUs(t.p50), fmtUs(t.p99), t.errTotal, phase)
}
