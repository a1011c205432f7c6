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

// grantHead proposes the Grants of the waiters at the head of the key's
// queue that the key has room for now.
func (s *shard) grantHead(ks *keyState) {
	if s.serving {
		s.grantFitting(ks, 0)
	}
}

// handOff puts the Grants of the waiters at the head of the queue in the
// same batch as a command that may free freeing of the key's holders (1:
// one grant, which for an exclusive holder is all of them; freeAll), so
// that a hand-off costs one commit, however many shared waiters the freed
// room lets in. If the key turns out not to be freed, the Grants are
// rejected and the waiters keep their places.
func (s *shard) handOff(ks *keyState, freeing int32) {
	s.grantFitting(ks, freeing)
}

// grantFitting proposes a Grant for each waiter at the head of the queue,
// in order, that fits once freeing of the key's holders are gone: an
// exclusive acquire when nothing would hold the key, shared ones while
// fewer than their permits would. It stops at the first that does not
// fit, which nobody overtakes (FIFO).
func (s *shard) grantFitting(ks *keyState, freeing int32) {
	if ks.granting != nil {
		return // an exclusive Grant in flight: nothing else fits before it applies
	}
	holders, exclusive := s.holdersOf(ks)
	if holders -= freeing; holders <= 0 {
		holders, exclusive = 0, false
	}
	for w := ks.head; w != nil; w = w.next {
		if w.state != waitQueued {
			continue
		}
		if w.permits == 0 {
			if holders == 0 && ks.sharedGranting == 0 {
				s.proposeGrant(ks, w)
			}
			return
		}
		if exclusive || holders+ks.sharedGranting >= plantedPermits(int32(w.permits)) { // the chaos run's planted bug; a no-op without -tags chaosmutation
			return
		}
		s.proposeGrant(ks, w)
	}
}

func (s *shard) proposeGrant(ks *keyState, w *waiter) {
	w.state = waitGranting
	if w.permits != 0 {
		w.grantingShared = true
		ks.sharedGranting++
	} else {
		ks.granting = w
	}
	s.propose(sm.Command{Op: sm.OpGrant, Key: bytesOf(ks.key), LeaseMs: w.leaseMs, Owner: bytesOf(w.owner), Permits: w.permits}, origin{kind: originGrant, ks: ks, w: w})
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
