package engine

import (
	"testing"

	sm "github.com/baton-dev/baton/statemachine"
)

// TestHandOffAsked: a hand-off request that applies makes the serving
// leader go quiet and queue the hand-off for runHandOffs, only for a node
// of higher priority than itself and once; anywhere else it changes
// nothing. Its proposer is a replica id, so it is matched to no proposal,
// even one of a proposer with that number.
func TestHandOffAsked(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(s *shard)
		from    uint64
		queued  bool
		handing bool // s.handingOff after
	}{
		{"a node of higher priority", nil, 1, true, true},
		{"a node of lower priority", nil, 3, false, false},
		{"this node", nil, 2, false, false},
		{"not serving", func(s *shard) { s.serving = false }, 1, false, false},
		{"another node leads", func(s *shard) { s.leaderID, s.serving = 3, false }, 1, false, false},
		{"handing off already", func(s *shard) { s.handingOff = true }, 1, false, true},
		{"leaving", func(s *shard) { s.node.draining.Store(true) }, 1, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testShard(t)
			n := s.node
			n.cfg.ID = 2
			n.cfg.Peers = append(n.cfg.Peers, Peer{RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"}, Peer{RaftAddr: "127.0.0.1:5", ClientAddr: "127.0.0.1:6"})
			n.proposerID = tc.from
			n.handOffs = make(chan handOffRequest, 1)
			s.leaderID = 2
			if tc.setup != nil {
				tc.setup(s)
			}
			s.mu.Lock()
			s.seq++
			p := &proposal{seq: s.seq}
			s.inflight = append(s.inflight, p)
			s.applied(sm.Header{Proposer: tc.from, Seq: p.seq, HandOff: true}, nil, nil)
			handing, inflight := s.handingOff, len(s.inflight)
			s.mu.Unlock()
			if inflight != 1 {
				t.Fatal("the hand-off request was matched to a proposal")
			}
			if handing != tc.handing {
				t.Fatalf("handingOff = %v, want %v", handing, tc.handing)
			}
			select {
			case r := <-n.handOffs:
				if !tc.queued {
					t.Fatalf("queued a hand-off to %d", r.to)
				}
				if r.s != s || r.to != tc.from {
					t.Fatalf("queued a hand-off of shard %d to %d, want shard %d to %d", r.s.id, r.to, s.id, tc.from)
				}
			default:
				if tc.queued {
					t.Fatal("no hand-off queued")
				}
			}
		})
	}
}
