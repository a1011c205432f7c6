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
	s.acq = append(s.acq, sample{100, false}, sample{200, true})
	s.cyc = append(s.cyc, 300)
	s.done, s.measured, s.lastDone = 2, 1, time.Second
	s.addErr("TIMEOUT", 2)
	s.violations = 1
	r.merge(s)
	if len(s.acq)+len(s.cyc) != 0 || s.done != 0 || s.errs["TIMEOUT"] != 0 || s.violations != 0 {
		t.Fatalf("merge did not reset the connection's stats: %+v", s)
	}
	if r.acq.TotalCount() != 1 || r.cyc.TotalCount() != 1 || r.measured != 1 || r.violations != 1 {
		t.Fatalf("totals: acq %d cyc %d measured %d violations %d", r.acq.TotalCount(), r.cyc.TotalCount(), r.measured, r.violations)
	}
	tk := r.takeTick()
	if tk.done != 2 || tk.errTotal != 2 || tk.p50 < 99 || tk.p50 > 101 || tk.p99 < 199 || tk.p99 > 201 {
		t.Fatalf("tick: %+v (warm-up samples belong in the per-second view)", tk)
	}
	if tk := r.takeTick(); tk.done != 0 || tk.p50 != 0 || tk.errTotal != 2 {
		t.Fatalf("second tick: %+v", tk)
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
	for conn := range 12 {
		for slot := range 11 {
			for idx := range 13 {
				buf = appendCycleKey(buf[:0], conn, slot, idx)
				add(buf, fmt.Sprintf("cycle %d/%d/%d", conn, slot, idx))
				c, s, i, ok := parseCycleKey(buf)
				if !ok || c != conn || s != slot || i != idx {
					t.Fatalf("parseCycleKey(%q) = %d %d %d %v", buf, c, s, i, ok)
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
		if _, _, _, ok := parseCycleKey(buf); ok {
			t.Fatalf("hold key %q parses as a cycle key", buf)
		}
	}
	if k := appendCycleKey(nil, maxConns, maxDepth, maxKeys); len(k) > codec.MaxKey {
		t.Fatalf("longest cycle key %q is too long", k)
	}
}

func TestParseKeysRejects(t *testing.T) {
	for _, k := range []string{"", "bench/", "bench/1/2", "bench/1/2/3/4", "bench/01/2/3", "bench/1//3",
		"bench/1/2/3x", "bench/-1/2/3", "other/1/2/3", "bench/hold/1", "bench/1/2/99999999999999999999"} {
		if _, _, _, ok := parseCycleKey([]byte(k)); ok {
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
