package main

// baton lock --permits (shared holds, protocol 1.4) against a scripted
// server: the S it sends, the holder's own token, the refusals; baton bench
// --permits.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/bench"
	"github.com/baton-dev/baton/bench/benchtest"
)

// TestLockPermits: --permits N acquires with S (N, the lease, the wait and
// an owner of HOST:PID:), runs the command with that grant's token and
// releases that token.
func TestLockPermits(t *testing.T) {
	s := startScripted(t, func(line string) string {
		f := strings.Fields(line)
		switch f[0] {
		case "S":
			return "S " + f[1] + " OK 9"
		case "A":
			return "A " + f[1] + " ERR badrequest the test wants S"
		}
		return f[0] + " " + f[1] + " OK"
	})
	code, out, errs := runArgs(t, map[string]string{"BATON_ADDR": s.addr()},
		"lock", "jobs/encode", "--permits", "3", "--lease", "2s", "--", "sh", "-c", `echo "$BATON_KEY $BATON_TOKEN"`)
	if code != exitOK || out != "jobs/encode 9\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	var shared, released int
	for _, l := range s.got() {
		f := strings.Fields(l)
		switch f[0] {
		case "S":
			shared++
			if len(f) != 6 || f[1] != "jobs/encode" || f[2] != "3" || f[3] != "2000" || f[4] != "0" || !strings.HasPrefix(f[5], ownerPrefix()) {
				t.Errorf("acquire %q, want S jobs/encode 3 2000 0 %s...", l, ownerPrefix())
			}
		case "R":
			released++
			if l != "R jobs/encode 9" {
				t.Errorf("release %q, want R jobs/encode 9", l)
			}
		}
	}
	if shared != 1 || released != 1 {
		t.Fatalf("requests %q: want one S and one R", s.got())
	}
}

// TestLockPermitsRefused: a --permits other than the key's holders' is
// refused by the server (ERR badrequest), and a cluster below version 4
// cannot serve shared holds (ERR unavailable, retried until --wait runs
// out): the command does not run, baton exits 75 and says why.
func TestLockPermitsRefused(t *testing.T) {
	for _, tc := range []struct {
		answer string
		want   string
	}{
		{"ERR badrequest permits 3 differs from the key's 2", "permits 3 differs from the key's 2"},
		{"ERR unavailable shared holds need cluster version 4 (the cluster is at 3)", "shared holds need cluster version 4"},
	} {
		s := startScripted(t, func(line string) string {
			f := strings.Fields(line)
			if f[0] == "S" {
				return "S " + f[1] + " " + tc.answer
			}
			return f[0] + " " + f[1] + " OK"
		})
		code, out, errs := runArgs(t, map[string]string{"BATON_ADDR": s.addr()},
			"lock", "k", "--permits", "3", "--wait", "300ms", "--", "echo", "ran")
		if code != exitNotGranted || out != "" || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "did not run") {
			t.Errorf("S answered %q: exit %d, stdout %q, stderr %q", tc.answer, code, out, errs)
		}
	}
}

// TestLockPermitsBadUsage: --permits is 0 to 1000000, and only lock has
// it (an election's leader holds the key alone).
func TestLockPermitsBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"lock", "k", "--permits", "-1", "--", "true"},
		{"lock", "k", "--permits", "1000001", "--", "true"},
		{"lock", "k", "--permits", "x", "--", "true"},
		{"lock", "k", "--permits", "2.5", "--", "true"},
		{"elect", "k", "--value", "v", "--permits", "2", "--", "true"},
	} {
		code, out, errs := runArgs(t, nil, args...)
		if code != exitBadUsage || out != "" || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, errs)
		}
	}
	code, _, errs := runArgs(t, nil, "lock", "k", "--permits", "1000001", "--", "true")
	if code != exitBadUsage || !strings.Contains(errs, "--permits 1000001: want 1 to 1000000") {
		t.Errorf("--permits 1000001: exit %d, %q", code, errs)
	}
}

// TestBenchPermitsAgainstFake: baton bench --permits runs the contended
// workload as a semaphore (S requests) and reports it; --permits is
// refused where it means nothing.
func TestBenchPermitsAgainstFake(t *testing.T) {
	srv, err := benchtest.Start(benchtest.Options{Queue: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "r.json")
	code, out, errs := runArgs(t, map[string]string{"BATON_ADDR": srv.Addr()},
		"bench", "--workload", "contended", "--conns", "6", "--permits", "2", "--duration", "500ms", "--warmup", "100ms", "--json", path)
	if code != exitOK || !strings.Contains(out, "2 permits per key") || !strings.Contains(out, "never more than 2 holders") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Permits != 2 || res.Cycles == 0 || len(res.Errors) != 0 || res.Failed() {
		t.Fatalf("result %+v", res)
	}
	for _, args := range [][]string{
		{"bench", "--permits", "-1"},
		{"bench", "--permits", "1000001"},
		{"bench", "--workload", "mixed", "--permits", "2"},
		{"bench", "--workload", "hold", "--permits", "2"},
	} {
		if code, _, errs := runArgs(t, nil, args...); code != exitBadUsage || !strings.Contains(errs, "permits") {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
}
