package main

// Tests of acquire, release, extend, query and lock against real batond
// processes (tools/harness). A test that needs baton as a process of its
// own (signals) runs this test binary with runMainEnv set, which makes
// TestMain run main instead of the tests.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/tools/harness"
)

const runMainEnv = "BATON_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	harness.Main(m)
}

func startNode(t *testing.T) *harness.Node {
	t.Helper()
	return harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2})
}

// baton runs a baton command in-process against addr.
func baton(t *testing.T, addr string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb harness.SyncBuffer
	e := env{ctx: context.Background(), stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			if k == "BATON_ADDR" {
				return addr
			}
			return ""
		}}
	code = run(e, args)
	return code, out.String(), errb.String()
}

func newClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestLockCommandsHelp(t *testing.T) {
	for _, name := range []string{"acquire", "release", "extend", "query", "watch", "lock", "elect"} {
		code, out, _ := runArgs(t, nil, name, "--help")
		if code != exitOK || !strings.Contains(out, "Exit status") {
			t.Fatalf("%s --help: exit %d\n%s", name, code, out)
		}
		var fs *flag.FlagSet
		switch name {
		case "lock", "elect":
			fs = lockFlags(name, &lockOpts{}, os.Getenv)
		case "acquire":
			fs = leaseFlags(name, &leaseOpts{}, os.Getenv, true)
		case "extend":
			fs = leaseFlags(name, &leaseOpts{}, os.Getenv, false)
		default:
			fs = plainFlags(name, &commonOpts{}, os.Getenv)
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(out, "--"+f.Name+" ") {
				t.Errorf("%s --help does not explain --%s", name, f.Name)
			}
		})
	}
	_, out, _ := runArgs(t, nil, "--help")
	for _, name := range []string{"acquire", "release", "extend", "query", "watch", "lock", "elect", "bench"} {
		if !strings.Contains(out, "  "+name+" ") {
			t.Errorf("baton --help does not list %s", name)
		}
	}
}

func TestLockCommandsBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"acquire"},
		{"acquire", "a", "b"},
		{"acquire", "a b"},
		{"acquire", "k", "--lease", "0"},
		{"acquire", "k", "--lease", "25h"},
		{"acquire", "k", "--wait", "-2"},
		{"acquire", "k", "--wait", "25h"},
		{"acquire", "k", "--addr", ","},
		{"acquire", "k", "--addr", "nohostport"},
		{"acquire", "k", "--owner", ""},
		{"acquire", "k", "--owner", "a b"},
		{"acquire", "k", "--owner", strings.Repeat("o", 65)},
		{"extend", "k", "5", "--owner", "o"}, // only acquire names an owner
		{"release"},
		{"release", "k", "0"},
		{"release", "k", "x"},
		{"release", "k", "1", "2"},
		{"extend", "k"},
		{"extend", "k", "0"},
		{"extend", "k", "5", "--lease", "0"},
		{"query"},
		{"query", "k", "--json=x"},
		{"lock", "k"},
		{"lock", "k", "--"},
		{"lock", "--", "true"},
		{"lock", "k", "--lease", "50ms", "--", "true"},
		{"lock", "k", "--grace", "-1s", "--", "true"},
		{"lock", "k", "--json", "--", "true"},
	} {
		code, out, errs := runArgs(t, nil, args...)
		if code != exitBadUsage || out != "" || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, errs)
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		json bool
	}{
		{[]string{"k"}, []string{"k"}, false},
		{[]string{"--json", "k", "7"}, []string{"k", "7"}, true},
		{[]string{"k", "--json", "7"}, []string{"k", "7"}, true},
		{[]string{"k", "7", "--json"}, []string{"k", "7"}, true},
		{[]string{"--", "-k", "--json"}, []string{"-k", "--json"}, false},
		{[]string{"k", "--", "--json"}, []string{"k", "--json"}, false},
	} {
		var o commonOpts
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		commonFlags(fs, &o, os.Getenv, true)
		pos, err := parseArgs(fs, tc.args)
		if err != nil || strings.Join(pos, " ") != strings.Join(tc.pos, " ") || o.json != tc.json {
			t.Errorf("%q: %q json=%v %v; want %q json=%v", tc.args, pos, o.json, err, tc.pos, tc.json)
		}
	}
}

func TestAcquireReleaseExtendQuery(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	addr := n.ClientAddr

	code, out, errs := baton(t, addr, "acquire", "cli/k", "--lease", "30s", "--owner", "cli-test-1")
	if code != exitOK {
		t.Fatalf("acquire: %d %s", code, errs)
	}
	token, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("acquire printed %q, want the token alone", out)
	}
	tok := strconv.FormatUint(token, 10)

	code, out, _ = baton(t, addr, "query", "cli/k")
	if code != exitOK || !strings.Contains(out, "held by token "+tok+" (owner cli-test-1)") {
		t.Fatalf("query: %d %q", code, out)
	}
	code, out, _ = baton(t, addr, "query", "--json", "cli/k")
	var q struct {
		Key         string `json:"key"`
		Held        bool   `json:"held"`
		Token       uint64 `json:"token"`
		RemainingMs int64  `json:"remaining_ms"`
		Owner       string `json:"owner"`
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil || code != exitOK || !q.Held || q.Token != token || q.RemainingMs <= 0 || q.RemainingMs > 30000 || q.Owner != "cli-test-1" {
		t.Fatalf("query --json: %d %q %v", code, out, err)
	}
	// The same owner again is a retry: the same grant, at once.
	code, out, errs = baton(t, addr, "acquire", "cli/k", "--lease", "30s", "--wait", "-1", "--owner", "cli-test-1")
	if code != exitOK || strings.TrimSpace(out) != tok {
		t.Fatalf("acquire again with the holder's owner: %d %q %s, want token %s", code, out, errs, tok)
	}

	// Someone else cannot have it.
	code, out, errs = baton(t, addr, "acquire", "cli/k", "--wait", "-1", "--json")
	if code != exitNotGranted || strings.TrimSpace(out) != `{"acquired":false,"key":"cli/k"}` || !strings.Contains(errs, "held by someone else") {
		t.Fatalf("acquire of a held key: %d %q %q", code, out, errs)
	}
	start := time.Now()
	code, _, _ = baton(t, addr, "acquire", "cli/k", "--wait", "300ms")
	if el := time.Since(start); code != exitNotGranted || el < 300*time.Millisecond || el > 3*time.Second {
		t.Fatalf("acquire --wait 300ms of a held key: %d after %v", code, el)
	}

	code, out, _ = baton(t, addr, "extend", "cli/k", tok, "--lease", "1m")
	if code != exitOK || !strings.Contains(out, "extended cli/k") {
		t.Fatalf("extend: %d %q", code, out)
	}
	_, out, _ = baton(t, addr, "query", "--json", "cli/k")
	if err := json.Unmarshal([]byte(out), &q); err != nil || q.RemainingMs <= 30000 {
		t.Fatalf("after extend to 1m: %q", out)
	}
	if code, _, _ = baton(t, addr, "extend", "cli/k", "12345", "--lease", "1m"); code != exitNotHeld {
		t.Fatalf("extend with a wrong token: %d", code)
	}

	code, out, _ = baton(t, addr, "release", "cli/k", tok)
	if code != exitOK || strings.TrimSpace(out) != "released cli/k" {
		t.Fatalf("release: %d %q", code, out)
	}
	code, out, errs = baton(t, addr, "release", "cli/k", tok, "--json")
	if code != exitNotHeld || strings.TrimSpace(out) != `{"key":"cli/k","released":false}` || !strings.Contains(errs, "not held by token") {
		t.Fatalf("second release: %d %q %q", code, out, errs)
	}

	// Tokenless release frees whoever holds the key.
	code, out, _ = baton(t, addr, "acquire", "cli/k", "--json")
	var a struct {
		Acquired bool   `json:"acquired"`
		Token    uint64 `json:"token"`
		LeaseMs  int64  `json:"lease_ms"`
		Owner    string `json:"owner"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || code != exitOK || !a.Acquired || a.Token <= token || a.LeaseMs != 10000 ||
		!strings.HasPrefix(a.Owner, ownerPrefix()) {
		t.Fatalf("acquire --json: %d %q", code, out)
	}
	if code, out, _ = baton(t, addr, "query", "cli/k"); !strings.Contains(out, "(owner "+a.Owner+")") {
		t.Fatalf("query of a key baton acquired: %d %q, want owner %s", code, out, a.Owner)
	}
	if code, _, errs = baton(t, addr, "release", "cli/k"); code != exitOK {
		t.Fatalf("tokenless release: %d %s", code, errs)
	}
	if code, _, _ = baton(t, addr, "release", "cli/k"); code != exitNotHeld {
		t.Fatalf("tokenless release of a free key: %d", code)
	}
	code, out, _ = baton(t, addr, "query", "cli/k")
	if code != exitOK || strings.TrimSpace(out) != "cli/k: free" {
		t.Fatalf("query of a free key: %d %q", code, out)
	}
}

func TestNoServer(t *testing.T) {
	addr := harness.FreeAddr(t)
	for _, args := range [][]string{{"acquire", "k"}, {"query", "k"}, {"extend", "k", "1"}} {
		code, _, errs := baton(t, addr, args...)
		if code != exitFailed || !strings.Contains(errs, "cannot connect") || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v with no server: %d %q", args, code, errs)
		}
	}
	code, _, errs := baton(t, addr, "lock", "k", "--", "true")
	if code != exitNotGranted || !strings.Contains(errs, "did not run") {
		t.Errorf("lock with no server: %d %q", code, errs)
	}
}

func TestLockRunsCommand(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newClient(t, n.ClientAddr)
	code, out, errs := baton(t, n.ClientAddr, "lock", "cli/run", "--",
		"sh", "-c", `echo "key=$BATON_KEY token=$BATON_TOKEN"; exit 7`)
	if code != 7 {
		t.Fatalf("exit %d, want the command's 7\n%s%s", code, out, errs)
	}
	var token uint64
	if _, err := fmt.Sscanf(out, "key=cli/run token=%d", &token); err != nil || token == 0 {
		t.Fatalf("command saw %q: %v", out, err)
	}
	st, err := c.Query(context.Background(), "cli/run")
	if err != nil || st.Held {
		t.Fatalf("after the command: %+v, %v", st, err)
	}
	// The exit status of a command killed by a signal, as a shell has it.
	code, _, _ = baton(t, n.ClientAddr, "lock", "cli/run", "--", "sh", "-c", "kill -KILL $$")
	if code != 128+9 {
		t.Fatalf("command killed by SIGKILL: exit %d, want 137", code)
	}
	if code, _, _ = baton(t, n.ClientAddr, "lock", "cli/run", "--", "no-such-command-here"); code != exitNotFound {
		t.Fatalf("missing command: exit %d, want 127", code)
	}
	if st, err := c.Query(context.Background(), "cli/run"); err != nil || st.Held {
		t.Fatalf("after a command that could not start: %+v, %v", st, err)
	}
}

// TestLockSerializes: three baton lock on one key, started together; each
// command writes a start and an end line around a sleep. The lines must
// come in start/end pairs of one token, with tokens growing.
func TestLockSerializes(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	file := filepath.Join(t.TempDir(), "log")
	script := `echo "start $BATON_TOKEN" >> "$0"; sleep 0.3; echo "end $BATON_TOKEN" >> "$0"`
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, errs := baton(t, n.ClientAddr, "lock", "cli/serial", "--wait", "20s", "--", "sh", "-c", script, file)
			if code != 0 {
				t.Errorf("baton lock: exit %d: %s", code, errs)
			}
		}()
	}
	wg.Wait()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 6 {
		t.Fatalf("log:\n%s", data)
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		var a, b uint64
		if _, err := fmt.Sscanf(lines[i], "start %d", &a); err != nil {
			t.Fatalf("line %d %q\n%s", i, lines[i], data)
		}
		if _, err := fmt.Sscanf(lines[i+1], "end %d", &b); err != nil || a != b || a <= last {
			t.Fatalf("overlap or disorder:\n%s", data)
		}
		last = a
	}
}

func TestLockNotGranted(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newClient(t, n.ClientAddr)
	l, err := c.TryAcquire(context.Background(), "cli/busy", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	code, _, errs := baton(t, n.ClientAddr, "lock", "cli/busy", "--wait", "200ms", "--", "touch", marker)
	if code != exitNotGranted || !strings.Contains(errs, "held by someone else") {
		t.Fatalf("exit %d, want 75: %s", code, errs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without the lock")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLockLost: the lock is taken away while the command runs; the command
// gets SIGTERM and baton exits 76.
func TestLockLost(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newClient(t, n.ClientAddr)
	go func() {
		// Wait until baton lock holds the key, then take it away.
		for range 100 {
			if st, err := c.Query(context.Background(), "cli/lost"); err == nil && st.Held {
				time.Sleep(300 * time.Millisecond)
				_ = c.ForceRelease(context.Background(), "cli/lost")
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	start := time.Now()
	code, out, errs := baton(t, n.ClientAddr, "lock", "cli/lost", "--lease", "300ms", "--grace", "5s", "--",
		"sh", "-c", `trap 'echo got TERM; exit 0' TERM; sleep 30 >/dev/null 2>&1 & wait`)
	if code != exitLost || !strings.Contains(out, "got TERM") || !strings.Contains(errs, "lost") {
		t.Fatalf("exit %d, want 76\nstdout %q\nstderr %q", code, out, errs)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
}

// TestLockForwardsSignals runs baton lock as a process of its own and sends
// it SIGINT: the command gets it, baton waits for the command, releases the
// lock and exits with the command's status.
func TestLockForwardsSignals(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newClient(t, n.ClientAddr)
	cmd := exec.Command(os.Args[0], "lock", "cli/sig", "--addr", n.ClientAddr, "--",
		"sh", "-c", `trap 'echo got INT; exit 9' INT; echo ready; sleep 30 >/dev/null 2>&1 & wait`)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var out, errb harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("command not started: %q %q", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 9 {
			t.Fatalf("baton lock: %v, want exit 9\n%s%s", err, out.String(), errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("baton lock did not exit after SIGINT\n%s%s", out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "got INT") {
		t.Fatalf("the command did not get SIGINT: %q", out.String())
	}
	if st, err := c.Query(context.Background(), "cli/sig"); err != nil || st.Held {
		t.Fatalf("after baton lock: %+v, %v", st, err)
	}
}

// TestWatchCommand: baton watch prints the state, then a line per change
// (a grant with its token, the release), as JSON with --json, and exits 0
// when interrupted; against nothing it fails within --timeout.
func TestWatchCommand(t *testing.T) {
	n := startNode(t)
	c := newClient(t, n.ClientAddr)
	var out, errb harness.SyncBuffer
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	e := env{ctx: ctx, stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "BATON_ADDR" {
			return n.ClientAddr
		}
		return ""
	}}
	done := make(chan int, 1)
	go func() { done <- run(e, []string{"watch", "cli/watched", "--json"}) }()
	lines := func(want int) []string {
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := strings.Split(strings.TrimSpace(out.String()), "\n")
			if out.String() != "" && len(got) >= want || time.Now().After(deadline) {
				return got
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got := lines(1); got[0] != `{"held":false,"key":"cli/watched"}` {
		t.Fatalf("first line %q", got[0])
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(cctx, "cli/watched", time.Minute, client.WaitForever)
	if err != nil {
		t.Fatal(err)
	}
	got := lines(2)
	var st struct {
		Held  bool   `json:"held"`
		Token uint64 `json:"token"`
		Owner string `json:"owner"`
	}
	if len(got) < 2 || json.Unmarshal([]byte(got[1]), &st) != nil || !st.Held || st.Token != l.Token() || st.Owner != l.Owner() {
		t.Fatalf("after the grant: %q; want held by token %d", got, l.Token())
	}
	if err := l.Release(cctx); err != nil {
		t.Fatal(err)
	}
	if got := lines(3); len(got) < 3 || got[2] != `{"held":false,"key":"cli/watched"}` {
		t.Fatalf("after the release: %q", got)
	}
	interrupt()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after the interrupt, stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("baton watch still runs 10 s after the interrupt")
	}
	if code, _, errs := baton(t, "127.0.0.1:1", "watch", "k", "--timeout", "300ms"); code != exitFailed || errs == "" {
		t.Errorf("watch against nothing: exit %d, stderr %q", code, errs)
	}
}

// TestElectRunsCommandWhileLeading: baton elect runs its command with the
// leadership's token once it leads, and everybody sees its value as the
// owner; a second candidate runs only after the first's command ended.
func TestElectRunsCommandWhileLeading(t *testing.T) {
	n := startNode(t)
	dir := t.TempDir()
	first := filepath.Join(dir, "first")
	code, _, errs := baton(t, n.ClientAddr, "elect", "cli/elect", "--value", "node-a", "--",
		"sh", "-c", `echo "$BATON_TOKEN" > `+first)
	if code != exitOK {
		t.Fatalf("elect: exit %d, stderr %q", code, errs)
	}
	b, err := os.ReadFile(first)
	if err != nil || strings.TrimSpace(string(b)) == "" {
		t.Fatalf("the command did not write its token: %q, %v", b, err)
	}
	// While a leader runs, query shows its value.
	started := filepath.Join(dir, "started")
	done := make(chan int, 1)
	go func() {
		code, _, _ := baton(t, n.ClientAddr, "elect", "cli/elect", "--value", "node-b", "--",
			"sh", "-c", `touch `+started+`; sleep 1`)
		done <- code
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second candidate's command did not start")
		}
	}
	if _, out, _ := baton(t, n.ClientAddr, "query", "cli/elect", "--json"); !strings.Contains(out, `"owner":"node-b"`) {
		t.Errorf("query while node-b leads: %s", out)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("second elect: exit %d", code)
	}
	if code, _, errs := baton(t, n.ClientAddr, "elect", "k", "--value", "has space", "--", "true"); code != exitBadUsage || !strings.Contains(errs, "--value") {
		t.Errorf("a bad --value: exit %d, stderr %q", code, errs)
	}
}
