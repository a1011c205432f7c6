package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/bench"
)

// Each driver has one shape of pipelined load; --shape names it or is
// refused, saying which the driver has.
func TestCheckShape(t *testing.T) {
	for _, tc := range []struct {
		system, workload, shape string
		says                    string // "" when accepted
	}{
		{"redis", workloadUncontended, "", ""},
		{"redis", workloadUncontended, bench.ShapeBatch, ""},
		{"redis", workloadUncontended, bench.ShapeWindow, "runs batches"},
		{"redis", workloadContended, bench.ShapeWindow, ""},
		{"redis", workloadContended, bench.ShapeBatch, "runs a sliding window"},
		{"etcd", workloadUncontended, "", ""},
		{"etcd", workloadUncontended, bench.ShapeWindow, ""},
		{"etcd", workloadUncontended, bench.ShapeBatch, "runs a sliding window"},
		{"redis", workloadUncontended, "zigzag", `--shape "zigzag": want window or batch`},
	} {
		err := checkShape(&driveOpts{system: tc.system, workload: tc.workload, shape: tc.shape})
		if tc.says == "" && err != nil || tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("%s %s --shape %q: %v, want %q", tc.system, tc.workload, tc.shape, err, tc.says)
		}
	}
}

// A worker that files whole pipelines gets them in the result as a batch
// run's rounds, measured ones only; one that files none gets none.
func TestRoundsInResult(t *testing.T) {
	o := &driveOpts{workload: workloadUncontended, conns: 2, depth: 4,
		duration: 300 * time.Millisecond, warmup: 50 * time.Millisecond, grace: time.Second}
	const acqTrip, relTrip = 4 * time.Millisecond, time.Millisecond
	for _, rounds := range []bool{true, false} {
		res := runWorkers(context.Background(), o, o.conns, func(ctx context.Context, id int, c clock) *tally {
			tl := newTally()
			var starts []time.Time
			for {
				if starts = c.starts(id, o.depth, starts); len(starts) == 0 {
					return tl
				}
				sent := time.Now()
				time.Sleep(acqTrip)
				granted := time.Now()
				time.Sleep(relTrip)
				done := time.Now()
				if rounds {
					tl.recordRound(c, sent, granted, granted, done)
				}
				for _, s := range starts {
					tl.record(c, s, granted, done)
				}
			}
		})
		if !rounds {
			if res.RoundUs != nil || res.Shape != "" {
				t.Errorf("no pipelines filed: shape %q, rounds %+v", res.Shape, res.RoundUs)
			}
			continue
		}
		r := res.RoundUs
		if r == nil || res.Shape != bench.ShapeBatch {
			t.Fatalf("shape %q, rounds %+v", res.Shape, r)
		}
		// Every measured cycle belongs to a measured round of depth
		// cycles, but a round that began in the warm-up may end in the
		// measured time (its cycles' starts came before its write).
		if r.Acquire.Count != r.Release.Count || r.Acquire.Count*int64(o.depth) < res.Cycles || r.Acquire.Count*int64(o.depth) > res.Cycles+int64(o.depth*o.conns) {
			t.Errorf("%d acquire rounds, %d release rounds for %d cycles of depth %d", r.Acquire.Count, r.Release.Count, res.Cycles, o.depth)
		}
		if r.Acquire.P50 < acqTrip.Microseconds() || r.Release.P50 < relTrip.Microseconds() || r.Release.P50 >= r.Acquire.P50 {
			t.Errorf("acquire round p50 %dus, release round p50 %dus; want at least %v and %v", r.Acquire.P50, r.Release.P50, acqTrip, relTrip)
		}
	}
}

// The Redis driver against a real redis-server, when one is installed
// (make compare installs it): its rounds are reported as a batch run's,
// without errors, and every lock is released.
func TestRedisBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server: skipped with -short")
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	_ = ln.Close()
	srv := exec.Command(path, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := redisReady(ctx, addr); err != nil {
		t.Fatal(err)
	}
	o := &driveOpts{system: "redis", endpoints: []string{addr}, workload: workloadUncontended, shape: bench.ShapeBatch,
		conns: 2, depth: 16, keys: 1000, lease: 10 * time.Second,
		duration: 300 * time.Millisecond, warmup: 50 * time.Millisecond, grace: 2 * time.Second}
	if err := checkShape(o); err != nil {
		t.Fatal(err)
	}
	res, err := runRedis(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f cycles/s, acquire %+v, rounds %+v", res.CyclesPerSec, res.AcquireUs, res.RoundUs)
	if res.Cycles == 0 || len(res.Errors) != 0 || res.Shape != bench.ShapeBatch {
		t.Fatalf("cycles %d, errors %v, shape %q", res.Cycles, res.Errors, res.Shape)
	}
	if r := res.RoundUs; r == nil || r.Acquire.Count == 0 || r.Release.Count != r.Acquire.Count {
		t.Fatalf("rounds %+v", res.RoundUs)
	}
	rdb := newRedisClient(addr, 1)
	defer rdb.Close()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys left held (%v)", n, err)
	}
}
