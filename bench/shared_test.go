package bench

// Shared holds (Config.Permits): the S lines the drivers send, and the
// contended workload's semaphore checks against the fake, sound and broken.

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/bench/benchtest"
	"github.com/baton-dev/baton/codec"
)

// TestSharedRequestLines: with Permits every acquire of a cycle is
// "S key permits lease_ms wait_ms [owner]", its answer is paired by the
// op S, and the rest of the cycle is unchanged.
func TestSharedRequestLines(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Workload: WorkloadContended, Keys: 1, Permits: 16, Lease: 10 * time.Second}, "S bench/c/0 16 10000 0\n"},
		{Config{Workload: WorkloadContended, Keys: 1, Permits: 2, Lease: 1500 * time.Microsecond, Wait: -1}, "S bench/c/0 2 2 -1\n"},
		{Config{Workload: WorkloadContended, Keys: 1, Lease: time.Second, Wait: time.Second}, "A bench/c/0 1000 1000\n"},
		{Config{Workload: WorkloadUncontended, Keys: 1, Permits: 1, Lease: time.Second, Owners: true}, "S bench/0/0/0 1 1000 0 "},
	} {
		cfg := c.cfg
		cfg.Addrs, cfg.Conns, cfg.Depth, cfg.Duration = []string{"127.0.0.1:1"}, 1, 1, time.Second
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		spec := cycleSpecs[cfg.Workload]
		keys, lines := cycleKeys(&cfg, &spec)
		cy := &cycler{
			w: &wire{}, p: newPhase(), rec: newRecorder(), ops: &opsBudget{}, spec: &spec, lines: lines,
			keys: keys(0), leaseMs: cfg.leaseMs(), waitMs: cfg.waitMs(), slots: make([]cycleSlot, 1),
			acqOp: cfg.acquireOp(), permits: uint32(cfg.Permits),
		}
		if cfg.Owners {
			cy.owners = newOwnerSource()
		}
		initSlots(cy.slots, 0)
		cy.begin(0)
		got := string(cy.w.out)
		if !strings.HasPrefix(got, c.want) || cfg.Owners && len(got) != len(c.want)+33 {
			t.Errorf("permits %d: sent %q, want %q", cfg.Permits, got, c.want)
		}
		// The grant is paired by the op sent, and the release follows.
		cy.w.out = cy.w.out[:0]
		op := got[:1]
		key := strings.Fields(got)[1]
		r := parseAnswer(t, op+" "+key+" OK 5")
		cy.response(&r, time.Millisecond)
		if want := "R " + key + " 5\n"; string(cy.w.out) != want {
			t.Errorf("permits %d: after the grant %q, want %q", cfg.Permits, cy.w.out, want)
		}
	}
	for _, bad := range []Config{
		{Workload: WorkloadContended, Permits: -1},
		{Workload: WorkloadContended, Permits: 1_000_001},
		{Workload: WorkloadMixed, Permits: 2},
		{Workload: WorkloadExpiry, Permits: 2},
		{Workload: WorkloadHold, Permits: 2, Hold: 10},
	} {
		bad.Addrs, bad.Conns, bad.Depth, bad.Keys, bad.Duration = []string{"127.0.0.1:1"}, 1, 1, 1, time.Second
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
}

// TestContendedSharedAgainstFake: 16 clients on one key of 3 permits, by
// wire and through the client: grants, no errors, no violations, and the
// report says so. A fake that serves its queue newest first is caught (one
// that grants a holder too many is not, reliably: see keyLines; the check
// itself is TestKeyLinesShared's).
func TestContendedSharedAgainstFake(t *testing.T) {
	for _, c := range []struct {
		name string
		opts benchtest.Options
		via  string
	}{
		{"sound", benchtest.Options{Queue: true}, ViaWire},
		{"sound via client", benchtest.Options{Queue: true}, ViaClient},
		{"lifo", benchtest.Options{Queue: true, LIFO: true}, ViaWire},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startFake(t, c.opts)
			res, err := Run(context.Background(), Config{
				Addrs: []string{srv.Addr()}, Conns: 16, Depth: 1, Keys: 1, Permits: 3, Via: c.via,
				Workload: WorkloadContended, Duration: time.Second, Warmup: 100 * time.Millisecond,
				// Every pair of the latest grants is compared, and
				// through the client an acquire leaves a while after it
				// is noted: a wide slack, which the LIFO fake's
				// starved waiters (a whole run) still exceed.
				FIFOSlack: 200 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Cycles == 0 || res.FIFOChecked < res.Cycles || len(res.Errors) != 0 || res.Permits != 3 {
				t.Fatalf("cycles %d, checked %d, errors %v, permits %d", res.Cycles, res.FIFOChecked, res.Errors, res.Permits)
			}
			if res.TokenViolations != 0 {
				t.Errorf("%d token violations", res.TokenViolations)
			}
			lifo := c.opts.LIFO
			if res.PermitViolations > 0 || lifo != (res.FIFOViolations > 0) || lifo != res.Failed() {
				t.Errorf("%d permit violations, %d FIFO violations in %d grants", res.PermitViolations, res.FIFOViolations, res.FIFOChecked)
			}
			if srv.Held() != 0 {
				t.Errorf("%d keys left held", srv.Held())
			}
			var text bytes.Buffer
			_ = res.WriteText(&text)
			want := "never more than 3 holders"
			if !strings.Contains(text.String(), want) || !strings.Contains(text.String(), "3 permits per key") {
				t.Errorf("summary lacks %q:\n%s", want, text.String())
			}
			js, _ := json.Marshal(res)
			if !bytes.Contains(js, []byte(`"permits":3`)) {
				t.Errorf("JSON lacks the permits: %s", js)
			}
		})
	}
}

// parseAnswer parses an answer line for a handler.
func parseAnswer(t *testing.T, line string) codec.Response {
	t.Helper()
	var r codec.Response
	if err := codec.ParseResponse([]byte(line), &r); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return r
}
