package engine

import (
	"time"

	"github.com/baton-dev/baton/codec"
)

// Proposals that did not apply: dropped by Raft, or timed out.

// dropRetry is the soonest an Expire, or the release of an abandoned grant,
// is tried again after Raft dropped it (as it does during a leadership
// transfer), so that a shard that keeps dropping does not spin.
const dropRetry = 50 * time.Millisecond

// resolveDropped handles a proposal that is known never to apply. Its
// requesters are answered (a waiter loses its place: Raft drops proposals
// while leadership moves, and the client retries where MOVED sends it);
// internal commands are retried by the lease timer, expiring the grant
// they were for: after dropRetry at the soonest, and never before the end
// of the lease as it stands now. The lease may have been renewed since the
// command was proposed (an Extend, or a new leader starting every lease
// afresh), and ending it early would take the lock from a holder that was
// told it has it. (A dropped release of an abandoned grant so waits for
// the lease: its owner's retry may have been given the grant back since.)
func (s *shard) resolveDropped(p *proposal) {
	now := monoNow()
	for i := range p.origins {
		o := &p.origins[i]
		ks := o.ks
		s.settle(o)
		switch o.kind {
		case originInternal:
			if o.shared {
				ks.notExpiring(o.token)
			} else {
				ks.expiring = false
			}
			slot, held := s.grantSlot(ks, o.token)
			if held {
				s.leases.setDeadline(slot, max(s.leases.deadlineOf(slot), now+int64(dropRetry)))
				s.armLease(slot)
			}
			if s.node.tracing {
				s.trace("internal command dropped", "key", ks.key, "token", o.token, "holds", held)
			}
		case originClient:
			if !p.failed {
				s.answerNotServing(o.cs, o.op, bytesOf(ks.key))
				s.answeredClient(o)
			}
		case originGrant:
			ks.grantSettled(o.w)
			if !p.failed && !o.w.abandoned {
				s.answerNotServing(o.w.cs, o.w.op(), bytesOf(ks.key))
			}
			s.finish(o.w)
		}
		s.grantHead(ks)
		s.forgetIfIdle(ks)
	}
}

// failProposal answers the requesters of a proposal whose outcome is not
// known (its wait timed out): they get ERR unavailable and, should the entry
// still apply later, its grants are released at once.
func (s *shard) failProposal(p *proposal, code, text string) {
	if p.failed {
		return
	}
	p.failed = true
	for i := range p.origins {
		o := &p.origins[i]
		switch o.kind {
		case originClient:
			s.sendError(o.cs, o.op, bytesOf(o.ks.key), code, text)
			s.answeredClient(o)
		case originGrant:
			if !o.w.abandoned { // an abandoned waiter was answered already, or is gone
				s.sendError(o.w.cs, o.w.op(), bytesOf(o.ks.key), code, text)
			}
			o.w.abandoned = true
			// Answers deferred behind it on its connection go out now, in
			// order; the waiter stays the key's granting one until the
			// outcome is known.
			s.finish(o.w)
		}
	}
}

// removeInflight drops p from the in-flight list; false if it is not there.
func (s *shard) removeInflight(p *proposal) bool {
	if p.settled {
		return false
	}
	for i, q := range s.inflight {
		if q == p {
			copy(s.inflight[i:], s.inflight[i+1:])
			s.inflight[len(s.inflight)-1] = nil
			s.inflight = s.inflight[:len(s.inflight)-1]
			s.inflightCmds -= len(p.origins)
			p.settled = true
			return true
		}
	}
	return false
}

// proposalTimedOut handles a proposal dragonboat gave up waiting for. It may
// still commit: its requesters are answered now, unless match or a drop
// answered them already (a leader paused past the timeout learns of the new
// term first), and a fence is proposed whose applying settles whether
// this one did (see match).
func (s *shard) proposalTimedOut(p *proposal) {
	if p.settled {
		return
	}
	s.failProposal(p, codec.CodeUnavailable, "not committed in time, retry")
	s.needFence = true
	s.kickIfPending()
}

// proposalDropped handles a proposal dragonboat reports dropped, rejected,
// aborted or terminated: it will not apply.
func (s *shard) proposalDropped(p *proposal) {
	if s.removeInflight(p) {
		s.resolveDropped(p)
	}
}
