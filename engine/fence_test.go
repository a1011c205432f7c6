package engine

import (
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

func TestForeignFenceEndsServingAndLeaderClaimsBack(t *testing.T) {
	s := testShard(t)
	foreignFence(s)
	if isServing(s) {
		t.Fatal("still serving after another node's fence applied")
	}
	cs := newConn()
	request(t, s, cs, "A k 10000 0")
	if got := answers(cs); len(got) != 1 || got[0] != "A k ERR unavailable leadership is changing or unknown, retry" {
		t.Fatalf("acquire while the fence is another's: %q", got)
	}
	// Raft still says this node leads (the fence came from a node that had
	// just lost its leadership): a fence of its own claims the table back.
	p, cmds := take(t, s)
	if !p.fence || len(cmds) != 0 {
		t.Fatalf("proposed %+v (fence %v), want a fence", cmds, p.fence)
	}
	apply(s, p, nil)
	if !isServing(s) {
		t.Fatal("not serving after its own fence applied")
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
	s.mu.Lock()
	pending := s.pending.Len()
	s.mu.Unlock()
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
