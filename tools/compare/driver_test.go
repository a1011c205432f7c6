package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLock stands in for a peer system's lock: every acquire takes delay
// (the server's round trip and commit), every release nothing, and every
// failEvery-th cycle fails. The drivers' loops around it (clock.serial,
// clock.starts, runWorkers) are those etcd and Redis are driven with.
type fakeLock struct {
	delay     time.Duration
	failEvery int
}

func (f fakeLock) cycle(n int) (time.Time, string, bool) {
	time.Sleep(f.delay)
	if f.failEvery > 0 && n%f.failEvery == f.failEvery-1 {
		return time.Now(), "lock: fake", true
	}
	return time.Now(), "", true
}

func TestSerialWorkersOpenAndClosedLoop(t *testing.T) {
	for _, tc := range []struct {
		name        string
		conns       int
		rate        float64
		lock        fakeLock
		minRate     float64 // cycles/s the run must complete
		maxRate     float64
		fellBehind  bool
		minP99      time.Duration // acquire p99 at least
		maxP50      time.Duration // acquire p50 at most; 0: no bound
		wantErrors  bool
		wantRateSet bool
	}{
		// Well under capacity (each connection has 10ms per cycle and needs
		// 2ms): the rate is the limit, and latency is the lock's own.
		{name: "open loop keeps up", conns: 4, rate: 400, lock: fakeLock{delay: 2 * time.Millisecond},
			minRate: 340, maxRate: 440, minP99: 2 * time.Millisecond, maxP50: 20 * time.Millisecond, wantRateSet: true},
		// Twice what the lock can do: the schedule runs ahead of the
		// workers, and the cycles that waited carry that wait (no
		// coordinated omission), so the tail is far above the lock's 10ms.
		{name: "open loop falls behind", conns: 2, rate: 400, lock: fakeLock{delay: 10 * time.Millisecond},
			minRate: 100, maxRate: 230, fellBehind: true, minP99: 100 * time.Millisecond, wantRateSet: true},
		// Failed cycles are counted as errors, not recorded.
		{name: "open loop with failures", conns: 2, rate: 200, lock: fakeLock{delay: time.Millisecond, failEvery: 4},
			minRate: 120, maxRate: 170, minP99: time.Millisecond, maxP50: 20 * time.Millisecond, wantErrors: true, wantRateSet: true},
		// Closed loop: each worker as fast as the lock lets it.
		{name: "closed loop", conns: 2, lock: fakeLock{delay: 2 * time.Millisecond},
			minRate: 300, maxRate: 1001, minP99: 2 * time.Millisecond, maxP50: 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &driveOpts{workload: workloadUncontended, conns: tc.conns, depth: 1, rate: tc.rate,
				duration: 600 * time.Millisecond, warmup: 100 * time.Millisecond, grace: time.Second}
			res := runWorkers(context.Background(), o, tc.conns, func(ctx context.Context, id int, c clock) *tally {
				tl := newTally()
				c.serial(id, tl, tc.lock.cycle)
				return tl
			})
			t.Logf("%.0f cycles/s, behind %d, acquire p50 %dus p99 %dus, errors %v", res.CyclesPerSec, res.Behind, res.AcquireUs.P50, res.AcquireUs.P99, res.Errors)
			if res.CyclesPerSec < tc.minRate || res.CyclesPerSec > tc.maxRate {
				t.Errorf("%.0f cycles/s, want %.0f..%.0f", res.CyclesPerSec, tc.minRate, tc.maxRate)
			}
			if res.FellBehind() != tc.fellBehind || (len(res.Notes) > 0) != tc.fellBehind {
				t.Errorf("fell behind %v (behind %d), notes %q; want %v", res.FellBehind(), res.Behind, res.Notes, tc.fellBehind)
			}
			if (res.Rate > 0) != tc.wantRateSet || (tc.wantRateSet && res.Rate != tc.rate) {
				t.Errorf("result rate %v, want %v", res.Rate, tc.rate)
			}
			if p99 := time.Duration(res.AcquireUs.P99) * time.Microsecond; p99 < tc.minP99 {
				t.Errorf("acquire p99 %v, want at least %v", p99, tc.minP99)
			}
			if p50 := time.Duration(res.AcquireUs.P50) * time.Microsecond; tc.maxP50 > 0 && p50 > tc.maxP50 {
				t.Errorf("acquire p50 %v, want at most %v", p50, tc.maxP50)
			}
			if (len(res.Errors) > 0) != tc.wantErrors || (tc.wantErrors && res.Errors["lock: fake"] == 0) {
				t.Errorf("errors %v", res.Errors)
			}
			if res.Cycles != res.AcquireUs.Count || res.Cycles != res.CycleUs.Count || res.Stop != "time" {
				t.Errorf("cycles %d, acquire count %d, cycle count %d, stop %q", res.Cycles, res.AcquireUs.Count, res.CycleUs.Count, res.Stop)
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if tc.wantRateSet != strings.Contains(text.String(), "open loop    target") {
				t.Errorf("summary:\n%s", text.String())
			}
		})
	}
}

// A worker that pipelines (Redis) sends, in open loop, every cycle that is
// due when it sends, at most depth, each with its intended start; closed
// loop, always depth cycles starting together.
func TestPipelinedStarts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rate     float64
		maxBatch int // the largest batch must be more than 1 and at most this
	}{{"open loop", 500, 4}, {"closed loop", 0, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			const depth = 4
			o := &driveOpts{workload: workloadUncontended, conns: 1, depth: depth, rate: tc.rate,
				duration: 500 * time.Millisecond, warmup: 50 * time.Millisecond, grace: time.Second}
			var mu sync.Mutex
			var batches [][]time.Time
			res := runWorkers(context.Background(), o, 1, func(ctx context.Context, id int, c clock) *tally {
				tl := newTally()
				var starts []time.Time
				for {
					if starts = c.starts(id, depth, starts); len(starts) == 0 {
						return tl
					}
					mu.Lock()
					batches = append(batches, append([]time.Time(nil), starts...))
					mu.Unlock()
					time.Sleep(5 * time.Millisecond) // the pipeline's round trip
					now := time.Now()
					for _, s := range starts {
						tl.record(c, s, now, now)
					}
				}
			})
			t.Logf("%d batches, %.0f cycles/s, behind %d", len(batches), res.CyclesPerSec, res.Behind)
			largest := 0
			var prev time.Time
			for _, b := range batches {
				largest = max(largest, len(b))
				for i, s := range b {
					if tc.rate == 0 {
						if !s.Equal(b[0]) {
							t.Fatalf("closed loop: starts of one batch differ: %v", b)
						}
						continue
					}
					// Open loop: every start is the schedule's next one,
					// 2ms after the last, whichever batch it went in.
					if !prev.IsZero() {
						if d := s.Sub(prev); d < 1999*time.Microsecond || d > 2001*time.Microsecond {
							t.Fatalf("start %d of a batch of %d is %v after the one before, want 2ms", i, len(b), d)
						}
					}
					prev = s
				}
			}
			if largest < 2 || largest > tc.maxBatch {
				t.Errorf("largest batch %d, want 2..%d", largest, tc.maxBatch)
			}
			if tc.rate > 0 && (res.FellBehind() || res.CyclesPerSec < 400 || res.CyclesPerSec > 550) {
				t.Errorf("%.0f cycles/s at rate %v, behind %d", res.CyclesPerSec, tc.rate, res.Behind)
			}
		})
	}
}

// A worker waiting for a far start (a low rate) stops at the end of the
// run, not at its next start.
func TestOpenLoopLowRateEndsAtTheEnd(t *testing.T) {
	o := &driveOpts{workload: workloadUncontended, conns: 4, depth: 1, rate: 0.5, // a cycle every 8s per connection
		duration: 200 * time.Millisecond, grace: time.Second}
	began := time.Now()
	res := runWorkers(context.Background(), o, 4, func(ctx context.Context, id int, c clock) *tally {
		tl := newTally()
		c.serial(id, tl, fakeLock{}.cycle)
		return tl
	})
	if el := time.Since(began); el > time.Second {
		t.Fatalf("took %v", el)
	}
	// Only connection 0's first cycle (at 0) is due in 200ms.
	if res.Cycles != 1 || res.Behind != 0 || res.FellBehind() {
		t.Fatalf("cycles %d, behind %d", res.Cycles, res.Behind)
	}
}
