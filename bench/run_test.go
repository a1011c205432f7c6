package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/bench/benchtest"
)

func startFake(t *testing.T, opts benchtest.Options) *benchtest.Server {
	t.Helper()
	s, err := benchtest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestUncontendedAgainstFake(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	var progress bytes.Buffer
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 4, Depth: 8, Keys: 1000,
		Workload: WorkloadUncontended, Duration: time.Second, Warmup: 200 * time.Millisecond,
		Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || res.CyclesPerSec <= 0 {
		t.Fatalf("no cycles: %+v", res)
	}
	if len(res.Errors) != 0 || res.TokenViolations != 0 {
		t.Fatalf("errors %v, violations %d", res.Errors, res.TokenViolations)
	}
	if res.Stop != endTime || res.DurationS < 0.9 || res.DurationS > 2 {
		t.Errorf("stop %q after %.2fs, want time after about 1s", res.Stop, res.DurationS)
	}
	if res.AcquireUs.Count < res.Cycles || res.CycleUs.Count != res.Cycles || res.AcquireUs.P50 <= 0 || res.CycleUs.P99 < res.AcquireUs.P50 {
		t.Errorf("latencies: acquire %+v, cycle %+v, cycles %d", res.AcquireUs, res.CycleUs, res.Cycles)
	}
	if res.Keys != 1000/(4*8)*4*8 {
		t.Errorf("keys = %d", res.Keys)
	}
	if srv.Held() != 0 {
		t.Errorf("%d keys left held after the run", srv.Held())
	}
	if !strings.Contains(progress.String(), "cycles/s") {
		t.Errorf("no progress line: %q", progress.String())
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "errors       none") {
		t.Errorf("summary: %v\n%s", err, text.String())
	}
	js, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"cycles_per_sec"`, `"acquire_us":{`, `"p999"`, `"errors":{}`, `"token_violations":0`} {
		if !bytes.Contains(js, []byte(field)) {
			t.Errorf("JSON lacks %s: %s", field, js)
		}
	}
}

func TestUncontendedOpsLimit(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 3, Depth: 5, Keys: 100,
		Workload: WorkloadUncontended, Duration: 10 * time.Second, Ops: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles != 1000 || res.Stop != endOps {
		t.Fatalf("cycles %d, stop %q: want exactly 1000 ended by ops", res.Cycles, res.Stop)
	}
	if len(res.Errors) != 0 || srv.Held() != 0 {
		t.Fatalf("errors %v, held %d", res.Errors, srv.Held())
	}
}

func TestUncontendedReportsTokenViolations(t *testing.T) {
	srv := startFake(t, benchtest.Options{FixedToken: 7})
	// One key per slot, so every cycle after the first re-grants a key
	// with the same token.
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 1, Depth: 2, Keys: 2,
		Workload: WorkloadUncontended, Duration: time.Second, Ops: 50,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.TokenViolations != res.Cycles-2 || res.Cycles != 50 {
		t.Fatalf("violations %d over %d cycles, want cycles-2", res.TokenViolations, res.Cycles)
	}
}

func TestUncontendedCanceled(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Config{
		Addrs: []string{srv.Addr()}, Conns: 2, Depth: 4, Keys: 100,
		Workload: WorkloadUncontended, Duration: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second || res.Stop != endCanceled || res.Cycles == 0 {
		t.Fatalf("stop %q after %v with %d cycles", res.Stop, time.Since(start), res.Cycles)
	}
}

// A server that never answers: the run must still end, at Duration plus
// the drain timeout, and count what went unanswered.
func TestUncontendedSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	res, err := Run(context.Background(), Config{
		Addrs: []string{ln.Addr().String()}, Conns: 2, Depth: 3, Keys: 100,
		Workload: WorkloadUncontended, Duration: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > drainTimeout+3*time.Second {
		t.Fatalf("took %v", el)
	}
	if res.Errors[errUnanswered] != 6 || res.Cycles != 0 {
		t.Fatalf("errors %v, cycles %d; want 6 unanswered", res.Errors, res.Cycles)
	}
}

func TestRunCannotConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Run(context.Background(), Config{
		Addrs: []string{addr}, Conns: 1, Depth: 1, Keys: 1,
		Workload: WorkloadUncontended, Duration: time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v, want connection refused", err)
	}
}

func TestHoldAgainstFake(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	// A fake RSS that grows with what the server holds and serves.
	var reads atomic.Int64
	rss := func() (int64, error) {
		reads.Add(1)
		return int64(1<<20 + srv.Held()*100 + srv.Accepted()*1000), nil
	}
	var progress bytes.Buffer
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 3, Depth: 4, Workload: WorkloadHold,
		Hold: 500, IdleConns: 20, Duration: 50 * time.Millisecond, RSS: rss, Progress: &progress,
		Settle: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Held != 500 || res.Released != 500 || len(res.Errors) != 0 {
		t.Fatalf("held %d released %d errors %v notes %v", res.Held, res.Released, res.Errors, res.Notes)
	}
	if res.LeaseMs != 3_600_000 {
		t.Errorf("hold lease %d ms, want 1h", res.LeaseMs)
	}
	if reads.Load() != 3 || res.BytesPerLock != 100 || res.BytesPerIdleConn != 1000 || res.IdleConns != 20 {
		t.Errorf("rss reads %d, per lock %v, per idle conn %v, idle %d", reads.Load(), res.BytesPerLock, res.BytesPerIdleConn, res.IdleConns)
	}
	if srv.Held() != 0 {
		t.Errorf("%d keys left held", srv.Held())
	}
	if !strings.Contains(progress.String(), "server RSS after hold") {
		t.Errorf("progress: %q", progress.String())
	}
}

func TestHoldKeep(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 2, Depth: 8, Workload: WorkloadHold, Hold: 100, Keep: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Held != 100 || res.Released != 0 || srv.Held() != 100 {
		t.Fatalf("held %d, released %d, server holds %d", res.Held, res.Released, srv.Held())
	}
}
