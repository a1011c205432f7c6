package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// grantTo makes cs the holder of k with owner (none when ""): with the
// table's next token, 1025 for the first grant of a test's shard.
func grantTo(t *testing.T, s *shard, cs *connState, k, owner string) {
	t.Helper()
	line := "A " + k + " 10000 0"
	if owner != "" {
		line += " " + owner
	}
	request(t, s, cs, line)
	p, cmds := take(t, s)
	if string(cmds[0].Owner) != owner {
		t.Fatalf("Grant proposed with owner %q, want %q", cmds[0].Owner, owner)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	tok, _ := holderOf(s, k)
	if got := answers(cs); len(got) != 1 || got[0] != fmt.Sprint("A ", k, " OK ", tok) {
		t.Fatalf("grant answered %q, the table holds token %d", got, tok)
	}
}

// A retry with the holder's owner, on another connection, is answered OK
// with the holder's token through a Regranted commit: no queueing behind
// the waiters, no new token, the lease untouched. A try-lock retries too.
func TestRetryOfHolderGetsItsGrant(t *testing.T) {
	for _, wait := range []string{"0", "-1", "500"} {
		t.Run("wait "+wait, func(t *testing.T) {
			s := testShard(t)
			grantTo(t, s, newConn(), "k", "o1")
			request(t, s, newConn(), "A k 10000 0 other") // queued
			_, deadline := holderOf(s, "k")
			retry := newConn()
			request(t, s, retry, "A k 10000 "+wait+" o1")
			p, cmds := take(t, s)
			if len(cmds) != 1 || cmds[0].Op != sm.OpGrant || string(cmds[0].Owner) != "o1" {
				t.Fatalf("proposed %+v, want a Grant with owner o1", cmds)
			}
			apply(s, p, cmds, sm.Result{Code: sm.Regranted, Token: 1025})
			if got := answers(retry); len(got) != 1 || got[0] != "A k OK 1025" {
				t.Fatalf("retry answered %q", got)
			}
			if tok, d := holderOf(s, "k"); tok != 1025 || d != deadline {
				t.Fatalf("token %d deadline moved by %v: a retry must change nothing", tok, time.Duration(d-deadline))
			}
		})
	}
}

// A retry whose owner lost the key before its Grant applied waits like any
// acquire.
func TestRetryOfLostGrantQueues(t *testing.T) {
	s := testShard(t)
	grantTo(t, s, newConn(), "k", "o1")
	retry := newConn()
	request(t, s, retry, "A k 10000 0 o1")
	p, cmds := take(t, s)
	// Before the retry's Grant applies, o1's grant ends and o2 takes the
	// key, in an entry of another node (this one was deposed meanwhile).
	applyEntry(s, entryOf(s.node.proposerID+1, 1, false,
		sm.Command{Op: sm.OpRelease, Key: []byte("k")},
		sm.Command{Op: sm.OpGrant, Key: []byte("k"), LeaseMs: 10000, Owner: []byte("o2")}),
		sm.Result{Code: sm.Released}, sm.Result{Code: sm.Granted})
	apply(s, p, cmds, sm.Result{Code: sm.GrantRejected})
	if got := answers(retry); got != nil {
		t.Fatalf("rejected retry answered %q, want it to wait", got)
	}
	if w := s.keys["k"].firstQueued(); w == nil || w.cs != retry {
		t.Fatal("the rejected retry is not queued")
	}
}

// Acquires of one owner waiting are one acquire: one Grant, every one of
// them answered OK with its token. Another owner's acquire keeps waiting.
func TestSameOwnerWaitersShareTheGrant(t *testing.T) {
	s := testShard(t)
	holder := newConn()
	grantTo(t, s, holder, "k", "")
	a, other, b := newConn(), newConn(), newConn()
	request(t, s, a, "A k 10000 0 o2")
	request(t, s, other, "A k 10000 0 o3")
	request(t, s, b, "A k 10000 0 o2")
	request(t, s, holder, "R k 1025")
	p, cmds := take(t, s)
	if len(cmds) != 2 || cmds[1].Op != sm.OpGrant || string(cmds[1].Owner) != "o2" {
		t.Fatalf("proposed %+v, want the Release and one Grant for o2", cmds)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Released, Token: 1025}, sm.Result{Code: sm.Granted, Token: 2049})
	for _, cs := range []*connState{a, b} {
		if got := answers(cs); len(got) != 1 || got[0] != "A k OK 2049" {
			t.Fatalf("owner o2 answered %q", got)
		}
	}
	if got := answers(other); got != nil {
		t.Fatalf("owner o3 answered %q, want it to wait", got)
	}
	request(t, s, newConn(), "Q k")
}

// When the earliest acquire of an owner stops waiting (its wait runs out,
// its connection closes), the next one of the owner takes its place in the
// queue, ahead of acquires that came between them.
func TestOwnerPlaceHandedOn(t *testing.T) {
	for _, how := range []string{"timeout", "disconnect"} {
		t.Run(how, func(t *testing.T) {
			s := testShard(t)
			holder := newConn()
			grantTo(t, s, holder, "k", "")
			first, between, later := newConn(), newConn(), newConn()
			request(t, s, first, "A k 10000 1 o2")
			request(t, s, between, "A k 10000 0 o3")
			request(t, s, later, "A k 10000 0 o2")
			switch how {
			case "timeout":
				time.Sleep(2 * time.Millisecond)
				s.fireTimers(monoNow())
				if got := answers(first); len(got) != 1 || got[0] != "A k TIMEOUT" {
					t.Fatalf("first answered %q, want TIMEOUT", got)
				}
			case "disconnect":
				s.node.closeConn(first)
			}
			request(t, s, holder, "R k 1025")
			p, cmds := take(t, s)
			apply(s, p, cmds, sm.Result{Code: sm.Released, Token: 1025}, sm.Result{Code: sm.Granted, Token: 2049})
			if got := answers(later); len(got) != 1 || got[0] != "A k OK 2049" {
				t.Fatalf("the owner's later acquire answered %q, want the grant", got)
			}
			if got := answers(between); got != nil {
				t.Fatalf("the acquire between them answered %q, want it to wait", got)
			}
		})
	}
}

// A grant that lands after its own requester timed out is kept, not
// released, when another acquire of the same owner still waits for it.
func TestGrantKeptForSameOwner(t *testing.T) {
	s := testShard(t)
	first, later := newConn(), newConn()
	request(t, s, first, "A k 10000 1 o2") // granting at once
	request(t, s, later, "A k 10000 0 o2")
	p, cmds := take(t, s)
	time.Sleep(2 * time.Millisecond)
	s.fireTimers(monoNow())
	if got := answers(first); len(got) != 1 || got[0] != "A k TIMEOUT" {
		t.Fatalf("first answered %q, want TIMEOUT", got)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	if got := answers(later); len(got) != 1 || got[0] != "A k OK 1025" {
		t.Fatalf("later answered %q, want the grant", got)
	}
	pending := batched(s)
	if pending != 0 {
		t.Fatal("the grant was released although the owner's other acquire took it")
	}
}

// Q shows the holder's owner, and no owner field for a grant without one.
func TestQueryShowsOwner(t *testing.T) {
	s := testShard(t)
	grantTo(t, s, newConn(), "k", "host-1:42/ab12")
	grantTo(t, s, newConn(), "plain", "")
	cs := newConn()
	request(t, s, cs, "Q k")
	request(t, s, cs, "Q plain")
	got := answers(cs)
	if len(got) != 2 || !strings.HasPrefix(got[0], "Q k HELD 1025 ") || !strings.HasSuffix(got[0], " host-1:42/ab12") ||
		len(strings.Fields(got[1])) != 5 {
		t.Fatalf("answers %q", got)
	}
}

// A try whose owner has an acquire with its Grant in flight is that same
// acquire: it is answered by the Grant's outcome, not TIMEOUT before it
// lands (a client's clean-up try after a lost answer would leave the
// grant held until its lease ran out). Another owner's try is not held
// back.
func TestTryOfOwnerAwaitsItsGrant(t *testing.T) {
	for _, tc := range []struct {
		name           string
		acquire, try   string
		sameConn, gone bool
		want           string // the try's answer
	}{
		{"exclusive, another connection", "A k 10000 0 o1", "A k 10000 -1 o1", false, false, "A k OK 1025"},
		{"exclusive, pipelined on one connection", "A k 10000 0 o1", "A k 10000 -1 o1", true, false, "A k OK 1025"},
		{"exclusive, the acquire's connection gone", "A k 10000 0 o1", "A k 10000 -1 o1", false, true, "A k OK 1025"},
		{"exclusive, another owner", "A k 10000 0 o1", "A k 10000 -1 o2", false, false, "A k TIMEOUT"},
		{"shared, pipelined on one connection", "S k 1 10000 0 o1", "S k 1 10000 -1 o1", true, false, "S k OK 1025"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sharedShard(t)
			first := newConn()
			second := newConn()
			if tc.sameConn {
				second = first
			}
			request(t, s, first, tc.acquire)
			p, cmds := take(t, s)
			if tc.gone {
				s.node.closeConn(first)
			}
			request(t, s, second, tc.try)
			if strings.HasSuffix(tc.want, "TIMEOUT") {
				if got := answers(second); len(got) != 1 || got[0] != tc.want {
					t.Fatalf("another owner's try: %q, want %q at once", got, tc.want)
				}
				return
			}
			if got := answers(second); len(got) != 0 {
				t.Fatalf("the owner's try answered before its Grant applied: %q", got)
			}
			apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
			got := answers(second)
			if tc.sameConn {
				if len(got) != 2 || got[0] != tc.want || got[1] != tc.want {
					t.Fatalf("pipelined acquire and try: %q, want both %q", got, tc.want)
				}
			} else if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("the owner's try: %q, want %q", got, tc.want)
			}
			pending := batched(s)
			if pending != 0 {
				t.Fatal("the grant was released although the owner's try took it")
			}
		})
	}
}

// An abandoned shared grant that lands while another acquire of its owner
// has its own Grant in flight (it fitted: the key had room) is kept for
// that one, which is Regranted it: given back, it would be released under
// an acquire just answered OK with it.
func TestSharedGrantKeptForOwnersGrantInFlight(t *testing.T) {
	s := sharedShard(t)
	gone, retry := newConn(), newConn()
	request(t, s, gone, "S k 2 10000 0 o1")
	p1, cmds1 := take(t, s)
	s.node.closeConn(gone)
	request(t, s, retry, "S k 2 10000 -1 o1")
	p2, cmds2 := take(t, s)
	apply(s, p1, cmds1, sm.Result{Code: sm.Granted})
	pending := batched(s)
	if pending != 0 {
		t.Fatal("the abandoned grant was given back while its owner's other Grant was in flight")
	}
	apply(s, p2, cmds2, sm.Result{Code: sm.Regranted})
	if got := answers(retry); len(got) != 1 || got[0] != "S k OK 1025" {
		t.Fatalf("the owner's other acquire: %q, want the grant", got)
	}
}
