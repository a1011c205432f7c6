package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

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
			crossCheckSweep(t, tt.h)
		})
	}
}

// crossCheckSweep compares the sweep with porcupine on every key of h: it
// must pass what porcupine passes, and, on a history without ops of
// unknown outcome (where it is exact), fail what porcupine fails.
func crossCheckSweep(t *testing.T, h []Op) {
	t.Helper()
	for _, kc := range porcupineHistories(h) {
		linearizable := porcupine.CheckOperations(lockModel, kc.ops)
		r := sweep(kc.ops, time.Minute)
		unknown := slices.ContainsFunc(kc.ops, func(o porcupine.Operation) bool { return o.Input.(lockInput).unknown })
		switch {
		case r.gaveUp != "":
			t.Errorf("key %q: the sweep gave up: %s", kc.key, r.describe(kc.ops))
		case linearizable && !r.ok:
			t.Errorf("key %q: porcupine passes it, the sweep does not: %s", kc.key, r.describe(kc.ops))
		case !linearizable && r.ok && !unknown:
			t.Errorf("key %q: porcupine fails it, the sweep does not, without unknown ops", kc.key)
		}
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

// TestModelOwnersLegal: what a correct server does with owners (protocol
// 1.1) passes: a retry, or a second waiter of the same owner, answered with
// the grant's token; a grant made by an attempt whose answer was lost,
// learned later by a retry; its lease bounded from that first attempt.
func TestModelOwnersLegal(t *testing.T) {
	ok := codec.StatusOK
	runHistoryCases(t, []historyCase{
		{name: "retry after a lost answer gets the same token", h: []Op{
			hLost(hOwned(hGrant(1, "k", 1000, 0, 1, 0), "o1")),
			hOwned(hGrant(2, "k", 1000, 5, 6, 1025), "o1"),
			hOwned(hHeld(3, "k", 7, 8, 1025), "o1"),
			hRelease(2, "k", 1025, 9, 10, ok),
			hOwned(hGrant(3, "k", 1000, 11, 12, 2049), "o2"),
		}},
		{name: "retry after ERR and after MOVED", h: []Op{
			hFailed(hOwned(hGrant(1, "k", 1000, 0, 4, 0), "o1"), codec.CodeUnavailable),
			hMoved(hOwned(hGrant(2, "k", 1000, 5, 6, 0), "o1")),
			hOwned(hGrant(3, "k", 1000, 7, 8, 1025), "o1"),
			hOwned(hHeld(3, "k", 9, 10, 1025), "o1"),
		}},
		{name: "a retry answered before the attempt that made the grant", h: []Op{
			// The first attempt's answer comes late (a slow connection):
			// the retry learns the token first.
			hOwned(hGrant(1, "k", 1000, 0, 20, 1025), "o1"),
			hOwned(hGrant(2, "k", 1000, 5, 6, 1025), "o1"),
		}},
		{name: "retry after a query saw the lost grant", h: []Op{
			hLost(hOwned(hGrant(1, "k", 1000, 0, 1, 0), "o1")),
			hOwned(hHeld(2, "k", 2, 3, 1025), "o1"),
			hOwned(hGrant(3, "k", 1000, 4, 5, 1025), "o1"),
			hExtend(3, "k", 1025, 1000, 6, 7, ok),
			hOwned(hHeld(2, "k", 8, 9, 1025), "o1"),
		}},
		{name: "two same-owner waiters answered with one token", h: []Op{
			hOwned(hGrant(1, "k", 10000, 0, 1, 1025), "o0"),
			hOwned(hWait(hGrant(2, "k", 1000, 2, 20, 2049), 100), "o1"),
			hOwned(hWait(hGrant(3, "k", 1000, 3, 20, 2049), 100), "o1"),
			hRelease(1, "k", 1025, 10, 11, ok),
			// A retry sent after an answer arrived is answered alike.
			hOwned(hGrant(4, "k", 1000, 25, 26, 2049), "o1"),
		}},
		{name: "a retry does not touch the lease", h: []Op{
			hOwned(hGrant(1, "k", 100, 0, 1, 1025), "o1"),
			hOwned(hGrant(2, "k", 100, 80, 81, 1025), "o1"),
			hOwned(hGrant(3, "k", 1000, 120, 121, 2049), "o2"),
		}},
		{name: "a retry's lease bound comes from the first attempt", h: []Op{
			// The lost attempt may have been granted at once, so the lease
			// may end at 100ms: the grant at 121ms is legal, although the
			// retry that learned the token was sent at 60ms.
			hLost(hOwned(hGrant(1, "k", 100, 0, 50, 0), "o1")),
			hOwned(hGrant(2, "k", 100, 60, 61, 1025), "o1"),
			hOwned(hGrant(3, "k", 1000, 120, 121, 2049), "o2"),
		}},
		{name: "the owner's grant ended: a retry gets a new token", h: []Op{
			hOwned(hGrant(1, "k", 100, 0, 1, 1025), "o1"),
			hOwned(hGrant(2, "k", 100, 150, 151, 2049), "o1"),
		}},
		{name: "owners and plain acquires together", h: []Op{
			hGrant(1, "k", 100, 0, 1, 1025),
			hHeld(2, "k", 2, 3, 1025),
			hRelease(1, "k", 1025, 4, 5, ok),
			hOwned(hGrant(2, "k", 100, 6, 7, 2049), "o1"),
			hOwned(hHeld(1, "k", 8, 9, 2049), "o1"),
		}},
	})
}

// TestModelOwnersIllegal: owners do not open a way around the protocol: a
// token still has one grant and one owner, and only that owner gets it
// again, only while the grant holds.
func TestModelOwnersIllegal(t *testing.T) {
	ok := codec.StatusOK
	lin, tok := "linearizability", "tokens"
	runHistoryCases(t, []historyCase{
		{name: "a retry with a different owner answered with the holder's token", want: []string{lin, tok}, h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 1, 1025), "o1"),
			hOwned(hGrant(2, "k", 1000, 2, 3, 1025), "o2"),
		}},
		{name: "an acquire without an owner answered with the holder's token", want: []string{lin, tok}, h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 1, 1025), "o1"),
			hGrant(2, "k", 1000, 2, 3, 1025),
		}},
		{name: "same token to two owners, one after the other", want: []string{lin, tok}, h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 1, 1025), "o1"),
			hRelease(1, "k", 1025, 2, 3, ok),
			hOwned(hGrant(2, "k", 1000, 4, 5, 1025), "o2"),
		}},
		{name: "the owner's released grant handed back to a retry", want: []string{lin}, h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 1, 1025), "o1"),
			hRelease(1, "k", 1025, 2, 3, ok),
			hOwned(hGrant(2, "k", 1000, 4, 5, 1025), "o1"),
		}},
		{name: "a retry answered with the old token after a newer grant", want: []string{lin, tok}, h: []Op{
			hOwned(hGrant(1, "k", 100, 0, 1, 1025), "o1"),
			hOwned(hGrant(2, "k", 100, 150, 151, 2049), "o2"),
			hOwned(hGrant(1, "k", 100, 160, 161, 1025), "o1"),
		}},
		{name: "a new token while the owner's grant surely holds", want: []string{lin}, h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 1, 1025), "o1"),
			hOwned(hGrant(2, "k", 1000, 2, 3, 2049), "o1"),
		}},
		{name: "Q HELD T with a different owner than the grant's", want: []string{lin, tok}, h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 1, 1025), "o1"),
			hOwned(hHeld(2, "k", 2, 3, 1025), "o2"),
		}},
		{name: "Q HELD T without the grant's owner", want: []string{lin, tok}, h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 1, 1025), "o1"),
			hHeld(2, "k", 2, 3, 1025),
		}},
		{name: "Q HELD T with an owner the grant did not name", want: []string{lin, tok}, h: []Op{
			hGrant(1, "k", 1000, 0, 1, 1025),
			hOwned(hHeld(2, "k", 2, 3, 1025), "o1"),
		}},
		{name: "a phantom seen with two owners", want: []string{lin, tok}, h: []Op{
			hOwned(hHeld(1, "k", 0, 1, 1025), "o1"),
			hOwned(hHeld(2, "k", 2, 3, 1025), "o2"),
		}},
		{name: "a phantom answered to another owner", want: []string{lin, tok}, h: []Op{
			hOwned(hHeld(1, "k", 0, 1, 1025), "o1"),
			hOwned(hGrant(2, "k", 1000, 2, 3, 1025), "o2"),
		}},
		{name: "a phantom that is gone handed to its owner", want: []string{lin}, h: []Op{
			hOwned(hHeld(1, "k", 0, 1, 1025), "o1"),
			hFree(2, "k", 2, 3),
			hOwned(hGrant(3, "k", 1000, 4, 5, 1025), "o1"),
		}},
		{name: "a second holder while a retried grant surely holds", want: []string{lin}, h: []Op{
			hLost(hOwned(hGrant(1, "k", 1000, 0, 1, 0), "o1")),
			hOwned(hHeld(2, "k", 2, 3, 1025), "o1"),
			hOwned(hGrant(3, "k", 1000, 4, 5, 1025), "o1"),
			hOwned(hGrant(2, "k", 1000, 10, 11, 2049), "o2"),
		}},
		{name: "the lease bound is taken only from the same owner's attempts", want: []string{lin}, h: []Op{
			// As in the legal case of the first attempt's bound, but the lost
			// attempt named another owner: this grant is the retry's own.
			hLost(hOwned(hGrant(1, "k", 100, 0, 50, 0), "ox")),
			hOwned(hGrant(2, "k", 100, 60, 61, 1025), "o1"),
			hOwned(hGrant(3, "k", 1000, 120, 121, 2049), "o2"),
		}},
		{name: "a later attempt does not shorten the lease bound", want: []string{lin}, h: []Op{
			// The attempt sent at 200ms cannot have made the grant answered
			// at 100ms, so its short lease says nothing about it.
			hOwned(hGrant(1, "k", 1000, 0, 100, 1025), "o1"),
			hMoved(hOwned(hGrant(1, "k", 10, 200, 201, 0), "o1")),
			hOwned(hGrant(2, "k", 1000, 300, 301, 2049), "o2"),
		}},
	})
}

// TestModelStepOwners pins the owner rules on single steps: a retry leaves
// the state exactly as it was (no new token, the lease untouched), and the
// owners leave with their tokens, so that equal situations are equal
// states.
func TestModelStepOwners(t *testing.T) {
	s := lockState{holder: 1025, holderOwner: "o1", expiryLB: int64(msec(100)), maxToken: 1025}
	retry := lockInput{op: codec.OpAcquire, owner: "o1", leaseMs: 1000, leaseLB: int64(msec(1050)), call: int64(msec(50)), ret: int64(msec(51))}
	got := step(s, retry, lockOutput{status: codec.StatusOK, token: 1025})
	if len(got) != 1 || got[0].(lockState) != s {
		t.Errorf("retry of the holder's owner: %v, want the state unchanged %+v", got, s)
	}
	other := retry
	other.owner = "o2"
	if got := step(s, other, lockOutput{status: codec.StatusOK, token: 1025}); len(got) != 0 {
		t.Errorf("the holder's token to another owner: legal (%v), want illegal", got)
	}

	rel := lockInput{op: codec.OpRelease, token: 1025, call: int64(msec(60)), ret: int64(msec(61))}
	got = step(s, rel, lockOutput{status: codec.StatusOK})
	if len(got) != 1 || got[0].(lockState) != (lockState{expiryLB: s.expiryLB, maxToken: 1025}) {
		t.Errorf("release of the holder: %v, want no holder and no owner", got)
	}

	ghost := lockState{ghost: 2049, ghostOwner: "o2", maxToken: 2049}
	learn := lockInput{op: codec.OpAcquire, owner: "o2", leaseMs: 100, leaseLB: int64(msec(30)), call: int64(msec(50)), ret: int64(msec(51))}
	got = step(ghost, learn, lockOutput{status: codec.StatusOK, token: 2049})
	want := lockState{holder: 2049, holderOwner: "o2", expiryLB: int64(msec(30)), maxToken: 2049}
	if len(got) != 1 || got[0].(lockState) != want {
		t.Errorf("the phantom's owner learns its token: %v, want %+v", got, want)
	}
	if hashState(lockState{holder: 1, holderOwner: "ab"}) == hashState(lockState{holder: 1, holderOwner: "a", ghostOwner: "b"}) {
		t.Errorf("owners split differently hash alike")
	}
}
