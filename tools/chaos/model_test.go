package chaos

import (
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/codec"
)

// checkersFound is the set of checkers that reported a violation, by the
// name each line starts with.
func checkersFound(rep Report) []string {
	var names []string
	for _, v := range rep.Violations {
		name, _, _ := strings.Cut(v, ":")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// hWait makes an acquire wait up to waitMs.
func hWait(o Op, waitMs int64) Op {
	o.WaitMs = waitMs
	return o
}

// historyCase is a hand-built history and the checkers that must flag it
// (none for a legal one).
type historyCase struct {
	name string
	h    []Op
	want []string
}

// runHistoryCases checks each case's history and compares the checkers
// that fired.
func runHistoryCases(t *testing.T, tests []historyCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Check(tt.h, nil, CheckConfig{OutDir: t.TempDir()})
			if got := checkersFound(rep); !slices.Equal(got, tt.want) {
				t.Errorf("checkers that fired: %v, want %v; violations:\n%s", got, tt.want, strings.Join(rep.Violations, "\n"))
			}
			if rep.OK() != (len(tt.want) == 0) {
				t.Errorf("OK() = %v with %d violations", rep.OK(), len(rep.Violations))
			}
		})
	}
}

// TestModelLegal: histories a correct server can produce pass, including
// those that need the model's phantoms, unknown outcomes and expiries.
func TestModelLegal(t *testing.T) {
	ok, nh := codec.StatusOK, codec.StatusNotHeld
	runHistoryCases(t, []historyCase{
		{name: "grant, release, regrant", h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hRelease(1, "k", 1025, 2, 3, ok),
			hGrant(2, "k", 1000, 4, 5, 2049),
		}},
		{name: "expiry after expiryLB then a new grant", h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hGrant(2, "k", 1000, 50, 120, 2049),
			hRelease(1, "k", 1025, 150, 151, nh),
		}},
		{name: "expiry seen by a query then a grant", h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hFree(2, "k", 100, 101),
			hGrant(2, "k", 100, 102, 103, 2049),
		}},
		{name: "holder's release is NOTHELD after its lease", h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hRelease(1, "k", 1025, 150, 151, nh),
			hFree(1, "k", 152, 153),
		}},
		{name: "phantom seen by Q then a higher grant", h: []Op{
			hHeld(1, "k", 0, 1, 3073),
			hHeld(2, "k", 2, 3, 3073),
			hGrant(1, "k", 100, 4, 5, 4097),
		}},
		{name: "phantom of a lost acquire", h: []Op{
			hLost(hGrant(1, "k", 100, 0, 1, 0)),
			hHeld(2, "k", 2, 3, 1025),
			hTimeout(2, "k", -1, 4, 5),
			hFree(2, "k", 6, 7),
			hGrant(2, "k", 100, 8, 9, 2049),
		}},
		{name: "release without token frees a phantom", h: []Op{
			hHeld(1, "k", 0, 1, 3073),
			hRelease(1, "k", 0, 2, 3, ok),
			hFree(1, "k", 4, 5),
			hRelease(1, "k", 0, 6, 7, nh),
		}},
		{name: "try-lock TIMEOUT on a free key", h: []Op{
			hTimeout(1, "k", -1, 0, 1),
			hFree(1, "k", 2, 3),
		}},
		{name: "unknown release (ERR) then regrant", h: []Op{
			hGrant(1, "k", 10000, 0, 1, 1025),
			hFailed(hRelease(1, "k", 1025, 2, 3, ok), codec.CodeUnavailable),
			hGrant(2, "k", 1000, 4, 5, 2049),
		}},
		{name: "unknown release (no answer) then regrant", h: []Op{
			hGrant(1, "k", 10000, 0, 1, 1025),
			hLost(hRelease(1, "k", 1025, 2, 3, ok)),
			hGrant(2, "k", 1000, 4, 5, 2049),
		}},
		{name: "unknown release that lands late", h: []Op{
			hGrant(1, "k", 10000, 0, 1, 1025),
			hLost(hRelease(1, "k", 1025, 2, 3, ok)),
			hHeld(2, "k", 4, 5, 1025),
			hFree(2, "k", 6, 7),
		}},
		{name: "unknown release that never lands", h: []Op{
			hGrant(1, "k", 10000, 0, 1, 1025),
			hLost(hRelease(1, "k", 1025, 2, 3, ok)),
			hHeld(2, "k", 4, 5, 1025),
			hTimeout(2, "k", -1, 6, 7),
		}},
		{name: "lease extended then kept past the original lease", h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hExtend(1, "k", 1025, 1000, 50, 51, ok),
			hHeld(2, "k", 200, 201, 1025),
			hTimeout(2, "k", -1, 300, 301),
			hRelease(1, "k", 1025, 400, 401, ok),
			hGrant(2, "k", 1000, 402, 403, 2049),
		}},
		{name: "lease kept long past expiryLB (no leader)", h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hHeld(2, "k", 5000, 5001, 1025),
			hExtend(1, "k", 1025, 100, 5002, 5003, ok),
		}},
		{name: "a query sees a grant before its answer arrives", h: []Op{
			hGrant(1, "k", 1000, 0, 10, 1025),
			hHeld(2, "k", 2, 3, 1025),
		}},
		{name: "a waiting acquire is granted on release", h: []Op{
			hGrant(1, "k", 10000, 0, 1, 1025),
			hWait(hGrant(2, "k", 10000, 2, 20, 2049), 100),
			hRelease(1, "k", 1025, 10, 11, ok),
		}},
		{name: "MOVED and unanswered queries change nothing", h: []Op{
			hGrant(1, "k", 10000, 0, 1, 1025),
			hMoved(hGrant(2, "k", 1000, 2, 3, 0)),
			hMoved(hRelease(2, "k", 0, 4, 5, ok)),
			hFailed(hFree(2, "k", 6, 7), codec.CodeUnavailable),
			hHeld(2, "k", 8, 9, 1025),
		}},
		{name: "keys are independent", h: []Op{
			hGrant(1, "a", 10000, 0, 1, 1025),
			hGrant(2, "b", 10000, 2, 3, 2049),
			hHeld(1, "a", 4, 5, 1025),
			hHeld(1, "b", 4, 5, 2049),
		}},
	})
}

// TestModelIllegal: each history breaks the protocol, and the checkers that
// should catch it do.
func TestModelIllegal(t *testing.T) {
	ok, nh := codec.StatusOK, codec.StatusNotHeld
	lin, tok := "linearizability", "tokens"
	runHistoryCases(t, []historyCase{
		{name: "a second grant while the first surely holds", want: []string{lin}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hGrant(2, "k", 1000, 10, 11, 2049),
		}},
		{name: "token not increasing", want: []string{lin, tok}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 2049),
			hRelease(1, "k", 2049, 2, 3, ok),
			hGrant(2, "k", 1000, 4, 5, 1025),
		}},
		{name: "token reused", want: []string{lin, tok}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hRelease(1, "k", 1025, 2, 3, ok),
			hGrant(2, "k", 1000, 4, 5, 1025),
		}},
		{name: "release undone", want: []string{lin}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hRelease(1, "k", 1025, 2, 3, ok),
			hHeld(2, "k", 4, 5, 1025),
		}},
		{name: "extend undone", want: []string{lin}, h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hExtend(1, "k", 1025, 1000, 50, 51, ok),
			hGrant(2, "k", 1000, 200, 201, 2049),
		}},
		{name: "Q FREE while a lease surely holds", want: []string{lin}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hFree(2, "k", 10, 11),
		}},
		{name: "grant during a lease hidden behind a later expiry", want: []string{lin}, h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hFree(2, "k", 50, 150),
			hGrant(3, "k", 1000, 20, 95, 2049),
		}},
		{name: "release by a non-holder succeeds", want: []string{lin}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hRelease(2, "k", 2049, 2, 3, ok),
		}},
		{name: "stale holder seen after a newer grant", want: []string{lin}, h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hGrant(2, "k", 100, 200, 201, 2049),
			hHeld(3, "k", 210, 211, 1025),
		}},
		{name: "phantom older than a grant", want: []string{lin}, h: []Op{
			hGrant(1, "k", 100, 0, 1, 2049),
			hHeld(2, "k", 200, 201, 1025),
		}},
		{name: "extend after release", want: []string{lin}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hRelease(1, "k", 1025, 2, 3, ok),
			hExtend(1, "k", 1025, 1000, 4, 5, ok),
		}},
		{name: "holder's release NOTHELD within its lease", want: []string{lin}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hRelease(1, "k", 1025, 2, 3, nh),
		}},
		{name: "release without token NOTHELD within a lease", want: []string{lin}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hRelease(2, "k", 0, 2, 3, nh),
		}},
		{name: "an unknown release cannot release another grant", want: []string{lin}, h: []Op{
			hGrant(1, "k", 10000, 0, 1, 1025),
			hLost(hRelease(2, "k", 2049, 2, 3, ok)),
			hGrant(2, "k", 1000, 4, 5, 3073),
		}},
	})
}

// TestModelStepFloor pins the rule the time bound rests on: once an op has
// seen a lease end, no op that returned before that end can follow it.
func TestModelStepFloor(t *testing.T) {
	s := lockState{holder: 1025, expiryLB: int64(msec(100)), maxToken: 1025}
	query := lockInput{op: codec.OpQuery, call: int64(msec(50)), ret: int64(msec(150))}
	next := step(s, query, lockOutput{status: codec.StatusFree})
	if len(next) != 1 {
		t.Fatalf("Q FREE after the lease's end: %d states, want 1", len(next))
	}
	after := next[0].(lockState)
	if after.holder != 0 || after.floor != int64(msec(100)) {
		t.Fatalf("Q FREE after the lease's end: state %+v, want no holder and floor 100ms", after)
	}
	early := lockInput{op: codec.OpAcquire, leaseMs: 10, call: int64(msec(20)), ret: int64(msec(95))}
	if got := step(after, early, lockOutput{status: codec.StatusOK, token: 2049}); len(got) != 0 {
		t.Errorf("grant returning at 95ms after the floor of 100ms: legal (%v), want illegal", got)
	}
	late := early
	late.ret = int64(msec(100))
	if got := step(after, late, lockOutput{status: codec.StatusOK, token: 2049}); len(got) != 1 {
		t.Errorf("grant returning at the floor: %d states, want 1", len(got))
	}
	if got := step(s, early, lockOutput{status: codec.StatusOK, token: 2049}); len(got) != 0 {
		t.Errorf("grant returning before expiryLB: legal (%v), want illegal", got)
	}
}
