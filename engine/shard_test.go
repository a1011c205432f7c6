package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
	"github.com/panjf2000/gnet/v2"
)

// These tests drive one shard without Raft: they take what it would propose,
// decode it, and feed chosen outcomes back through applied, the way the
// state machine does. They cover the paths a live node rarely takes: dropped
// and timed-out proposals, abandoned grants, deferred answers.

// fakeConn is the part of gnet.Conn a connState uses.
type fakeConn struct{ gnet.Conn }

func (fakeConn) Wake(gnet.AsyncCallback) error { return nil }
func (fakeConn) Fd() int                       { return -1 } // poll ignores it: never "closed by peer"

// testShard is a serving leader shard of a one-node cluster.
func testShard(t *testing.T) *shard {
	t.Helper()
	n := &Node{cfg: Config{ID: 1, Peers: []Peer{{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}}}, proposerID: 42}
	s := newShard(n, 1)
	s.leaderID, s.serving = 1, true
	return s
}

func newConn() *connState { return &connState{c: fakeConn{}} }

// answers returns (and forgets) what cs was sent.
func answers(cs *connState) []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.out == nil {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(string(cs.out.B), "\n"), "\n")
	cs.out = nil
	return lines
}

// request parses line and hands it to s as an event loop would.
func request(t *testing.T, s *shard, cs *connState, line string) {
	t.Helper()
	var r codec.Request
	if err := codec.ParseRequest([]byte(line), &r); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	s.handle(cs, &r, monoNow())
}

// take returns the shard's next proposal and its decoded commands.
func take(t *testing.T, s *shard) (*proposal, []sm.Command) {
	t.Helper()
	s.mu.Lock()
	p := s.takeProposal()
	s.mu.Unlock()
	if p == nil {
		t.Fatal("nothing to propose")
	}
	h, cmds, err := sm.DecodeBatch(p.data, nil)
	if err != nil || h.Seq != p.seq {
		t.Fatalf("decode proposal: %v (seq %d, want %d)", err, h.Seq, p.seq)
	}
	return p, cmds
}

// apply feeds outcomes for p's commands back, as the state machine would.
func apply(s *shard, p *proposal, cmds []sm.Command, results ...sm.Result) {
	s.applied(sm.Header{Proposer: s.node.proposerID, Seq: p.seq}, cmds, results)
}

func TestGrantAnsweredOnce(t *testing.T) {
	s := testShard(t)
	cs := newConn()
	request(t, s, cs, "A k 10000 50")
	p, cmds := take(t, s)
	if len(cmds) != 1 || cmds[0].Op != sm.OpGrant {
		t.Fatalf("proposed %+v, want one Grant", cmds)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	if got := answers(cs); len(got) != 1 || got[0] != "A k OK 1025" {
		t.Fatalf("answers %q", got)
	}
}

// A waiter whose wait runs out while its Grant is in flight is answered
// TIMEOUT once; when the proposal then times out too, it gets no second
// answer, and if the Grant lands after all, it is released at once.
func TestTimedOutWaiterAnsweredOnce(t *testing.T) {
	s := testShard(t)
	cs := newConn()
	request(t, s, cs, "A k 10000 1")
	p, cmds := take(t, s)
	time.Sleep(2 * time.Millisecond)
	s.fireTimers(monoNow())
	if got := answers(cs); len(got) != 1 || got[0] != "A k TIMEOUT" {
		t.Fatalf("after the wait: %q, want one TIMEOUT", got)
	}
	s.mu.Lock()
	s.failProposal(p, codec.CodeUnavailable, "not committed in time")
	s.mu.Unlock()
	if got := answers(cs); got != nil {
		t.Fatalf("a second answer to the same acquire: %q", got)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	if got := answers(cs); got != nil {
		t.Fatalf("the late grant was answered: %q", got)
	}
	_, rel := take(t, s)
	if len(rel) != 1 || rel[0].Op != sm.OpRelease || rel[0].Token != 1025 {
		t.Fatalf("after the late grant proposed %+v, want Release of token 1025", rel)
	}
}

// A Grant that Raft drops answers its waiter (it retries where MOVED or
// unavailable sends it) and the next waiter gets its turn.
func TestDroppedGrantAnswersAndMovesOn(t *testing.T) {
	s := testShard(t)
	first, second := newConn(), newConn()
	request(t, s, first, "A k 10000 0")
	request(t, s, second, "A k 10000 0")
	p, _ := take(t, s)
	s.mu.Lock()
	if !s.removeInflight(p) {
		s.mu.Unlock()
		t.Fatal("proposal not in flight")
	}
	s.resolveDropped(p)
	s.mu.Unlock()
	if got := answers(first); len(got) != 1 || !strings.HasPrefix(got[0], "A k ERR unavailable") {
		t.Fatalf("first waiter: %q, want ERR unavailable", got)
	}
	_, cmds := take(t, s)
	if len(cmds) != 1 || cmds[0].Op != sm.OpGrant {
		t.Fatalf("next proposal %+v, want the second waiter's Grant", cmds)
	}
	if got := answers(second); got != nil {
		t.Fatalf("second waiter answered early: %q", got)
	}
}

// A try-lock behind the same connection's waiting acquire of the same key
// is answered after it, never before.
func TestDeferredAnswerKeepsOrder(t *testing.T) {
	s := testShard(t)
	holder, cs := newConn(), newConn()
	request(t, s, holder, "A k 10000 0")
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	answers(holder)

	request(t, s, cs, "A k 10000 0")  // waits
	request(t, s, cs, "A k 10000 -1") // decided (TIMEOUT) but must wait its turn
	if got := answers(cs); got != nil {
		t.Fatalf("answered before the earlier acquire: %q", got)
	}
	request(t, s, holder, "R k 1025")
	p, cmds = take(t, s)
	if len(cmds) != 2 || cmds[0].Op != sm.OpRelease || cmds[1].Op != sm.OpGrant {
		t.Fatalf("proposed %+v, want Release and the hand-off Grant in one batch", cmds)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Released, Token: 1025}, sm.Result{Code: sm.Granted, Token: 2049})
	got := answers(cs)
	want := []string{"A k OK 2049", "A k TIMEOUT"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("answers %q, want %q", got, want)
	}
}

// A grant for a waiter whose connection closed is released at once and the
// lock goes to the next waiter in the same batch.
func TestAbandonedGrantHandedOn(t *testing.T) {
	s := testShard(t)
	gone, next := newConn(), newConn()
	request(t, s, gone, "A k 10000 0")
	request(t, s, next, "A k 10000 0")
	p, cmds := take(t, s)
	for _, w := range gone.close() {
		s.mu.Lock()
		s.abandon(w)
		s.mu.Unlock()
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	_, cmds = take(t, s)
	if len(cmds) != 2 || cmds[0].Op != sm.OpRelease || cmds[0].Token != 1025 || cmds[1].Op != sm.OpGrant {
		t.Fatalf("proposed %+v, want Release of 1025 and the next Grant", cmds)
	}
}
