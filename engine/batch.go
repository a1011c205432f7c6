package engine

import sm "github.com/baton-dev/baton/statemachine"

// Building the batch the proposer proposes as one Raft entry, and waking
// the proposer.

// propose appends one command to the batch being built.
func (s *shard) propose(c sm.Command, o origin) {
	s.pending.Append(c)
	s.origins = append(s.origins, o)
	o.ks.inflight++
}

// grantHead proposes a Grant for the next waiter if the key is free and no
// Grant is in flight.
func (s *shard) grantHead(ks *keyState) {
	if s.serving && s.holderToken(ks) == 0 {
		s.handOff(ks)
	}
}

// handOff puts the next waiter's Grant in the same batch as a command that
// may free the key, so that a hand-off costs one commit. If the key turns
// out not to be freed, the Grant is rejected and the waiter keeps its place.
func (s *shard) handOff(ks *keyState) {
	if ks.granting != nil {
		return
	}
	if w := ks.firstQueued(); w != nil {
		s.proposeGrant(ks, w)
	}
}

func (s *shard) proposeGrant(ks *keyState, w *waiter) {
	w.state = waitGranting
	ks.granting = w
	s.propose(sm.Command{Op: sm.OpGrant, Key: bytesOf(ks.key), LeaseMs: w.leaseMs, Owner: bytesOf(w.owner)}, origin{kind: originGrant, ks: ks, w: w})
}

// takeProposal seals what is pending into a proposal and records it as in
// flight; nil when there is nothing to propose.
//
// Only a node that Raft says leads proposes a fence, and only a serving one
// that is not handing the shard over proposes commands. dragonboat forwards
// what a follower proposes to the leader, so a fence proposed by a follower
// would take the table from the leader (until it claims it back), and
// commands would be fenced for nothing.
func (s *shard) takeProposal() *proposal {
	var p *proposal
	switch {
	case s.needFence && s.leaderID == s.node.cfg.ID:
		s.needFence = false
		var empty sm.Batch
		s.seq++
		p = &proposal{seq: s.seq, fence: true, data: empty.Seal(sm.Header{Proposer: s.node.proposerID, Seq: s.seq, Fence: true})}
	case s.serving && !s.handingOff && s.pending.Len() > 0:
		s.seq++
		p = &proposal{seq: s.seq, origins: s.origins, data: s.pending.Seal(sm.Header{Proposer: s.node.proposerID, Seq: s.seq})}
		// dragonboat keeps the entry's bytes, so the next batch gets
		// fresh memory instead of reusing this one, sized like this one
		// (the load changes slowly): growing by doubling allocated about
		// twice the batch's size, a fifth of the leader's allocation
		// under a deep pipeline.
		s.pending = sm.Batch{}
		s.pending.Grow(len(p.data))
		s.origins = make([]origin, 0, len(p.origins))
	default:
		return nil
	}
	s.inflight = append(s.inflight, p)
	s.inflightCmds += len(p.origins)
	return p
}

func (s *shard) kickIfPending() {
	if s.pending.Len() > 0 || s.needFence {
		s.kickProposer()
	}
}

func (s *shard) kickProposer() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
