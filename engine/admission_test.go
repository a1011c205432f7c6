package engine

import (
	"strings"
	"testing"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// withLimits is DefaultLimits changed by set.
func withLimits(set func(l *Limits)) Limits {
	l := DefaultLimits()
	set(&l)
	return l
}

// Past MaxWaitersPerKey an acquire that would take a new place in the queue
// is answered ERR overloaded; one whose owner already waits, and a retry of
// the holder's owner, take no new place and are let in; other keys are
// served; and the ERR keeps the order of answers on its connection.
func TestWaitersPerKeyLimit(t *testing.T) {
	s := limitedShard(t, withLimits(func(l *Limits) { l.MaxWaitersPerKey = 2 }))
	const refused = "A k ERR overloaded too many acquires wait for this key (2), retry later"
	grantTo(t, s, connTo(s), "k", "holder")
	a, b, c, retry, other := connTo(s), connTo(s), connTo(s), connTo(s), connTo(s)
	request(t, s, a, "A k 10000 0 o1")
	request(t, s, b, "A k 10000 1") // its wait runs out below
	request(t, s, c, "A k 10000 0")
	if got := answers(c); len(got) != 1 || got[0] != refused {
		t.Fatalf("third place: %q, want %q", got, refused)
	}
	request(t, s, c, "A k 10000 0 o1") // shares a's place
	request(t, s, retry, "A k 10000 0 holder")
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Regranted, Token: 1025})
	if got := answers(retry); len(got) != 1 || got[0] != "A k OK 1025" {
		t.Fatalf("retry of the holder: %q, want its grant", got)
	}
	if got := answers(c); got != nil {
		t.Fatalf("acquire of a waiting owner answered %q, want it queued", got)
	}
	request(t, s, other, "A free 10000 0")
	if s.pending.Len() != 1 {
		t.Fatalf("another key's acquire: %d commands batched, want its Grant", s.pending.Len())
	}

	// b's next acquire of k is refused, but only after b's first is
	// answered.
	request(t, s, b, "A k 10000 0")
	if got := answers(b); got != nil {
		t.Fatalf("answered ahead of b's waiting acquire: %q", got)
	}
	time.Sleep(2 * time.Millisecond)
	s.fireTimers(monoNow())
	if got := answers(b); len(got) != 2 || got[0] != "A k TIMEOUT" || got[1] != refused {
		t.Fatalf("b: %q, want TIMEOUT then %q", got, refused)
	}
	if n := s.node.adm.hits.counts[limitWaitersPerKey].Load(); n != 2 {
		t.Fatalf("%d hits of the limit counted, want 2", n)
	}
}

// MaxWaitersPerConn bounds one connection's unanswered acquires, MaxWaiters
// those of every connection; an acquire that goes away makes room again.
func TestWaiterLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limits  Limits
		sameCon bool // all acquires on one connection
		refused string
	}{
		{"per connection", withLimits(func(l *Limits) { l.MaxWaitersPerConn = 2 }), true,
			"A k3 ERR overloaded too many unanswered acquires on this connection (2)"},
		{"on the node", withLimits(func(l *Limits) { l.MaxWaiters = 2 }), false,
			"A k3 ERR overloaded too many acquires wait on this node (2), retry later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := limitedShard(t, tc.limits)
			for _, k := range []string{"k1", "k2", "k3"} {
				grantTo(t, s, connTo(s), k, "")
			}
			first, second := connTo(s), connTo(s)
			if tc.sameCon {
				second = first
			}
			request(t, s, first, "A k1 10000 0")
			request(t, s, second, "A k2 10000 0")
			request(t, s, first, "A k3 10000 0")
			if got := answers(first); len(got) != 1 || got[0] != tc.refused {
				t.Fatalf("third acquire: %q, want %q", got, tc.refused)
			}
			s.node.closeConn(second)
			if n := s.node.adm.waiters.Load(); n != map[bool]int64{true: 0, false: 1}[tc.sameCon] {
				t.Fatalf("%d waiters counted after a close", n)
			}
			third := connTo(s)
			request(t, s, third, "A k3 10000 0")
			if got := answers(third); got != nil {
				t.Fatalf("after a waiter left: %q, want the acquire queued", got)
			}
		})
	}
}

// Every way an acquire ends takes it out of the node's count: granted,
// timed out, deferred and answered, abandoned.
func TestWaiterCountReturnsToZero(t *testing.T) {
	s := testShard(t)
	holder, cs, gone := connTo(s), connTo(s), connTo(s)
	grantTo(t, s, holder, "k", "")
	request(t, s, cs, "A k 10000 1")
	request(t, s, cs, "A k 10000 -1") // deferred behind the first
	request(t, s, gone, "A k 10000 0")
	request(t, s, gone, "A j 10000 0") // granted at once
	if n := s.node.adm.waiters.Load(); n != 4 {
		t.Fatalf("%d waiters counted, want 4", n)
	}
	time.Sleep(2 * time.Millisecond)
	s.fireTimers(monoNow())
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 7})
	s.node.closeConn(gone)
	if got := answers(cs); len(got) != 2 {
		t.Fatalf("answers %q, want TIMEOUT twice", got)
	}
	if n := s.node.adm.waiters.Load(); n != 0 {
		t.Fatalf("%d waiters counted after all were answered or abandoned", n)
	}
}

// MaxConns admits that many connections, and one more once one closed.
func TestConnLimit(t *testing.T) {
	adm := newAdmission(withLimits(func(l *Limits) { l.MaxConns = 2 }), nil)
	for i := range 2 {
		if !adm.admitConn() {
			t.Fatalf("connection %d of 2 refused", i+1)
		}
	}
	if adm.admitConn() {
		t.Fatal("admitted past the limit")
	}
	adm.connClosed()
	if !adm.admitConn() {
		t.Fatal("refused after a connection closed")
	}
}

// A burst of answers past MaxUnsentPerConn, before the loop could flush
// them, cuts the connection off: its output is dropped, the loop is told to
// close it, and a grant that lands for it goes back at once.
func TestBurstOfAnswersCutsOff(t *testing.T) {
	s := limitedShard(t, withLimits(func(l *Limits) { l.MaxUnsentPerConn = 64 }))
	cs := connTo(s)
	request(t, s, cs, "A waits 10000 0")
	p, cmds := take(t, s)
	for range 10 {
		request(t, s, cs, "Q "+strings.Repeat("q", 20)) // 27 bytes of answer each
	}
	if !cs.beginTraffic() {
		t.Fatal("not cut off after 270 bytes of answers")
	}
	if got := answers(cs); got != nil {
		t.Fatalf("a cut-off connection keeps %d answers", len(got))
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	_, cmds = take(t, s)
	if len(cmds) != 1 || cmds[0].Op != sm.OpRelease || cmds[0].Token != 1025 {
		t.Fatalf("proposed %+v, want the grant released", cmds)
	}
}
