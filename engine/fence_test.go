package engine

import (
	"strings"
	"testing"

	sm "github.com/baton-dev/baton/statemachine"
)

// The fence (statemachine: The fence) from the engine's side: a node serves
// only while its fence is the latest, treats a batch of its own that came
// back Fenced as dropped, and proposes nothing a deposed node could get
// into the log by dragonboat's forwarding.

// foreignFence applies another node's fence to s.
func foreignFence(s *shard) {
	applyEntry(s, entryOf(s.node.proposerID+1, 1, true))
}

func isServing(s *shard) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving
}

// TestForeignFenceEndsServingAndLeaderClaimsBack: another node's fence
// ends serving; Raft still says this node leads (the fence came from a
// node that had just lost its leadership), so a fence of its own claims
// the table back, and an acquire that comes meanwhile waits for it and is
// then served, rather than answered ERR unavailable (awaitingFence).
func TestForeignFenceEndsServingAndLeaderClaimsBack(t *testing.T) {
	s := testShard(t)
	foreignFence(s)
	if isServing(s) {
		t.Fatal("still serving after another node's fence applied")
	}
	cs := newConn()
	request(t, s, cs, "A k 10000 0")
	if got := answers(cs); len(got) != 0 {
		t.Fatalf("acquire while the fence is another's, before its own applied: %q", got)
	}
	p, cmds := take(t, s)
	if !p.fence || len(cmds) != 0 {
		t.Fatalf("proposed %+v (fence %v), want a fence alone", cmds, p.fence)
	}
	apply(s, p, nil)
	if !isServing(s) {
		t.Fatal("not serving after its own fence applied")
	}
	p, cmds = take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted})
	if got := answers(cs); len(got) != 1 || got[0] != "A k OK 1025" {
		t.Fatalf("the acquire that waited for the fence: %q", got)
	}
}

// TestAwaitingFenceEndsWithLeadership: requests that wait for a fence are
// answered MOVED when another node is named leader before it applied,
// and a query waiting with them is answered too.
func TestAwaitingFenceEndsWithLeadership(t *testing.T) {
	s := testShard(t)
	foreignFence(s)
	cs := newConn()
	request(t, s, cs, "A k 10000 0")
	request(t, s, cs, "K j 1025 1000")
	if got := answers(cs); len(got) != 0 {
		t.Fatalf("answered before the fence: %q", got)
	}
	s.node.cfg.Peers = append(s.node.cfg.Peers, Peer{RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"})
	s.leaderUpdated(2)
	got := answers(cs)
	if len(got) != 2 || !strings.HasPrefix(got[0], "K j MOVED") && !strings.HasPrefix(got[1], "K j MOVED") {
		t.Fatalf("after another node was named leader: %q, want A and K answered MOVED", got)
	}
	for _, g := range got {
		if !strings.Contains(g, " MOVED ") {
			t.Fatalf("after another node was named leader: %q, want A and K answered MOVED", got)
		}
	}
}

func TestFencedGrantAnsweredAsDropped(t *testing.T) {
	s := testShard(t)
	cs := newConn()
	request(t, s, cs, "A k 10000 5000 o1")
	p, cmds := take(t, s)
	foreignFence(s)
	apply(s, p, cmds, sm.Result{Code: sm.Fenced})
	if got := answers(cs); len(got) != 1 || got[0] != "A k ERR unavailable leadership is changing or unknown, retry" {
		t.Fatalf("answers %q, want one ERR unavailable", got)
	}
	s.mu.Lock()
	ks := s.keys["k"]
	s.mu.Unlock()
	if ks != nil && (ks.slot != noSlot || ks.granting != nil || ks.head != nil) {
		t.Fatalf("the fenced grant left state behind: slot %d granting %v head %v", ks.slot, ks.granting, ks.head)
	}
	// A fence to claim the table back, and nothing else.
	if f, cmds := take(t, s); !f.fence || len(cmds) != 0 {
		t.Fatalf("proposed %+v, want only a fence", cmds)
	}
	nothingProposed(t, s, "after the fence")
}

// A fenced batch of ours is the news that another node's fence came after
// ours: serving ends then too, even before that fence is seen.
func TestFencedBatchEndsServing(t *testing.T) {
	s := testShard(t)
	cs := newConn()
	grantTo(t, s, cs, "k", "")
	request(t, s, cs, "R k 1025")
	p, cmds := take(t, s)
	applyUnseen(s, entryOf(s.node.proposerID+1, 1, true)) // the fence this node has not seen yet
	apply(s, p, cmds, sm.Result{Code: sm.Fenced})
	if got := answers(cs); len(got) != 1 || got[0] != "R k ERR unavailable leadership is changing or unknown, retry" {
		t.Fatalf("answers %q, want one ERR unavailable", got)
	}
	if isServing(s) {
		t.Fatal("still serving after a batch of ours was fenced")
	}
}

// The run that found the fence: a deposed leader's Grant applied for an
// acquire whose connection had closed, and the leader proposed its release,
// which dragonboat forwarded to the new leader, where it freed the grant
// the owner's retry had just been given. A node that does not serve gives
// back no grant: the lease does.
func TestGrantForNobodyKeptWhenNotServing(t *testing.T) {
	s := testShard(t)
	cs := newConn()
	request(t, s, cs, "A k 10000 5000 o1")
	p, cmds := take(t, s)
	s.node.closeConn(cs)
	s.leaderUpdated(2)
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	pending := batched(s)
	if pending != 0 {
		t.Fatalf("%d commands pending on a node that does not serve", pending)
	}
	nothingProposed(t, s, "by a node that does not serve")
}

// Nothing is proposed by a node that does not serve, and no fence by one
// that Raft does not say leads: dragonboat would forward either to the
// leader.
func TestNothingProposedUnlessLeading(t *testing.T) {
	s := testShard(t)
	s.mu.Lock()
	s.pending.Append(sm.Command{Op: sm.OpRelease, Key: []byte("k"), Token: 1025})
	s.origins = append(s.origins, origin{kind: originInternal, ks: s.addKey([]byte("k")), token: 1025})
	s.serving, s.needFence, s.leaderID = false, true, 2
	s.mu.Unlock()
	nothingProposed(t, s, "by a follower")
	s.mu.Lock()
	s.leaderID = 1
	s.mu.Unlock()
	if p, cmds := take(t, s); !p.fence || len(cmds) != 0 {
		t.Fatalf("the leader proposed %+v before serving, want its fence first", cmds)
	}
	nothingProposed(t, s, "by a leader whose fence has not applied")
}

// TestFenceWaitRunsOut: what a node holds for its fence is answered as
// before the wait once fenceWait passes without the fence (a transfer of
// the leadership under way drops the fence's proposal): batched extends
// and tries ERR unavailable, queries handed to the reader; an acquire that
// waits keeps waiting within its own wait, and is granted once the fence
// applies after all. What comes later is answered at once.
func TestFenceWaitRunsOut(t *testing.T) {
	s := testShard(t)
	foreignFence(s)
	cs := newConn()
	request(t, s, cs, "A k 10000 0")
	request(t, s, cs, "K j 1025 1000")
	request(t, s, cs, "A t 10000 -1")
	request(t, s, cs, "Q q")
	if got := answers(cs); len(got) != 0 {
		t.Fatalf("answered while awaiting the fence: %q", got)
	}
	if batch, _ := s.takeReads(); len(batch) != 0 {
		t.Fatalf("the reader took %d reads held for the fence", len(batch))
	}
	s.fireTimers(s.fenceWaitUntil - 1)
	if got := answers(cs); len(got) != 0 {
		t.Fatalf("answered before fenceWait passed: %q", got)
	}
	s.fireTimers(s.fenceWaitUntil)
	want := []string{"K j ERR unavailable leadership is changing or unknown, retry", "A t ERR unavailable leadership is changing or unknown, retry"}
	if got := answers(cs); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("once fenceWait passed: %q, want %q", got, want)
	}
	if batch, serving := s.takeReads(); len(batch) != 1 || serving {
		t.Fatalf("the reader takes %d reads (serving %v) once fenceWait passed, want the Q, not serving", len(batch), serving)
	}
	request(t, s, cs, "K j 1025 1000")
	if got := answers(cs); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("an extend after fenceWait passed: %q, want %q", got, want[0])
	}
	p, cmds := take(t, s)
	if !p.fence || len(cmds) != 0 {
		t.Fatalf("proposed %+v (fence %v), want the fence alone", cmds, p.fence)
	}
	apply(s, p, nil)
	p, cmds = take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted})
	if got := answers(cs); len(got) != 1 || got[0] != "A k OK 1025" {
		t.Fatalf("the acquire that waited on after fenceWait, once the fence applied: %q", got)
	}
}

// TestTryAwaitsFence: a try that comes while the node awaits its fence is
// decided once the fence applied, from a view that holds every commit
// before it, not from the view it came to: there the key may still show a
// holder whose release has committed.
func TestTryAwaitsFence(t *testing.T) {
	s := testShard(t)
	cs := newConn()
	request(t, s, cs, "A k 10000 0")
	request(t, s, cs, "A h 10000 0")
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted}, sm.Result{Code: sm.Granted})
	if got := answers(cs); len(got) != 2 {
		t.Fatalf("the holders' acquires: %q", got)
	}
	// Another node led for a while, and released k (its entry is in the
	// log, not yet applied here); this node is elected again.
	foreignFence(s)
	try := newConn()
	request(t, s, try, "A k 10000 -1")
	request(t, s, try, "A h 10000 -1")
	if got := answers(try); len(got) != 0 {
		t.Fatalf("tries answered from the view before the fence: %q", got)
	}
	applyEntry(s, entryOf(s.node.proposerID+1, 2, false, sm.Command{Op: sm.OpRelease, Key: []byte("k"), Token: 1025}), sm.Result{Code: sm.Released})
	p, _ = take(t, s)
	if !p.fence {
		t.Fatal("want the fence proposed")
	}
	apply(s, p, nil)
	if got := answers(try); len(got) != 1 || got[0] != "A h TIMEOUT" {
		t.Fatalf("once the fence applied: %q, want h TIMEOUT (still held) and k's Grant proposed", got)
	}
	p, cmds = take(t, s)
	if len(cmds) != 1 || string(cmds[0].Key) != "k" {
		t.Fatalf("proposed %+v, want the Grant of k", cmds)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted})
	if got := answers(try); len(got) != 1 || !strings.HasPrefix(got[0], "A k OK ") {
		t.Fatalf("the try of k, released before the fence: %q", got)
	}
}

// TestHandOffHoldsUntilNewLeader: while a hand-off leaves the shard
// without a leader for a moment, what was batched and what comes
// meanwhile is held, and answered MOVED once the new leader is known,
// not ERR unavailable.
func TestHandOffHoldsUntilNewLeader(t *testing.T) {
	s := testShard(t)
	s.node.cfg.Peers = append(s.node.cfg.Peers, Peer{RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"})
	cs := newConn()
	request(t, s, cs, "A k 10000 0")
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted})
	if got := answers(cs); len(got) != 1 || got[0] != "A k OK 1025" {
		t.Fatalf("acquire: %q", got)
	}
	s.mu.Lock()
	s.handingOff = true
	s.mu.Unlock()
	request(t, s, cs, "R k 1025")
	s.leaderUpdated(0)
	request(t, s, cs, "K k 1025 1000")
	request(t, s, cs, "A j 10000 0")
	request(t, s, cs, "Q k")
	if got := answers(cs); len(got) != 0 {
		t.Fatalf("answered while the hand-off had no leader yet: %q", got)
	}
	if batch, _ := s.takeReads(); len(batch) != 0 {
		t.Fatalf("the reader took %d reads before the new leader was known", len(batch))
	}
	s.leaderUpdated(2)
	got := answers(cs)
	if len(got) != 3 {
		t.Fatalf("once the new leader is known: %q, want R, K and A answered MOVED", got)
	}
	for _, g := range got {
		if !strings.Contains(g, " MOVED 127.0.0.1:4") {
			t.Fatalf("once the new leader is known: %q, want each answered MOVED 127.0.0.1:4", got)
		}
	}
	if batch, serving := s.takeReads(); len(batch) != 1 || serving {
		t.Fatalf("the reader takes %d reads (serving %v) once the new leader is known, want the Q", len(batch), serving)
	}
}
