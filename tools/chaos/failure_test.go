package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/codec"
)

// fenceCase is a fence violation on chaos/a, as a run would record it:
// worker 1 holds token 5165060 (its lease surely covers [1000ms, 3000ms))
// and is turned away at 2500ms because worker 9's token 5172228 was
// written at 2400ms. mixup makes worker 1's token one that the wire
// answered to worker 5's request, on the connection the two share.
func fenceCase(mixup bool) (WriteEvent, []CallEvent, []Op) {
	w1, w5, w9 := "owner-w1", "owner-w5", "owner-w9"
	events := []CallEvent{
		{Worker: 1, Kind: "acquire", Key: "chaos/a", Lease: 2000 * milli, Wait: 1500 * milli,
			Call: 900 * milli, Return: 1000 * milli, Outcome: "ok", Token: 5165060, Owner: w1},
		{Worker: 5, Kind: "acquire", Key: "chaos/a", Lease: 2000 * milli, Wait: 1500 * milli,
			Call: 905 * milli, Return: 1001 * milli, Outcome: "ok", Token: 5160000, Owner: w5},
		{Worker: 1, Kind: "extend", Key: "chaos/a", Token: 5165060, Lease: 2000 * milli,
			Call: 1500 * milli, Return: 1510 * milli, Outcome: "ok"},
		{Worker: 9, Kind: "acquire", Key: "chaos/a", Lease: 1000 * milli, Wait: 2000 * milli,
			Call: 1200 * milli, Return: 2300 * milli, Outcome: "ok", Token: 5172228, Owner: w9},
	}
	a1 := hOwned(hWait(hGrant(3, "chaos/a", 2000, 901, 999, 5165060), 1500), w1)
	a5 := hOwned(hWait(hGrant(3, "chaos/a", 2000, 906, 1000, 5160000), 1500), w5)
	if mixup {
		// The recorder pairs answers as the protocol says; the client
		// handed them out the other way round.
		a1.RespToken, a5.RespToken = 5160000, 5165060
	}
	h := []Op{
		a1, a5,
		hExtend(3, "chaos/a", 5165060, 2000, 1501, 1509, codec.StatusOK),
		hOwned(hWait(hGrant(4, "chaos/a", 1000, 1201, 2299, 5172228), 2000), w9),
		hOwned(hHeld(2, "chaos/a", 2350, 2351, 5172228), w9),
		hGrant(1, "chaos/b", 100, 1, 2, 7),
	}
	slices.SortStableFunc(h, func(a, b Op) int { return int(a.Call - b.Call) })
	w := WriteEvent{Key: "chaos/a", Worker: 1, Token: 5165060, At: 2500 * milli, From: 1000 * milli, SureUntil: 3000 * milli,
		Fence: 5172228, FenceWorker: 9, FenceAt: 2400 * milli}
	return w, events, h
}

// TestResourceFenceDetail: a fence violation's explanation shows both
// holders' Acquire and the requests that got their tokens on the wire, and
// tells a pairing mix-up from a lease the server ended early.
func TestResourceFenceDetail(t *testing.T) {
	w, events, h := fenceCase(false)
	d := fenceDetail(w, events, h)
	for _, want := range []string{
		"worker 1, token 5165060 (rejected): w1 acquire chaos/a lease 2000.000ms wait 1500.000ms [900.000ms, 1000.000ms] -> ok token 5165060 owner owner-w1",
		"; then w1 extend chaos/a token 5165060 lease 2000.000ms [1500.000ms, 1510.000ms] -> ok",
		"wire: conn 3 A chaos/a 2000 1500 owner-w1 [901.000ms, 999.000ms] OK 5165060 <- the worker's own request got it",
		"wire: conn 3 K chaos/a 5165060 2000 [1501.000ms, 1509.000ms] OK",
		"worker 9, token 5172228 (whose write the register took at 2400.000ms): w9 acquire",
		"wire: conn 4 A chaos/a 1000 2000 owner-w9 [1201.000ms, 2299.000ms] OK 5172228 <- the worker's own request got it",
		"wire: 1 queries answered HELD 5172228, read from 2351.000ms to 2351.000ms",
		"=> both tokens went to their holders' own requests: the server answered token 5172228 (conn 4, at 2299.000ms) while token 5165060's lease surely ran until 3000.000ms",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("detail does not say %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "owner-w5") || strings.Contains(d, "chaos/b") {
		t.Errorf("detail names ops of neither holder:\n%s", d)
	}

	w, events, h = fenceCase(true)
	d = fenceDetail(w, events, h)
	for _, want := range []string{
		"wire: conn 3 A chaos/a 2000 1500 owner-w1 [901.000ms, 999.000ms] OK 5160000 <- the worker's own request, answered with token 5160000",
		"wire: conn 3 A chaos/a 2000 1500 owner-w5 [906.000ms, 1000.000ms] OK 5165060 <- ANOTHER request got it (worker 5's Acquire called at 905.000ms)",
		"=> PAIRING MIX-UP: worker 1's Acquire (owner owner-w1) returned token 5165060, which the wire answered only to other requests (first: conn 3's A naming owner \"owner-w5\" (worker 5's Acquire called at 905.000ms))",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("mix-up detail does not say %q:\n%s", want, d)
		}
	}
}

// TestRunFailureFiles: a failed run writes, into its OutDir, a history file
// for every key a violation names, holding every wire op of the key, the
// workload's events and the resource's writes of it, and faults.txt with
// the schedule; the summary and Verify's message name them.
func TestRunFailureFiles(t *testing.T) {
	w, events, h := fenceCase(false)
	h = append(h, hLost(hRelease(5, "chaos/c", 9, 10, 20, codec.StatusOK)))
	events = append(events, CallEvent{Worker: 3, Kind: "query", Key: "chaos/b", Call: 3 * milli, Return: 4 * milli, Outcome: "ok"})
	writes := []WriteEvent{
		{Key: "chaos/a", Worker: 9, Token: 5172228, At: 2400 * milli, From: 2300 * milli, SureUntil: 2200 * milli, Fence: 5165060, FenceWorker: 1, FenceAt: 1100 * milli, Accepted: true},
		w,
		{Key: "chaos/b", Worker: 2, Token: 7, At: 3 * milli, From: 2 * milli, SureUntil: 101 * milli, Accepted: true},
	}
	schedule := []Fault{{Kind: KillLeader, Before: time.Second, Hold: 2 * time.Second, Pick: 7}, {Kind: PauseLeader, Before: 3 * time.Second, Hold: 1500 * time.Millisecond}}
	res := Result{
		Config:   Config{Seed: 42, Duration: time.Minute}.withDefaults(),
		Schedule: schedule,
		Faults:   []FaultRecord{{Fault: schedule[0], Target: "node 1", Start: 1234567 * time.Microsecond, End: 3500 * milli}},
		Gaps:     []time.Duration{1100 * milli},
		OutDir:   t.TempDir(),
	}
	res.add(CheckerFence, fenceText(w)+fenceDetail(w, events, h))
	res.add(CheckerLinearizability, `key "chaos/b" (1 ops): inconclusive, porcupine ran out of its 2m0s budget`)
	res.add(CheckerNodeExit, "node 2 exited with status 2") // names no key
	nodeLog := filepath.Join(t.TempDir(), "n3.log")
	if err := os.WriteFile(nodeLog, []byte("the log of node 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &failureData{history: h, events: events, writes: writes, schedule: schedule,
		start: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), connNode: map[int]int{1: 2}, nodeLogs: map[int]string{3: nodeLog}}

	files, err := writeFailureFiles(&res, d)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(res.OutDir, "history-chaos_a.txt"),
		filepath.Join(res.OutDir, "history-chaos_b.txt"),
		filepath.Join(res.OutDir, "faults.txt"),
		filepath.Join(res.OutDir, "node-3.log"),
	}
	if !slices.Equal(files, want) {
		t.Fatalf("files %q, want %q", files, want)
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	a := read(files[0])
	for i := range h {
		if o := &h[i]; o.Key == "chaos/a" && !strings.Contains(a, o.String()+"\n") {
			t.Errorf("history-chaos_a.txt lacks the op %q", o.String())
		} else if o.Key != "chaos/a" && strings.Contains(a, o.String()) {
			t.Errorf("history-chaos_a.txt has the op %q of another key", o.String())
		}
	}
	for _, want := range []string{
		"# key chaos/a of the failed chaos run with seed 42",
		"#   fence: key chaos/a: write at 2.5s by worker 1 with token 5165060 rejected",
		"#       worker 1, token 5165060 (rejected)", // the detail, kept a comment
		"## Wire ops (5) in Call order",
		"## Client events (4) and fenced writes (2), in time order",
		"w1 acquire chaos/a lease 2000.000ms wait 1500.000ms [900.000ms, 1000.000ms] -> ok token 5165060 owner owner-w1\n",
		"w9 write chaos/a token 5172228 at 2400.000ms sure [2300.000ms, 2200.000ms) -> accepted; register had token 5165060 from w1 at 1100.000ms\n",
		"w1 write chaos/a token 5165060 at 2500.000ms sure [1000.000ms, 3000.000ms) -> REJECTED inside its sure interval (violation); register had token 5172228 from w9 at 2400.000ms\n",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("history-chaos_a.txt does not say %q:\n%s", want, a)
		}
	}
	if strings.Index(a, "w1 extend") > strings.Index(a, "w9 acquire") || strings.Index(a, "w9 acquire") > strings.Index(a, "w9 write") {
		t.Errorf("client events and writes are not in time order:\n%s", a)
	}
	if strings.Contains(a, "linearizability") || strings.Contains(a, "node-exit") {
		t.Errorf("history-chaos_a.txt shows violations that do not name it:\n%s", a)
	}

	b := read(files[1])
	for _, want := range []string{
		`#   linearizability: key "chaos/b" (1 ops): inconclusive`,
		"# The recorder's 0 ms is 2026-12-01T12:00:00.000000Z on the wall clock",
		"conn 1 (node 2) A chaos/b 100 -1 [1.000ms, 2.000ms] OK 7\n",
		"w3 query chaos/b [3.000ms, 4.000ms] -> ok free\n",
		"w2 write chaos/b token 7 at 3.000ms",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("history-chaos_b.txt does not say %q:\n%s", want, b)
		}
	}

	f := read(files[2])
	for _, want := range []string{
		"seed 42", "## Schedule (2 drawn", "    1. after 1s: kill-leader for 2s (pick 7)\n", "    2. after 3s: pause-leader for 1.5s",
		"## Injected (1)", "    1. kill-leader on node 1, from 1234.567ms to 3500.000ms; no grant for 1.1s\n",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("faults.txt does not say %q:\n%s", want, f)
		}
	}

	res.Files = files
	if s := summary(res); !strings.Contains(s, "for analysis: "+files[0]+"\n") || !strings.Contains(s, "for analysis: "+files[2]+"\n") {
		t.Errorf("the summary does not name the files:\n%s", s)
	}
	tb := &recordingTB{TB: t}
	res.Verify(tb)
	if last := tb.errors[len(tb.errors)-1]; !strings.Contains(last, "histories and faults: "+strings.Join(files, ", ")) {
		t.Errorf("Verify's message does not name the files: %q", last)
	}
}

// recordingTB records what Verify reports instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Error(args ...any)         { r.errors = append(r.errors, fmt.Sprint(args...)) }
func (r *recordingTB) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }

// TestRunNamedKeys: a key counts as named only as a whole, bare, quoted or
// inside a request line.
func TestRunNamedKeys(t *testing.T) {
	keys := []string{"a", "chaos/a", "chaos/ab", "chaos/probe-0", "x"}
	vs := []Violation{
		{CheckerFence, "key chaos/a: write at 1s ..."},
		{CheckerHang, "no answer ...: conn 3 A chaos/probe-0 500 -1 [1.000ms, 2.000ms] unanswered"},
		{CheckerTokens, `key "x": token 5 is not above token 6`},
	}
	if got, want := namedKeys(vs, keys), []string{"chaos/a", "chaos/probe-0", "x"}; !slices.Equal(got, want) {
		t.Errorf("named keys %q, want %q", got, want)
	}
}

// TestWorkloadEventLog: every call a worker makes is logged with its times
// on the recorder's clock, its outcome and what it learned, up to the
// log's bound.
func TestWorkloadEventLog(t *testing.T) {
	clock := &fakeClock{now: 10 * milli}
	wk := &worker{id: 4, cfg: &WorkloadConfig{Clock: clock.since}, ops: make(map[string]int)}
	ev := CallEvent{Kind: "acquire", Key: "k", Lease: time.Second, Wait: 50 * milli}
	wk.call(&ev, time.Second, func(ctx context.Context) error {
		clock.now += 5 * milli
		ev.Token, ev.Owner = 1025, "o1"
		return nil
	})
	ev = CallEvent{Kind: "try", Key: "k", Lease: time.Second, Wait: client.NoWait}
	wk.call(&ev, time.Second, func(ctx context.Context) error { return fmt.Errorf("x: %w", client.ErrTimeout) })
	events := (&Workload{workers: []*worker{wk}}).Stats().Ops
	if events["acquire ok"] != 1 || events["try timeout"] != 1 {
		t.Errorf("counts %v", events)
	}
	log, dropped := (&Workload{workers: []*worker{wk}}).Events()
	want := []string{
		"w4 acquire k lease 1000.000ms wait 50.000ms [10.000ms, 15.000ms] -> ok token 1025 owner o1",
		"w4 try k lease 1000.000ms nowait [15.000ms, 15.000ms] -> timeout",
	}
	if len(log) != 2 || dropped != 0 || log[0].String() != want[0] || log[1].String() != want[1] {
		t.Errorf("events %v (%d dropped), want %q", log, dropped, want)
	}

	wk.events = make([]CallEvent, maxEventsPerWorker)
	wk.log(CallEvent{Kind: "skip-release", Key: "k"})
	if _, dropped := (&Workload{workers: []*worker{wk}}).Events(); dropped != 1 || len(wk.events) != maxEventsPerWorker {
		t.Errorf("a full log: %d events, %d dropped; want the event dropped", len(wk.events), dropped)
	}
}

// TestResourceWriteLog: the resource logs every write with its stamp, the
// holder's sure interval and the register's state before it.
func TestResourceWriteLog(t *testing.T) {
	clock := &fakeClock{now: 20 * milli}
	r := NewResource(clock.since)
	old := NewHolding("k", 1025, 1, 0, 10*milli, 1000*milli)
	r.Write(old)
	clock.now = 1200 * milli
	r.Write(NewHolding("k", 2049, 2, 1100*milli, 1150*milli, 1000*milli))
	clock.now = 1300 * milli
	r.Write(old)
	writes, dropped := r.Writes()
	want := []string{
		"w1 write k token 1025 at 20.000ms sure [10.000ms, 1000.000ms) -> accepted",
		"w2 write k token 2049 at 1200.000ms sure [1150.000ms, 2100.000ms) -> accepted; register had token 1025 from w1 at 20.000ms",
		"w1 write k token 1025 at 1300.000ms sure [10.000ms, 1000.000ms) -> rejected (its lease may have run out); register had token 2049 from w2 at 1200.000ms",
	}
	if len(writes) != len(want) || dropped != 0 {
		t.Fatalf("writes %v (%d dropped)", writes, dropped)
	}
	for i := range want {
		if got := writes[i].String(); got != want[i] {
			t.Errorf("write %d: %q, want %q", i, got, want[i])
		}
	}
	if len(r.RejectedInside()) != 0 {
		t.Errorf("rejected inside: %v", r.RejectedInside())
	}
}
