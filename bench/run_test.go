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
	"github.com/baton-dev/baton/codec"
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
	for _, shape := range []string{ShapeWindow, ShapeBatch} {
		t.Run(shape, func(t *testing.T) {
			srv := startFake(t, benchtest.Options{})
			res, err := Run(context.Background(), Config{
				Addrs: []string{srv.Addr()}, Conns: 3, Depth: 5, Keys: 100, Shape: shape,
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
		})
	}
}

func TestUncontendedReportsTokenViolations(t *testing.T) {
	for _, shape := range []string{ShapeWindow, ShapeBatch} {
		t.Run(shape, func(t *testing.T) {
			srv := startFake(t, benchtest.Options{FixedToken: 7})
			// One key per slot, so every cycle after the first re-grants a
			// key with the same token.
			res, err := Run(context.Background(), Config{
				Addrs: []string{srv.Addr()}, Conns: 1, Depth: 2, Keys: 2, Shape: shape,
				Workload: WorkloadUncontended, Duration: time.Second, Ops: 50,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.TokenViolations != res.Cycles-2 || res.Cycles != 50 {
				t.Fatalf("violations %d over %d cycles, want cycles-2", res.TokenViolations, res.Cycles)
			}
		})
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

func TestContendedAgainstFake(t *testing.T) {
	for _, c := range []struct {
		name string
		lifo bool
	}{{"fifo server", false}, {"lifo server", true}} {
		t.Run(c.name, func(t *testing.T) {
			srv := startFake(t, benchtest.Options{Queue: true, LIFO: c.lifo})
			var progress bytes.Buffer
			res, err := Run(context.Background(), Config{
				Addrs: []string{srv.Addr()}, Conns: 8, Depth: 1, Keys: 1,
				Workload: WorkloadContended, Duration: time.Second, Warmup: 100 * time.Millisecond,
				// The fake hands off within microseconds: a small slack
				// still tells a LIFO queue from a FIFO one.
				FIFOSlack: 50 * time.Millisecond, Progress: &progress,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Cycles == 0 || res.HandoffsPerSec <= 0 || res.FIFOChecked < res.Cycles || res.HandoffUs == nil {
				t.Fatalf("no hand-offs: %+v", res)
			}
			if len(res.Errors) != 0 || res.TokenViolations != 0 || res.Keys != 1 {
				t.Fatalf("errors %v, token violations %d, keys %d", res.Errors, res.TokenViolations, res.Keys)
			}
			if c.lifo != (res.FIFOViolations > 0) || c.lifo != res.Failed() {
				t.Fatalf("LIFO %v: %d FIFO violations in %d grants", c.lifo, res.FIFOViolations, res.FIFOChecked)
			}
			if srv.Held() != 0 {
				t.Errorf("%d keys left held", srv.Held())
			}
			if !strings.Contains(progress.String(), "hand-offs/s") {
				t.Errorf("progress: %q", progress.String())
			}
			var text bytes.Buffer
			_ = res.WriteText(&text)
			if want := map[bool]string{false: "none overtook", true: "VIOLATIONS"}[c.lifo]; !strings.Contains(text.String(), want) {
				t.Errorf("summary lacks %q:\n%s", want, text.String())
			}
		})
	}
}

func TestContendedSeveralKeysAndDepth(t *testing.T) {
	srv := startFake(t, benchtest.Options{Queue: true})
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 6, Depth: 3, Keys: 4,
		Workload: WorkloadContended, Duration: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || len(res.Errors) != 0 || res.Failed() || srv.Held() != 0 {
		t.Fatalf("cycles %d errors %v fifo %d tokens %d held %d", res.Cycles, res.Errors, res.FIFOViolations, res.TokenViolations, srv.Held())
	}
}

func TestMixedAgainstFake(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 2, Depth: 4, Keys: 100,
		Workload: WorkloadMixed, Duration: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || len(res.Errors) != 0 || res.Failed() {
		t.Fatalf("cycles %d errors %v", res.Cycles, res.Errors)
	}
	// Four answered requests per cycle, plus those of cycles under way.
	if res.OpsPerSec < 4*res.CyclesPerSec || res.OpsPerSec > 4*res.CyclesPerSec*1.1+100 {
		t.Errorf("ops/s %.0f for %.0f cycles/s", res.OpsPerSec, res.CyclesPerSec)
	}
	for name, l := range map[string]*Latency{"release": res.ReleaseUs, "extend": res.ExtendUs, "query": res.QueryUs} {
		if l == nil || l.Count < res.Cycles {
			t.Errorf("%s latency %+v for %d cycles", name, l, res.Cycles)
		}
	}
}

func TestOpenLoopRate(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 4, Depth: 4, Keys: 1000,
		Workload: WorkloadUncontended, Duration: 1500 * time.Millisecond, Warmup: 200 * time.Millisecond, Rate: 2000,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The fake is far faster than 2000 cycles/s: the rate is the limit.
	// The loop may end a few cycles behind its schedule when the machine
	// is busy (make test runs packages in parallel, under -race): 40 is
	// 20 ms of the schedule; a loop that cannot keep up is far more.
	if res.CyclesPerSec < 1800 || res.CyclesPerSec > 2200 || res.Behind > 40 || len(res.Notes) != 0 || len(res.Errors) != 0 {
		t.Fatalf("%.0f cycles/s at rate 2000, behind %d, errors %v, notes %v", res.CyclesPerSec, res.Behind, res.Errors, res.Notes)
	}
	if len(res.Series) < 1 || res.Rate != 2000 {
		t.Fatalf("series %v, rate %v", res.Series, res.Rate)
	}
}

// A server slower than the rate: the open loop falls behind, and the
// latency counts the time cycles waited for a slot (coordinated omission).
func TestOpenLoopCountsQueueing(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	closed, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 1, Depth: 1, Keys: 10,
		Workload: WorkloadUncontended, Duration: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Twice what one cycle in flight can do.
	rate := 2 * closed.CyclesPerSec
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 1, Depth: 1, Keys: 10,
		Workload: WorkloadUncontended, Duration: 500 * time.Millisecond, Rate: rate,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Behind == 0 || res.AcquireUs.P99 < 10*closed.AcquireUs.P99 {
		t.Fatalf("rate %.0f against a %.0f cycles/s server: behind %d, p99 %dus (closed loop %dus)",
			rate, closed.CyclesPerSec, res.Behind, res.AcquireUs.P99, closed.AcquireUs.P99)
	}
}

func TestOpenLoopLowRateEndsPromptly(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	start := time.Now()
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 8, Depth: 1, Keys: 10,
		Workload: WorkloadUncontended, Duration: 300 * time.Millisecond, Rate: 1, // one cycle every 8s per connection
	})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("took %v: waiting connections must notice the end", el)
	}
	if res.Stop != endTime || len(res.Errors) != 0 {
		t.Fatalf("stop %q, errors %v", res.Stop, res.Errors)
	}
}

func TestViaClientAgainstFake(t *testing.T) {
	for _, c := range []struct {
		workload           string
		conns, depth, keys int
	}{{WorkloadUncontended, 2, 3, 100}, {WorkloadContended, 6, 1, 1}} {
		t.Run(c.workload, func(t *testing.T) {
			srv := startFake(t, benchtest.Options{Queue: true})
			var progress bytes.Buffer
			res, err := Run(context.Background(), Config{
				Addrs: []string{srv.Addr()}, Conns: c.conns, Depth: c.depth, Keys: c.keys, Via: ViaClient,
				Workload: c.workload, Duration: time.Second, Warmup: 100 * time.Millisecond, Progress: &progress,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Cycles == 0 || len(res.Errors) != 0 || res.Failed() || res.Via != ViaClient || res.ReleaseUs == nil {
				t.Fatalf("cycles %d errors %v fifo %d tokens %d via %q", res.Cycles, res.Errors, res.FIFOViolations, res.TokenViolations, res.Via)
			}
			if c.workload == WorkloadContended && (res.FIFOChecked == 0 || res.HandoffUs == nil) {
				t.Fatalf("contended: %d grants checked, hand-off %v", res.FIFOChecked, res.HandoffUs)
			}
			if srv.Held() != 0 {
				t.Errorf("%d keys left held", srv.Held())
			}
			if !strings.Contains(progress.String(), res.Unit+"/s") {
				t.Errorf("progress %q", progress.String())
			}
		})
	}
	for _, bad := range []Config{
		{Workload: WorkloadMixed, Via: ViaClient},
		{Workload: WorkloadMixed, Via: ViaClient, Rate: 10},
		{Workload: WorkloadUncontended, Via: "carrier pigeon"},
	} {
		bad.Addrs, bad.Conns, bad.Depth, bad.Keys, bad.Duration = []string{"127.0.0.1:1"}, 1, 1, 1, time.Second
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
}

// Open loop through the Go client: the slots of a client share its
// schedule, the rate is kept against a fast server and missed against a
// slow one, whose queueing then shows in the latency (no coordinated
// omission), and a low rate still ends at the end.
func TestViaClientOpenLoop(t *testing.T) {
	srv := startFake(t, benchtest.Options{Queue: true})
	run := func(t *testing.T, cfg Config) *Result {
		t.Helper()
		cfg.Addrs, cfg.Via = []string{srv.Addr()}, ViaClient
		if cfg.Workload == "" {
			cfg.Workload = WorkloadUncontended
		}
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Errors) != 0 || res.Failed() {
			t.Fatalf("errors %v, fifo %d, tokens %d", res.Errors, res.FIFOViolations, res.TokenViolations)
		}
		return res
	}
	t.Run("keeps the rate", func(t *testing.T) {
		for _, c := range []struct {
			workload           string
			conns, depth, keys int
		}{{WorkloadUncontended, 4, 2, 1000}, {WorkloadContended, 4, 1, 1}} {
			var progress bytes.Buffer
			res := run(t, Config{Workload: c.workload, Conns: c.conns, Depth: c.depth, Keys: c.keys, Rate: 1000,
				Duration: 1500 * time.Millisecond, Warmup: 200 * time.Millisecond, Progress: &progress})
			if res.CyclesPerSec < 900 || res.CyclesPerSec > 1100 || res.FellBehind() || len(res.Notes) != 0 || res.Rate != 1000 {
				t.Errorf("%s: %.0f cycles/s at rate 1000, behind %d, notes %v", c.workload, res.CyclesPerSec, res.Behind, res.Notes)
			}
			// Published while the slots wait: every second has its line.
			if n := strings.Count(progress.String(), res.Unit+"/s"); n < 1 {
				t.Errorf("%s: %d progress lines", c.workload, n)
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "target 1000 cycles/s") {
				t.Errorf("%s: summary %v:\n%s", c.workload, err, text.String())
			}
		}
	})
	t.Run("falls behind", func(t *testing.T) {
		closed := run(t, Config{Conns: 1, Depth: 1, Keys: 10, Duration: 300 * time.Millisecond})
		// Four times what one cycle in flight did: the 300 ms closed-loop
		// measure can come out low on a loaded machine (in CI once at 0.6
		// of what the open loop then did, which at twice the rate fell
		// behind by less than a tenth of a second's cycles).
		rate := 4 * closed.CyclesPerSec
		res := run(t, Config{Conns: 1, Depth: 1, Keys: 10, Duration: 500 * time.Millisecond, Rate: rate})
		if !res.FellBehind() || len(res.Notes) == 0 || res.AcquireUs.P99 < 10*closed.AcquireUs.P99 {
			t.Fatalf("rate %.0f against %.0f cycles/s through the client: behind %d, p99 %dus (closed loop %dus)",
				rate, closed.CyclesPerSec, res.Behind, res.AcquireUs.P99, closed.AcquireUs.P99)
		}
	})
	t.Run("low rate ends promptly", func(t *testing.T) {
		start := time.Now()
		res := run(t, Config{Conns: 8, Depth: 2, Keys: 100, Duration: 300 * time.Millisecond, Rate: 1})
		if el := time.Since(start); el > 2*time.Second || res.Stop != endTime {
			t.Fatalf("took %v, stop %q: slots waiting for their start must notice the end", el, res.Stop)
		}
		if res.Cycles != 1 || res.Behind != 0 {
			t.Fatalf("cycles %d, behind %d: only the first client's first cycle was due", res.Cycles, res.Behind)
		}
	})
}

// With Owners, every acquire carries an owner of the Go client's form, a
// new one for every cycle.
func TestUncontendedWithOwners(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 2, Depth: 4, Keys: 100,
		Workload: WorkloadUncontended, Ops: 500, Duration: 10 * time.Second, Warmup: 0, Owners: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Owners || len(res.Errors) != 0 || res.Cycles != 500 {
		t.Fatalf("owners %v, errors %v, cycles %d", res.Owners, res.Errors, res.Cycles)
	}
	owners := srv.Owners()
	if len(owners) < 500 {
		t.Fatalf("%d distinct owners for %d cycles", len(owners), res.Cycles)
	}
	for o, n := range owners {
		if n != 1 || len(o) != 32 || !codec.ValidOwner([]byte(o)) {
			t.Fatalf("owner %q sent %d times", o, n)
		}
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "with owners") {
		t.Errorf("summary: %v\n%s", err, text.String())
	}
}
