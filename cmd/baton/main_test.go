package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/bench"
	"github.com/baton-dev/baton/bench/benchtest"
)

func runArgs(t *testing.T, envVars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := env{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return envVars[k] }}
	code = run(e, args)
	return code, out.String(), errb.String()
}

func TestHelp(t *testing.T) {
	code, out, _ := runArgs(t, nil, "--help")
	if code != exitOK || !strings.Contains(out, "bench") || !strings.Contains(out, "BATON_ADDR") {
		t.Fatalf("baton --help: %d\n%s", code, out)
	}
	for _, args := range [][]string{{"bench", "--help"}, {"help", "bench"}} {
		code, out, _ = runArgs(t, nil, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d", args, code)
		}
		var o benchOpts
		var w waitFlag
		benchFlags(&o, &w, os.Getenv).VisitAll(func(f *flag.Flag) {
			if !strings.Contains(out, "--"+f.Name+" ") {
				t.Errorf("%v does not explain --%s", args, f.Name)
			}
		})
	}
	if code, _, errs := runArgs(t, nil); code != exitBadUsage || !strings.Contains(errs, "Commands:") {
		t.Errorf("no arguments: exit %d, stderr %q", code, errs)
	}
}

func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"bench", "--conns", "x"},
		{"bench", "--conns", "0"},
		{"bench", "--no-such-flag"},
		{"bench", "--workload", "nope"},
		{"bench", "--wait", "-5ms"},
		{"bench", "--wait", "5"},
		{"bench", "--lease", "48h"},
		{"bench", "--duration", "0"},
		{"bench", "--pid", "1"}, // only for hold
		{"bench", "extra"},
		{"bench", "--addr", ","},
		{"bench", "--workload", "contended", "--depth", "2"}, // more slots per connection than keys
		{"bench", "--workload", "expiry", "--rate", "100"},
		{"bench", "--rate", "-1"},
		{"bench", "--plot", "out.png"},
		{"bench", "--via", "nope"},
		{"bench", "--via", "client", "--workload", "mixed"},
		{"bench", "--fifo-slack", "-1s"},
		{"bench", "--shape", "zigzag"},
		{"bench", "--shape", "batch", "--workload", "contended"},
		{"bench", "--shape", "batch", "--via", "client"},
		{"bench", "--shape", "batch", "--rate", "100"},
	} {
		code, out, errs := runArgs(t, nil, args...)
		if code != exitBadUsage || out != "" || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, errs)
		}
	}
}

func TestWaitFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"-1": -time.Millisecond, "-1ms": -time.Millisecond, "0": 0, "250ms": 250 * time.Millisecond} {
		var w waitFlag
		if err := w.Set(in); err != nil || w.d != want {
			t.Errorf("--wait %s: %v, %v", in, w.d, err)
		}
	}
}

func TestCannotConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, errs := runArgs(t, map[string]string{"BATON_ADDR": addr}, "bench", "--quiet")
	if code != exitFailed || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "cannot connect") || !strings.Contains(errs, addr) {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

func TestBenchAgainstFake(t *testing.T) {
	srv, err := benchtest.Start(benchtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "r.json")
	code, out, errs := runArgs(t, map[string]string{"BATON_ADDR": srv.Addr()},
		"bench", "--conns", "2", "--depth", "4", "--keys", "100", "--duration", "1500ms", "--warmup", "100ms", "--wait=-1", "--json", path)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	if !strings.Contains(out, "cycles ") || !strings.Contains(errs, "cycles/s") {
		t.Errorf("summary %q, progress %q", out, errs)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || len(res.Errors) != 0 || res.WaitMs != -1 || res.Addrs[0] != srv.Addr() {
		t.Fatalf("result %+v", res)
	}
}

// --shape batch: the rounds' latency in the summary and in the JSON a
// script reads.
func TestBenchBatchAgainstFake(t *testing.T) {
	srv, err := benchtest.Start(benchtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	code, out, errs := runArgs(t, nil, "bench", "--addr", srv.Addr(), "--shape", "batch", "--conns", "1", "--depth", "4",
		"--keys", "100", "--ops", "400", "--warmup", "0", "--quiet", "--json", "-")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out)
	}
	rounds, _ := m["round_us"].(map[string]any)
	for _, kind := range []string{"acquire", "release"} {
		if l, _ := rounds[kind].(map[string]any); l == nil || l["count"] != 100.0 || l["p99"] == 0.0 {
			t.Errorf("round_us %s = %v, want 400 cycles in 100 rounds of 4 (one connection: no other takes part of a round's budget)", kind, rounds[kind])
		}
	}
	if m["shape"] != "batch" || m["cycles"] != 400.0 {
		t.Errorf("shape %v, cycles %v", m["shape"], m["cycles"])
	}
	if !strings.Contains(errs, "acq round") || !strings.Contains(errs, "rel round") {
		t.Errorf("summary on stderr lacks the rounds:\n%s", errs)
	}
}

func TestHoldJSONToStdout(t *testing.T) {
	srv, err := benchtest.Start(benchtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	code, out, errs := runArgs(t, nil, "bench", "--addr", srv.Addr(), "--workload", "hold", "--hold", "200",
		"--idle-conns", "5", "--duration", "0", "--pid", itoa(os.Getpid()), "--settle", "0", "--quiet", "--json", "-")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out)
	}
	if res.Held != 200 || res.Released != 200 || res.IdleConns != 5 || res.RSSBefore == 0 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(errs, "held ") {
		t.Errorf("summary on stderr: %q", errs)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestInterruptedRunPrintsAndExits130(t *testing.T) {
	srv, err := benchtest.Start(benchtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	e := env{ctx: ctx, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := run(e, []string{"bench", "--addr", srv.Addr(), "--duration", "1m", "--warmup", "0", "--quiet"})
	if code != exitInterrupted || !strings.Contains(out.String(), "interrupted") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if srv.Held() != 0 {
		t.Errorf("%d locks left held", srv.Held())
	}
}
