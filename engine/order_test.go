package engine

import (
	"strings"
	"testing"

	sm "github.com/baton-dev/baton/statemachine"
)

// An R or K answered at once must not overtake an earlier R or K of the same
// key on the same connection whose command is still in flight; answers to
// other ops or other connections are not held back.
func TestImmediateAnswerTrailsEarlierInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause func(s *shard)
		want  string // prefix of the trailing answer
	}{
		{"not serving", func(s *shard) { s.leaderUpdated(0) }, "R k ERR unavailable"},
		{"batch full", func(s *shard) { s.maxPending = 0 }, "R k ERR overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testShard(t)
			cs, other := newConn(), newConn()
			releaseInFlight(t, s, cs) // R k 1025 batched
			p, cmds := take(t, s)
			tc.cause(s)
			request(t, s, cs, "R k 1025")    // same (op, key, conn): trails
			request(t, s, other, "R k 1025") // another connection: at once
			request(t, s, cs, "K k 1025 10") // another op: at once
			if got := answers(other); len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Fatalf("other connection: %q, want %s...", got, tc.want)
			}
			if got := answers(cs); len(got) != 1 || !strings.HasPrefix(got[0], "K k ERR") {
				t.Fatalf("before the first R applied: %q, want only the K's answer", got)
			}
			apply(s, p, cmds, sm.Result{Code: sm.Released})
			got := answers(cs)
			if len(got) != 2 || got[0] != "R k OK" || !strings.HasPrefix(got[1], tc.want) {
				t.Fatalf("answers %q, want R k OK then %s...", got, tc.want)
			}
		})
	}
}

// The held-back answer goes out with the earlier one however that one ends:
// dropped by Raft, or timed out.
func TestTrailingAnswerFollowsEveryEnd(t *testing.T) {
	for _, end := range []string{"dropped", "timed out"} {
		t.Run(end, func(t *testing.T) {
			s := testShard(t)
			cs := newConn()
			releaseInFlight(t, s, cs)
			p, _ := take(t, s)
			s.leaderUpdated(0)
			request(t, s, cs, "R k 1025")
			if got := answers(cs); got != nil {
				t.Fatalf("answered ahead of the R in flight: %q", got)
			}
			switch end {
			case "dropped":
				dropReported(t, s, p)
			case "timed out":
				s.mu.Lock()
				s.proposalTimedOut(p)
				s.mu.Unlock()
			}
			if got := answers(cs); len(got) != 2 || !strings.HasPrefix(got[0], "R k ERR") || !strings.HasPrefix(got[1], "R k ERR") {
				t.Fatalf("answers %q, want two", got)
			}
			if len(s.trailing) != 0 {
				t.Fatalf("%d trailing answers left", len(s.trailing))
			}
		})
	}
}

// A Q that arrives while the node does not serve waits behind an earlier Q
// of the connection whose ReadIndex is under way (reads.go), and both are
// answered in order.
func TestNotServingQueryWaitsForEarlierRead(t *testing.T) {
	s := testShard(t)
	s.node.cfg.Peers = append(s.node.cfg.Peers, Peer{RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"})
	cs := newConn()
	request(t, s, cs, "Q k")
	batch, serving := s.takeReads() // the reader asks for a ReadIndex for it
	if len(batch) != 1 || !serving {
		t.Fatalf("read batch %d, serving %v", len(batch), serving)
	}
	s.leaderUpdated(0)
	request(t, s, cs, "Q k")
	if got := answers(cs); got != nil {
		t.Fatalf("answered ahead of the Q under way: %q", got)
	}
	s.answerReads(batch, false) // the ReadIndex failed: leadership moved
	next, serving := s.takeReads()
	if len(next) != 1 || serving {
		t.Fatalf("second batch %d, serving %v", len(next), serving)
	}
	s.answerReads(next, false)
	if got := answers(cs); len(got) != 2 || !strings.HasPrefix(got[0], "Q k ERR unavailable") || !strings.HasPrefix(got[1], "Q k ERR unavailable") {
		t.Fatalf("answers %q", got)
	}
}

// In a cluster, an R or K of a key the leader knows nothing of is not
// answered NOTHELD from the view (which a paused, deposed leader would
// answer from): it goes through Raft. A single node answers at once.
func TestUnknownKeyReleaseGoesThroughRaftInCluster(t *testing.T) {
	for _, clustered := range []bool{false, true} {
		s := testShard(t)
		if clustered {
			s.node.cfg.Peers = append(s.node.cfg.Peers, Peer{RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"})
		}
		cs := newConn()
		request(t, s, cs, "R nobody 1025")
		if !clustered {
			if got := answers(cs); len(got) != 1 || got[0] != "R nobody NOTHELD" {
				t.Fatalf("single node: %q, want NOTHELD at once", got)
			}
			continue
		}
		if got := answers(cs); got != nil {
			t.Fatalf("cluster: answered %q from the view", got)
		}
		p, cmds := take(t, s)
		if len(cmds) != 1 || cmds[0].Op != sm.OpRelease {
			t.Fatalf("cluster: proposed %+v, want the Release", cmds)
		}
		apply(s, p, cmds, sm.Result{Code: sm.NotHeld})
		if got := answers(cs); len(got) != 1 || got[0] != "R nobody NOTHELD" {
			t.Fatalf("cluster: %q after the Release applied", got)
		}
		if len(s.keys) != 0 {
			t.Fatalf("cluster: %d keys kept after the answer", len(s.keys))
		}
	}
}
