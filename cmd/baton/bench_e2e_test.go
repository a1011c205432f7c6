package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/tools/harness"
)

// benchNode starts a real single-node batond (built once by TestMain) for
// a bench run.
func benchNode(t *testing.T) *harness.Node {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	return harness.StartNode(t, harness.Bin(t), harness.Options{})
}

// benchJSON runs baton bench with args against addr, expects exit 0, and
// returns the JSON result as a generic map, so that the test checks the
// field names a script sees rather than the Go struct.
func benchJSON(t *testing.T, addr string, args ...string) map[string]any {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.json")
	args = append([]string{"bench", "--addr", addr, "--quiet", "--json", path}, args...)
	code, out, errs := runArgs(t, nil, args...)
	if code != exitOK {
		t.Fatalf("baton %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("JSON: %v\n%s", err, data)
	}
	t.Logf("baton %s:\n%s", strings.Join(args[1:], " "), out)
	return m
}

// requireFields checks that m has every field, and that those named in
// positive are numbers above 0.
func requireFields(t *testing.T, m map[string]any, fields, positive []string) {
	t.Helper()
	for _, f := range append(fields, positive...) {
		if _, ok := m[f]; !ok {
			t.Errorf("JSON lacks %q", f)
		}
	}
	for _, f := range positive {
		if v, ok := m[f].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", f, m[f])
		}
	}
	if errs, ok := m["errors"].(map[string]any); !ok || len(errs) != 0 {
		t.Errorf("errors = %v, want none", m["errors"])
	}
	if v := m["token_violations"]; v != 0.0 {
		t.Errorf("token_violations = %v", v)
	}
	for _, lat := range []string{"acquire_us", "cycle_us"} {
		l, ok := m[lat].(map[string]any)
		if !ok {
			t.Errorf("%s = %v", lat, m[lat])
			continue
		}
		for _, q := range []string{"count", "mean", "p50", "p90", "p99", "p999", "max"} {
			if _, ok := l[q]; !ok {
				t.Errorf("%s lacks %s", lat, q)
			}
		}
	}
}

// Fields every cycle workload's JSON has.
var cycleFields = []string{"workload", "addrs", "conns", "depth", "keys", "lease_ms", "wait_ms", "warmup_s",
	"errors", "token_violations", "fifo_violations", "stop", "series", "percentiles", "percentiles_of", "unit"}

func TestBenchRealNodeUncontended(t *testing.T) {
	n := benchNode(t)
	plot := filepath.Join(t.TempDir(), "r.svg")
	m := benchJSON(t, n.ClientAddr, "--conns", "4", "--depth", "8", "--duration", "2s", "--warmup", "200ms", "--plot", plot)
	requireFields(t, m, cycleFields, []string{"cycles", "cycles_per_sec", "duration_s"})
	if m["stop"] != "time" || m["workload"] != "uncontended" {
		t.Errorf("stop %v, workload %v", m["stop"], m["workload"])
	}
	data, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(data, new(struct{})); err != nil || !strings.Contains(string(data), "<polyline") {
		t.Errorf("plot is not an SVG with lines: %v", err)
	}
}

func TestBenchRealNodeContended(t *testing.T) {
	n := benchNode(t)
	m := benchJSON(t, n.ClientAddr, "--workload", "contended", "--conns", "8", "--duration", "2s", "--warmup", "200ms")
	requireFields(t, m, append(cycleFields, "handoff_us", "fifo_slack_ms"), []string{"cycles", "handoffs_per_sec", "fifo_checked"})
	if m["fifo_violations"] != 0.0 || m["keys"] != 1.0 || m["depth"] != 1.0 {
		t.Errorf("fifo_violations %v, keys %v, depth %v", m["fifo_violations"], m["keys"], m["depth"])
	}
}

func TestBenchRealNodeOtherModes(t *testing.T) {
	n := benchNode(t)
	m := benchJSON(t, n.ClientAddr, "--workload", "mixed", "--conns", "2", "--depth", "4", "--duration", "1s", "--warmup", "0")
	requireFields(t, m, append(cycleFields, "extend_us", "query_us", "release_us"), []string{"cycles", "ops_per_sec"})

	m = benchJSON(t, n.ClientAddr, "--workload", "expiry", "--conns", "2", "--depth", "4", "--lease", "50ms",
		"--duration", "1500ms", "--warmup", "0")
	requireFields(t, m, append(cycleFields, "expiry_delay_us"), []string{"expiries", "expiries_per_sec"})
	// 8 keys, each expiring about every 50ms plus the server's delay.
	if v := m["expiries_per_sec"].(float64); v < 8*1000/50/4 || v > 8*1000/50*1.2 {
		t.Errorf("expiries_per_sec %v for 8 keys with a 50ms lease", v)
	}

	m = benchJSON(t, n.ClientAddr, "--via", "client", "--conns", "2", "--depth", "4", "--duration", "1s", "--warmup", "0")
	requireFields(t, m, append(cycleFields, "via", "release_us"), []string{"cycles", "cycles_per_sec"})
	m = benchJSON(t, n.ClientAddr, "--via", "client", "--workload", "contended", "--conns", "4", "--duration", "1s", "--warmup", "0")
	requireFields(t, m, append(cycleFields, "via", "handoff_us"), []string{"cycles", "handoffs_per_sec", "fifo_checked"})

	m = benchJSON(t, n.ClientAddr, "--shape", "batch", "--conns", "2", "--depth", "8", "--duration", "1s", "--warmup", "0")
	requireFields(t, m, append(cycleFields, "shape", "round_us", "release_us"), []string{"cycles", "cycles_per_sec"})
	if r, _ := m["round_us"].(map[string]any); r == nil || r["acquire"] == nil || r["release"] == nil {
		t.Errorf("round_us = %v", m["round_us"])
	}

	m = benchJSON(t, n.ClientAddr, "--rate", "300", "--conns", "2", "--depth", "4", "--duration", "1500ms", "--warmup", "200ms")
	requireFields(t, m, append(cycleFields, "rate"), []string{"cycles_per_sec"})
	if v := m["cycles_per_sec"].(float64); v < 250 || v > 350 {
		t.Errorf("cycles_per_sec %v at --rate 300", v)
	}
}

// TestBenchSecuredNode: bench reaches a node that wants a secret and
// serves TLS, with the flags and $BATON_AUTH of the lock commands, and a
// run that the node refuses exits 1 with one line saying why, after its
// report, instead of passing for a measurement.
func TestBenchSecuredNode(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	t.Parallel()
	const secret = "s3cret-for-bench"
	ca := harness.NewCA(t, "bench-ca")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2, Secret: secret, TLS: &harness.ServerTLS{Cert: ca.Issue("server")}})
	authFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(authFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := []string{"--conns", "2", "--depth", "4", "--duration", "1s", "--warmup", "0", "--quiet"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		says string // "" for a clean run (exit 0), else what the one line on stderr says (exit 1)
	}{
		{"auth-file", nil, []string{"--addr", n.ClientAddr, "--auth-file", authFile}, ""},
		{"BATON_AUTH", map[string]string{"BATON_AUTH": secret}, []string{"--addr", n.ClientAddr}, ""},
		{"TLS and secret", nil, []string{"--addr", n.TLSAddr, "--tls-ca", ca.File, "--auth-file", authFile}, ""},
		{"TLS via client", map[string]string{"BATON_AUTH": secret}, []string{"--addr", n.TLSAddr, "--tls-ca", ca.File, "--via", "client"}, ""},
		{"hold over TLS", map[string]string{"BATON_AUTH": secret},
			[]string{"--addr", n.TLSAddr, "--tls-ca", ca.File, "--workload", "hold", "--hold", "100", "--idle-conns", "2", "--settle", "0"}, ""},
		{"no secret", nil, []string{"--addr", n.ClientAddr}, "the run had errors: ERR auth "},
		{"wrong secret", map[string]string{"BATON_AUTH": "wrong"}, []string{"--addr", n.ClientAddr}, "secret"},
		{"TLS without the CA", map[string]string{"BATON_AUTH": secret}, []string{"--addr", n.TLSAddr, "--tls"}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"bench"}, tc.args...), short...)
			code, out, errs := runArgs(t, tc.env, args...)
			t.Logf("baton %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
			if tc.says == "" {
				if code != exitOK || !strings.Contains(out, "errors       none") {
					t.Fatalf("exit %d, want %d and no errors", code, exitOK)
				}
				return
			}
			if code != exitFailed || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.says) {
				t.Fatalf("exit %d, stderr %q; want %d and one line saying %q", code, errs, exitFailed, tc.says)
			}
		})
	}
}
