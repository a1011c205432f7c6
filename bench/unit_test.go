package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
)

func TestTokenOrder(t *testing.T) {
	var o tokenOrder
	steps := []struct {
		key  int
		tok  uint64
		want bool
	}{
		{0, 5, true},   // first grant of key 0
		{0, 6, true},   // grows
		{0, 6, false},  // equal: a token issued twice
		{0, 3, false},  // decreases
		{0, 7, true},   // above the highest seen: fine again
		{9, 1, true},   // another key has its own order
		{9, 1, false},  // equal on that key
		{0, 6, false},  // still compared with 7, not with the rejected 3
		{4, 2, true},   // a key between is untouched by the others
		{9, 10, true},  // grows
		{9, 9, false},  // decreases
		{100, 1, true}, // far key grows the table
	}
	for i, s := range steps {
		if got := o.observe(s.key, s.tok); got != s.want {
			t.Fatalf("step %d: observe(%d, %d) = %v, want %v", i, s.key, s.tok, got, s.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	h := newHistogram()
	if got := summarize(h); got != (Latency{}) {
		t.Fatalf("empty histogram: %+v", got)
	}
	for v := int64(1); v <= 10000; v++ {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	l := summarize(h)
	near := func(name string, got, want int64) {
		t.Helper()
		// 3 significant digits: within 0.1% (plus one for rounding).
		if d := got - want; d < -want/1000-1 || d > want/1000+1 {
			t.Errorf("%s = %d, want about %d", name, got, want)
		}
	}
	if l.Count != 10000 {
		t.Errorf("count = %d", l.Count)
	}
	near("p50", l.P50, 5000)
	near("p90", l.P90, 9000)
	near("p99", l.P99, 9900)
	near("p999", l.P999, 9990)
	near("max", l.Max, 10000)
	if l.Mean < 4990 || l.Mean > 5010 {
		t.Errorf("mean = %v", l.Mean)
	}
}

func TestToUsClamps(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{500 * time.Nanosecond, 1},
		{1500 * time.Microsecond, 1500},
		{2 * time.Minute, histMaxUs},
	} {
		if got := toUs(c.d); got != c.want {
			t.Errorf("toUs(%v) = %d, want %d", c.d, got, c.want)
		}
	}
	// Clamped values must be recordable.
	if err := newHistogram().RecordValue(toUs(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

func TestRecorderMerge(t *testing.T) {
	r := newRecorder()
	s := &connStats{}
	s.add(latAcquire, 100*time.Microsecond, false)
	s.add(latAcquire, 200*time.Microsecond, true)
	s.add(latCycle, 300*time.Microsecond, true)
	s.add(latHandoff, 50*time.Microsecond, true)
	s.done, s.measured, s.requests, s.lastDone = 2, 1, 3, time.Second
	s.addErr("TIMEOUT", 2)
	s.violations, s.fifo = 1, 4
	r.merge(s)
	if len(s.lat) != 0 || s.done != 0 || s.requests != 0 || s.errs["TIMEOUT"] != 0 || s.violations != 0 || s.fifo != 0 {
		t.Fatalf("merge did not reset the connection's stats: %+v", s)
	}
	if r.hist[latAcquire].TotalCount() != 1 || r.hist[latCycle].TotalCount() != 1 || r.hist[latHandoff].TotalCount() != 1 ||
		r.measured != 1 || r.requests != 3 || r.violations != 1 || r.fifo != 4 {
		t.Fatalf("totals: acq %d cyc %d measured %d violations %d fifo %d", r.hist[latAcquire].TotalCount(),
			r.hist[latCycle].TotalCount(), r.measured, r.violations, r.fifo)
	}
	tk := r.takeTick()
	if tk.done != 2 || tk.errTotal != 2 || tk.p50 < 99 || tk.p50 > 101 || tk.p99 < 199 || tk.p99 > 201 {
		t.Fatalf("tick: %+v (warm-up samples belong in the per-second view, other kinds do not)", tk)
	}
	if tk := r.takeTick(); tk.done != 0 || tk.p50 != 0 || tk.errTotal != 2 {
		t.Fatalf("second tick: %+v", tk)
	}
}

func TestPercentiles(t *testing.T) {
	h := newHistogram()
	if percentiles(h) != nil {
		t.Fatal("empty histogram: want no percentiles")
	}
	for v := int64(1); v <= 1000; v++ {
		_ = h.RecordValue(v)
	}
	ps := percentiles(h)
	if len(ps) != len(percentilePoints) || ps[0].Us != 1 || ps[len(ps)-1].Q != 100 || ps[len(ps)-1].Us != 1000 {
		t.Fatalf("percentiles %+v", ps)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].Q <= ps[i-1].Q || ps[i].Us < ps[i-1].Us {
			t.Fatalf("not increasing at %d: %+v", i, ps)
		}
	}
}

func TestCycleKeysDistinct(t *testing.T) {
	seen := make(map[string]string)
	var buf []byte
	add := func(key []byte, who string) {
		t.Helper()
		if !codec.ValidKey(key) {
			t.Fatalf("%s: invalid key %q", who, key)
		}
		if prev, dup := seen[string(key)]; dup {
			t.Fatalf("key %q used by %s and %s", key, prev, who)
		}
		seen[string(key)] = who
	}
	for _, prefix := range []string{cyclePrefix, mixedPrefix, expiryPrefix} {
		for conn := range 12 {
			ks := ownKeys{prefix: prefix, conn: conn, perSlot: 13, slots: 11}
			for slot := range 11 {
				for n := range 13 {
					var idx int
					buf, idx = ks.appendKey(buf[:0], slot, n)
					add(buf, fmt.Sprintf("%s %d/%d/%d", prefix, conn, slot, n))
					if idx != n {
						t.Fatalf("key number %d for cycle %d", idx, n)
					}
					if got, ok := ks.slotOf(buf); !ok || got != slot {
						t.Fatalf("slotOf(%q) = %d %v", buf, got, ok)
					}
					if _, ok := (ownKeys{prefix: prefix, conn: conn + 1, perSlot: 13, slots: 11}).slotOf(buf); ok {
						t.Fatalf("%q belongs to another connection too", buf)
					}
				}
			}
		}
	}
	for i := range 2000 {
		buf = appendHoldKey(buf[:0], i)
		add(buf, fmt.Sprintf("hold %d", i))
		if n, ok := parseHoldKey(buf); !ok || n != i {
			t.Fatalf("parseHoldKey(%q) = %d %v", buf, n, ok)
		}
		if _, _, _, ok := parseCycleKey(cyclePrefix, buf); ok {
			t.Fatalf("hold key %q parses as a cycle key", buf)
		}
	}
	for _, p := range []string{mixedPrefix, expiryPrefix, contendedPrefix} {
		if _, _, _, ok := parseCycleKey(cyclePrefix, []byte(p+"1/2/3")); ok {
			t.Fatalf("a %s key parses as an uncontended one", p)
		}
	}
	if k := appendCycleKey(nil, mixedPrefix, maxConns, maxDepth, maxKeys); len(k) > codec.MaxKey {
		t.Fatalf("longest cycle key %q is too long", k)
	}
}

func TestSharedKeys(t *testing.T) {
	for _, c := range []struct{ conns, depth, keys int }{{16, 1, 1}, {16, 1, 4}, {5, 3, 3}, {4, 4, 7}, {3, 2, 16}} {
		perKey := make([]int, c.keys)
		for conn := range c.conns {
			ks := sharedKeys{prefix: contendedPrefix, conn: conn, depth: c.depth, keys: c.keys}
			mine := map[string]bool{}
			for slot := range c.depth {
				key, idx := ks.appendKey(nil, slot, 7)
				if mine[string(key)] {
					t.Fatalf("%+v: conn %d uses %q twice", c, conn, key)
				}
				mine[string(key)] = true
				perKey[idx]++
				if got, ok := ks.slotOf(key); !ok || got != slot {
					t.Fatalf("%+v: slotOf(%q) = %d %v, want %d", c, key, got, ok, slot)
				}
			}
		}
		for k, n := range perKey {
			if want := c.conns * c.depth / c.keys; n < want || n > want+1 {
				t.Errorf("%+v: key %d has %d clients, want about %d", c, k, n, want)
			}
		}
	}
	ks := sharedKeys{prefix: contendedPrefix, conn: 0, depth: 2, keys: 4}
	for _, k := range []string{"bench/c/4", "bench/c/2", "bench/c/01", "bench/c/", "bench/1/2/3", "bench/c/1x"} {
		if _, ok := ks.slotOf([]byte(k)); ok {
			t.Errorf("slotOf(%q) accepted", k)
		}
	}
}

func TestParseKeysRejects(t *testing.T) {
	for _, k := range []string{"", "bench/", "bench/1/2", "bench/1/2/3/4", "bench/01/2/3", "bench/1//3",
		"bench/1/2/3x", "bench/-1/2/3", "other/1/2/3", "bench/hold/1", "bench/1/2/99999999999999999999"} {
		if _, _, _, ok := parseCycleKey(cyclePrefix, []byte(k)); ok {
			t.Errorf("parseCycleKey(%q) accepted", k)
		}
	}
	for _, k := range []string{"", "bench/hold/", "bench/hold/01", "bench/hold/1/2", "bench/1/2/3", "-"} {
		if _, ok := parseHoldKey([]byte(k)); ok {
			t.Errorf("parseHoldKey(%q) accepted", k)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tbatond\nVmPeak:\t  999 kB\nVmRSS:\t   1234 kB\nThreads:\t9\n"
	if got, err := parseVmRSS([]byte(status)); err != nil || got != 1234*1024 {
		t.Fatalf("parseVmRSS = %d, %v", got, err)
	}
	if _, err := parseVmRSS([]byte("Name:\tx\n")); err == nil {
		t.Fatal("no VmRSS: want an error")
	}
}

func TestConfigNormalize(t *testing.T) {
	ok := Config{Addrs: []string{"x:1"}, Conns: 1, Depth: 1, Keys: 1, Workload: WorkloadUncontended, Duration: time.Second}
	c := ok
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Lease != 10*time.Second {
		t.Errorf("default uncontended lease %v", c.Lease)
	}
	h := ok
	h.Workload, h.Hold = WorkloadHold, 10
	if err := h.Validate(); err != nil || h.Lease != time.Hour {
		t.Errorf("hold: %v, lease %v", err, h.Lease)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Workload = "nope" },
		func(c *Config) { c.Addrs = nil },
		func(c *Config) { c.Conns = 0 },
		func(c *Config) { c.Depth = 0 },
		func(c *Config) { c.Keys = 0 },
		func(c *Config) { c.Duration = 0 },
		func(c *Config) { c.Lease = 25 * time.Hour },
		func(c *Config) { c.Wait = 25 * time.Hour },
		func(c *Config) { c.Ops = -1 },
		func(c *Config) { c.Workload = WorkloadHold; c.Hold = 0 },
	} {
		c := ok
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: want an error", c)
		}
	}
	w := ok
	w.Wait = -time.Millisecond
	_ = w.Validate()
	if w.waitMs() != codec.WaitNone {
		t.Errorf("negative wait: wait_ms %d, want -1", w.waitMs())
	}
	w.Wait = 1500 * time.Microsecond
	if w.waitMs() != 2 {
		t.Errorf("1.5ms wait: wait_ms %d, want 2 (rounded up)", w.waitMs())
	}
}

func TestFmtUs(t *testing.T) {
	for us, want := range map[int64]string{0: "-", 850: "850us", 1234: "1.23ms", 2_500_000: "2.5s"} {
		if got := fmtUs(us); got != want {
			t.Errorf("fmtUs(%d) = %q, want %q", us, got, want)
		}
	}
	if !strings.HasSuffix(fmtBytes(3<<20), "MiB") {
		t.Error("fmtBytes")
	}
}

func TestExportedHistogram(t *testing.T) {
	a, b := NewHistogram(), NewHistogram()
	for i := 1; i <= 100; i++ {
		a.Record(time.Duration(i) * time.Millisecond)
	}
	b.Record(time.Hour) // clamped, not dropped
	a.Merge(b)
	s := a.Summary()
	if s.Count != 101 || s.P50 < 50_000 || s.P50 > 51_100 || s.Max < histMaxUs*999/1000 {
		t.Fatalf("summary %+v", s)
	}
	if ps := a.Percentiles(); len(ps) != len(percentilePoints) || ps[0].Us < 999 || ps[0].Us > 1001 {
		t.Fatalf("percentiles %+v", ps)
	}
}

// TestFaults: every error kind makes a run fail but the answers a
// workload gets by design, TIMEOUT and NOTHELD; the list reads as the
// report's errors line.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		errors map[string]int64
		want   string
	}{
		{"none", map[string]int64{}, ""},
		{"waits and leases that ran out", map[string]int64{"TIMEOUT": 7, "NOTHELD": 1}, ""},
		{"a refused secret", map[string]int64{"ERR auth": 16, "disconnect": 16, "unanswered": 256},
			"ERR auth 16, disconnect 16, unanswered 256"},
		{"mixed with expected ones", map[string]int64{"TIMEOUT": 3, "MOVED": 2, "ERR overloaded": 1, "stalled": 1},
			"ERR overloaded 1, MOVED 2, stalled 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Result{Errors: tc.errors}
			if got := strings.Join(r.Faults(), ", "); got != tc.want {
				t.Fatalf("Faults() = %q, want %q", got, tc.want)
			}
		})
	}
}
