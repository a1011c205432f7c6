package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/bench"
)

func writeResult(t *testing.T, dir, name string, r *bench.Result) {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTable(t *testing.T) {
	dir := t.TempDir()
	writeResult(t, dir, "b.json", &bench.Result{Conns: 16, Depth: 16, CyclesPerSec: 200_000,
		AcquireUs: bench.Latency{P50: 500, P99: 2000}, CycleUs: bench.Latency{P50: 1000}, Errors: map[string]int64{}})
	writeResult(t, dir, "e.json", &bench.Result{Conns: 16, Depth: 16, CyclesPerSec: 2_500,
		AcquireUs: bench.Latency{P50: 10_000, P99: 30_000}, Errors: map[string]int64{"lock: timeout": 2}})
	writeResult(t, dir, "c.json", &bench.Result{Conns: 16, Depth: 1, CyclesPerSec: 3000, HandoffsPerSec: 3000,
		AcquireUs: bench.Latency{P50: 5000}})
	writeResult(t, dir, "r.json", &bench.Result{Conns: 16, Depth: 1, CyclesPerSec: 1500, HandoffsPerSec: 1500,
		AcquireUs: bench.Latency{P50: 1_500_000}})
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "manifest.tsv")
	lines := "# comment\nunc\tbaton-3nodes\tb.json\nunc\tetcd-3nodes\te.json\nunc\tredis-always\tmissing.json\n" +
		"con\tbaton-1node\tc.json\ncon\tredis-always\tr.json\ncon\tetcd-3nodes\tbroken.json\n"
	if err := os.WriteFile(manifest, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	es, err := readManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeTable(&b, es); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	expectIn(t, "table", out, out,
		"### unc", "### con",
		"| baton-3nodes | 16 x 16 | 200,000 | 500 µs | 2 ms | 1 ms | none |",
		"| etcd-3nodes | 16 x 16 | 2,500 | 10 ms | 30 ms | - | lock: timeout 2 |",
		"| redis-always | | failed: no result |",
		"| etcd-3nodes | | failed: no result |",
		"baton-3nodes / etcd-3nodes: rate 80.00x, acquire p50 0.05x",
		"baton-1node / redis-always: rate 2.00x, acquire p50 0.0033x",
	)
	if strings.Index(out, "### unc") > strings.Index(out, "### con") {
		t.Error("sections out of manifest order")
	}
	if strings.Count(out, " / ") != 2 {
		t.Errorf("want exactly the two ratios with a result on both sides:\n%s", out)
	}

	if err := os.WriteFile(manifest, []byte("only two\tfields\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readManifest(manifest); err == nil {
		t.Error("a malformed manifest line: want an error")
	}
}

// tableOf writes results into a directory with a manifest of lines (each
// "section<TAB>system<TAB>file") and returns the table the manifest gives.
func tableOf(t *testing.T, results map[string]*bench.Result, lines string) string {
	t.Helper()
	dir := t.TempDir()
	for name, r := range results {
		writeResult(t, dir, name, r)
	}
	manifest := filepath.Join(dir, "manifest.tsv")
	if err := os.WriteFile(manifest, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	es, err := readManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeTable(&b, es); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// expectIn reports every one of wants that text lacks; what names the
// text in the message, and all is printed with it.
func expectIn(t *testing.T, what, text, all string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, all)
		}
	}
}

// A fixed-rate section is read by latency and by whether each system kept
// the rate; a saturation section beside it keeps its own table.
func TestTableRateSection(t *testing.T) {
	open := func(done float64, behind, p50, p99 int64) *bench.Result {
		return &bench.Result{Conns: 16, Depth: 1, Rate: 1000, CyclesPerSec: done, Behind: behind,
			AcquireUs: bench.Latency{P50: p50, P99: p99}, CycleUs: bench.Latency{P50: 2 * p50}, Errors: map[string]int64{}}
	}
	out := tableOf(t, map[string]*bench.Result{
		"b1.json": open(998, 3, 300, 900),
		"b3.json": open(995, 0, 1200, 4000),
		"e.json":  open(700, 5000, 3000, 300_000),
		"r.json":  open(999, 0, 100, 400),
		// On schedule, but half its cycles failed: the rate was not
		// achieved either.
		"n.json": {Conns: 16, Depth: 1, Rate: 1000, CyclesPerSec: 500, AcquireUs: bench.Latency{P50: 80, P99: 200},
			Errors: map[string]int64{"set: timeout": 5000}},
		"sat.json": {Conns: 16, Depth: 16, CyclesPerSec: 50_000, AcquireUs: bench.Latency{P50: 1000, P99: 5000}},
	}, "sat\tbaton-1node\tsat.json\n"+
		"fixed rate\tbaton-1node\tb1.json\nfixed rate\tbaton-3nodes\tb3.json\nfixed rate\tetcd-3nodes\te.json\n"+
		"fixed rate\tredis-always\tr.json\nfixed rate\tredis-nopersist\tn.json\nfixed rate\tredis-everysec\tmissing.json\n")
	rateTable := out[strings.Index(out, "### fixed rate"):]
	expectIn(t, "rate section", rateTable, out,
		"| system | conns x depth | target/s | done/s | kept the rate | acquire p50 | acquire p99 | cycle p50 | errors |",
		"| baton-1node | 16 x 1 | 1,000 | 998 | yes | 300 µs | 900 µs | 600 µs | none |",
		"| baton-3nodes | 16 x 1 | 1,000 | 995 | yes | 1.2 ms | 4 ms | 2.4 ms | none |",
		"| etcd-3nodes | 16 x 1 | 1,000 | 700 | no: 5,000 cycles behind | 3 ms | 300 ms | 6 ms | none |",
		"| redis-nopersist | 16 x 1 | 1,000 | 500 | no: 50% done | 80 µs | 200 µs | - | set: timeout 5000 |",
		"| redis-everysec | | | failed: no result |",
		"- baton-1node / etcd-3nodes: acquire p50 0.10x, p99 0.003x (below 1: baton is faster); did not keep the rate: etcd-3nodes\n",
		"- baton-3nodes / redis-always: acquire p50 12.00x, p99 10.00x (below 1: baton is faster)\n",
		"- baton-3nodes / redis-nopersist: acquire p50 15.00x, p99 20.00x (below 1: baton is faster); did not keep the rate: redis-nopersist\n",
	)
	// Throughput is set by the target here: a rate ratio would say nothing.
	if strings.Contains(rateTable, ": rate ") {
		t.Errorf("rate section with a rate ratio:\n%s", out)
	}
	if n := strings.Count(rateTable, " / "); n != 6 {
		t.Errorf("%d ratios in the rate section, want 2 baton rows x 3 others with a result:\n%s", n, out)
	}
	if !strings.Contains(out, "| baton-1node | 16 x 16 | 50,000 | 1 ms | 5 ms | - | none |") {
		t.Errorf("saturation section:\n%s", out)
	}
}

func TestKeptRate(t *testing.T) {
	for _, tc := range []struct {
		done   float64
		behind int64
		want   string
	}{
		{1000, 0, "yes"},
		{950, 16, "yes"},                          // cycles in flight at the end
		{990, 200, "no: 200 cycles behind"},       // 200ms of the schedule
		{850, 0, "no: 85% done"},                  // started on time, not achieved
		{400, 60_000, "no: 60,000 cycles behind"}, // behind says more than the share
	} {
		r := &bench.Result{Conns: 16, Rate: 1000, CyclesPerSec: tc.done, Behind: tc.behind}
		ok, text := keptRate(r)
		if text != tc.want || ok != (tc.want == "yes") {
			t.Errorf("done %v, behind %d: %v %q, want %q", tc.done, tc.behind, ok, text, tc.want)
		}
	}
}

func TestFormatting(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567"} {
		if got := fmtRate(v); got != want {
			t.Errorf("fmtRate(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{2.5: "2.50x", 0.1: "0.10x", 0.05: "0.05x", 0.0033333: "0.0033x", 0: "0x"} {
		if got := fmtRatio(v); got != want {
			t.Errorf("fmtRatio(%v) = %q, want %q", v, got, want)
		}
	}
	for us, want := range map[int64]string{0: "-", 12: "12 µs", 1500: "1.5 ms", 2_000_000: "2 s"} {
		if got := fmtUs(us); got != want {
			t.Errorf("fmtUs(%d) = %q, want %q", us, got, want)
		}
	}
	for err, want := range map[error]string{
		context.DeadlineExceeded:                        "timeout",
		fmt.Errorf("lock: %w", context.Canceled):        "canceled",
		errors.New("etcdserver: too many requests (x)"): "etcdserver",
		errors.New("plain"):                             "plain",
	} {
		if got := errKind(err); got != want {
			t.Errorf("errKind(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestClockAndKeys(t *testing.T) {
	base := time.Now()
	c := clock{measureFrom: base.Add(time.Second), end: base.Add(3 * time.Second)}
	for _, tc := range []struct {
		start, done time.Duration
		want        bool
	}{{0, 2 * time.Second, false}, {time.Second, 2 * time.Second, true}, {2 * time.Second, 4 * time.Second, false}} {
		if got := c.measured(base.Add(tc.start), base.Add(tc.done)); got != tc.want {
			t.Errorf("measured(%v, %v) = %v", tc.start, tc.done, got)
		}
	}
	tl := newTally()
	tl.record(c, base.Add(time.Second), base.Add(time.Second+time.Millisecond), base.Add(time.Second+3*time.Millisecond))
	tl.record(c, base, base, base) // warm-up: not counted
	if tl.cycles != 1 || tl.acq.Summary().P50 < 999 || tl.cyc.Summary().P50 < 2990 {
		t.Fatalf("tally: %d cycles, acquire %+v, cycle %+v", tl.cycles, tl.acq.Summary(), tl.cyc.Summary())
	}
	if k := slotKey("/p/", 3, 4, 9); k != "/p/3/1" {
		t.Errorf("slotKey = %q", k)
	}
}

func TestRunUsage(t *testing.T) {
	var out, errb bytes.Buffer
	ctx := context.Background()
	if code := run(ctx, nil, &out, &errb); code != 2 {
		t.Errorf("no arguments: exit %d", code)
	}
	for _, args := range [][]string{
		{"nope"},
		{"drive", "--system", "etcd"},
		{"drive", "--system", "etcd", "--endpoints", "127.0.0.1:1", "--workload", "contended", "--depth", "2"},
		{"drive", "--system", "mongo", "--endpoints", "127.0.0.1:1"},
		{"drive", "--system", "redis", "--endpoints", "127.0.0.1:1", "--rate", "-1"},
		{"drive", "--system", "redis", "--endpoints", "127.0.0.1:1", "--rate", "NaN"},
		{"drive", "--system", "redis", "--endpoints", "127.0.0.1:1", "--rate", "1e12"},
		{"drive", "--system", "redis", "--endpoints", "127.0.0.1:1", "--depth", "16", "--shape", "window"},
		{"drive", "--system", "etcd", "--endpoints", "127.0.0.1:1", "--depth", "16", "--shape", "batch"},
		{"drive", "--system", "redis", "--endpoints", "127.0.0.1:1", "--shape", "zigzag"},
		{"ready", "--system", "etcd"},
		{"table"},
	} {
		errb.Reset()
		if code := run(ctx, args, &out, &errb); code == 0 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
