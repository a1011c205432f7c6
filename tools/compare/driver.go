package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/bench"
)

// Workloads the peer drivers run; they mirror baton bench's of the same
// name.
const (
	workloadUncontended = "uncontended"
	workloadContended   = "contended"
)

// driveOpts is one measurement against a peer system.
type driveOpts struct {
	system    string   // "etcd" or "redis"
	endpoints []string // host:port
	workload  string
	conns     int // client connections
	depth     int // lock cycles in flight per connection
	keys      int // uncontended: distinct keys, split over the slots
	lease     time.Duration
	duration  time.Duration
	warmup    time.Duration
	// rate, when positive, runs open loop: cycles start at this many per
	// second over all connections, on bench.Pacer's schedule, as baton
	// bench --rate does; 0 is closed loop (saturation).
	rate float64
	// grace bounds how long outstanding calls may take after the end
	// before they are abandoned.
	grace time.Duration
	// shape is the shape of the pipelined load asked for, as baton
	// bench's --shape: "" takes the system's own, the only one its
	// driver has (Redis uncontended: batches; etcd: a sliding window,
	// each session making its own calls); a shape the driver does not
	// have is refused (checkShape).
	shape string
}

// checkShape refuses a --shape the system's driver cannot run. Each
// driver has one shape: go-redis's Pipeline writes its commands and
// returns once all are answered, so a Redis connection sends rounds
// (bench.ShapeBatch), while etcd's sessions each wait for their own calls
// on a shared client, a sliding window (bench.ShapeWindow). The flag lets
// a script that compares with baton bench --shape say which it means, and
// fail rather than compare two shapes.
func checkShape(o *driveOpts) error {
	own := bench.ShapeWindow
	if o.system == "redis" && o.workload == workloadUncontended {
		own = bench.ShapeBatch
	}
	switch o.shape {
	case "", own:
		return nil
	case bench.ShapeWindow, bench.ShapeBatch:
		what := "a sliding window (each cycle slot makes its own calls)"
		if own == bench.ShapeBatch {
			what = "batches (a go-redis Pipeline of --depth SETs, then one of their releases)"
		}
		return fmt.Errorf("drive: --shape %s: %s %s runs %s only", o.shape, o.system, o.workload, what)
	}
	return fmt.Errorf("drive: --shape %q: want %s or %s", o.shape, bench.ShapeWindow, bench.ShapeBatch)
}

// tally is what one worker gathers; it is merged once, at the end, so the
// hot path takes no lock.
type tally struct {
	acq, cyc *bench.Histogram
	cycles   int64 // measured, completed
	errs     map[string]int64
	lastDone time.Time
	// acqRound and relRound (batches) are the latencies of whole
	// pipelines, from writing one to its last answer: those of acquires
	// and those of releases, as bench.Result.RoundUs has them.
	acqRound, relRound *bench.Histogram
}

func newTally() *tally {
	return &tally{acq: bench.NewHistogram(), cyc: bench.NewHistogram(),
		acqRound: bench.NewHistogram(), relRound: bench.NewHistogram(), errs: map[string]int64{}}
}

// clock tells a worker when to start a cycle and whether a cycle counts: it
// must start after the warm-up and finish before the end.
type clock struct {
	// base is the run's start, from which the open-loop schedules count.
	base                      time.Time
	measureFrom, end, hardEnd time.Time
	// pacers (open loop) are the connections' schedules, one each; nil in
	// closed loop, where a worker starts its next cycle as soon as the
	// last one ended.
	pacers []*bench.Pacer
	// sending is done at the end (or when the run is cancelled): no cycle
	// starts after that.
	sending context.Context
}

// starts waits for the next cycle of connection conn and returns its start,
// followed by the starts of up to n-1 further cycles that are due by then,
// for a worker that sends several cycles at once (a pipeline); it returns
// none once no cycle may start. Closed loop, it returns n starts,
// all now. Open loop, the starts are the cycles' intended ones from the
// connection's schedule: a worker that was busy past them gets them late,
// and the latency counted from them includes that wait (no coordinated
// omission).
func (c clock) starts(conn, n int, buf []time.Time) []time.Time {
	buf = buf[:0]
	if c.pacers == nil {
		now := time.Now()
		if !now.Before(c.end) || c.sending.Err() != nil {
			return buf
		}
		for range n {
			buf = append(buf, now)
		}
		return buf
	}
	p := c.pacers[conn]
	first, ok := p.Wait(c.sending, c.base)
	if !ok {
		return buf
	}
	buf = append(buf, c.base.Add(first))
	for len(buf) < n {
		t, ok := p.Take(time.Since(c.base))
		if !ok {
			break
		}
		buf = append(buf, c.base.Add(t))
	}
	return buf
}

// serial runs the cycles of a worker of connection conn that has one cycle
// in flight at a time, each started when c says, until the run ends, and
// files them in t. cycle runs cycle n (acquire, then release) and returns
// when the lock was granted, or the kind of error that ended the cycle, or
// ok false when the run ended before a grant and there is nothing to count.
func (c clock) serial(conn int, t *tally, cycle func(n int) (granted time.Time, errKind string, ok bool)) {
	buf := make([]time.Time, 0, 1)
	for n := 0; ; n++ {
		if buf = c.starts(conn, 1, buf); len(buf) == 0 {
			return
		}
		granted, kind, ok := cycle(n)
		switch {
		case !ok:
		case kind != "":
			t.errs[kind]++
		default:
			t.record(c, buf[0], granted, time.Now())
		}
	}
}

func (c clock) measured(start, done time.Time) bool {
	return !start.Before(c.measureFrom) && !done.After(c.end)
}

// record files one finished cycle that began at start, was granted at
// granted and released at done.
func (t *tally) record(c clock, start, granted, done time.Time) {
	if !c.measured(start, done) {
		return
	}
	t.acq.Record(granted.Sub(start))
	t.cyc.Record(done.Sub(start))
	t.cycles++
	t.lastDone = done
}

// recordRound files one round of pipelines (a batch) when it lies in the
// measured time: the acquires, written at sent and answered in full at
// granted, then the releases, written at relSent and answered in full at
// done, or none when nothing was granted (relSent zero). Both pipelines
// of a round count or neither, so that the release rounds are those of
// the acquire rounds, as in baton bench's result.
func (t *tally) recordRound(c clock, sent, granted, relSent, done time.Time) {
	end := done
	if relSent.IsZero() {
		end = granted
	}
	if !c.measured(sent, end) {
		return
	}
	t.acqRound.Record(granted.Sub(sent))
	if !relSent.IsZero() {
		t.relRound.Record(done.Sub(relSent))
	}
}

// errKind names an error for the counts without its variable details.
func errKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	s := err.Error()
	if i := strings.IndexAny(s, ":("); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// worker runs one client's loop until its clock's end; it returns its
// tally.
type worker func(ctx context.Context, id int, c clock) *tally

// runWorkers starts n workers (each one long-lived client, never one
// goroutine per request), waits for them, and sums their tallies into a
// baton bench Result, so that the table reads every system the same way.
func runWorkers(ctx context.Context, o *driveOpts, n int, w worker) *bench.Result {
	start := time.Now()
	c := clock{base: start, measureFrom: start.Add(o.warmup), end: start.Add(o.warmup + o.duration)}
	c.hardEnd = c.end.Add(o.grace)
	if o.rate > 0 {
		c.pacers = bench.NewPacers(o.rate, o.conns)
	}
	sending, stopSending := context.WithDeadline(ctx, c.end)
	defer stopSending()
	c.sending = sending
	ctx, cancel := context.WithDeadline(ctx, c.hardEnd)
	defer cancel()
	tallies := make([]*tally, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tallies[i] = w(ctx, i, c)
		}()
	}
	wg.Wait()

	total := newTally()
	for _, t := range tallies {
		total.acq.Merge(t.acq)
		total.cyc.Merge(t.cyc)
		total.acqRound.Merge(t.acqRound)
		total.relRound.Merge(t.relRound)
		total.cycles += t.cycles
		for k, v := range t.errs {
			total.errs[k] += v
		}
	}
	res := &bench.Result{
		Workload: o.workload, Addrs: o.endpoints, Conns: o.conns, Depth: o.depth,
		LeaseMs: o.lease.Milliseconds(), WarmupS: o.warmup.Seconds(), DurationS: o.duration.Seconds(),
		Cycles: total.cycles, AcquireUs: total.acq.Summary(), CycleUs: total.cyc.Summary(),
		Errors: total.errs, Percentiles: total.acq.Percentiles(), PercentilesOf: "acquire",
		Stop: "time", Unit: "cycles", Rate: o.rate,
	}
	res.CyclesPerSec = float64(res.Cycles) / o.duration.Seconds()
	if rounds := total.acqRound.Summary(); rounds.Count > 0 {
		res.Shape = bench.ShapeBatch
		res.RoundUs = &bench.RoundLatency{Acquire: rounds, Release: total.relRound.Summary()}
	}
	if c.pacers != nil {
		res.NoteBehind(bench.TotalBehind(c.pacers, c.end.Sub(c.base)))
	}
	if o.workload == workloadContended {
		res.HandoffsPerSec = res.CyclesPerSec
		res.Unit = "hand-offs"
	}
	if ctx.Err() != nil && time.Now().Before(c.hardEnd) {
		res.Stop = "canceled"
	}
	return res
}

// slotKey is the key of cycle n of slot (conn, s) in a run: every slot has
// perSlot keys of its own, used in turn, as in baton bench's uncontended
// workload.
func slotKey(prefix string, slot, perSlot, n int) string {
	return fmt.Sprintf("%s%d/%d", prefix, slot, n%perSlot)
}

// sortedKinds lists error kinds for a stable message.
func sortedKinds(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
