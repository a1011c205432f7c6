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
	// grace bounds how long outstanding calls may take after the end
	// before they are abandoned.
	grace time.Duration
}

// tally is what one worker gathers; it is merged once, at the end, so the
// hot path takes no lock.
type tally struct {
	acq, cyc *bench.Histogram
	cycles   int64 // measured, completed
	errs     map[string]int64
	lastDone time.Time
}

func newTally() *tally {
	return &tally{acq: bench.NewHistogram(), cyc: bench.NewHistogram(), errs: map[string]int64{}}
}

// clock tells a worker whether a cycle counts: it must start after the
// warm-up and finish before the end.
type clock struct {
	measureFrom, end, hardEnd time.Time
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
	c := clock{measureFrom: start.Add(o.warmup), end: start.Add(o.warmup + o.duration)}
	c.hardEnd = c.end.Add(o.grace)
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
		Stop: "time", Unit: "cycles",
	}
	res.CyclesPerSec = float64(res.Cycles) / o.duration.Seconds()
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
