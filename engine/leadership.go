package engine

import (
	"time"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// Leadership: following Raft's view of who leads the shard, serving once
// this node's fence applied and until another node's does, and handing
// everything over when it stops.

// awaitingFence reports whether Raft says this node leads the shard, and
// it is to serve as soon as its fence applies (a new leader, at start or
// after an election or a hand-off), for at most fenceWait. Requests that
// come meanwhile are taken as if it served: acquires queue (a try too: the
// view may lack the last commits, so its TIMEOUT waits for the fence,
// endTries), releases and extends are batched, and queries wait in the
// read queue; none is proposed or answered from the view before the fence
// applied (takeProposal, takeReads, grantHead look at serving). So a
// client sent here by MOVED is served once the fence commits, not answered
// ERR unavailable; and if the leadership goes before that, they are
// answered MOVED or ERR unavailable as every waiting request is
// (stopServing, dropPending).
func (s *shard) awaitingFence() bool {
	return !s.serving && s.fenceWaitUntil != 0 && s.leaderID == s.node.cfg.ID && !s.stopping && !s.handingOff && !s.node.draining.Load()
}

// awaitingNewLeader reports whether this node handed the shard over and
// Raft names no leader for the moment, the transfer under way: what comes
// meanwhile is held (as awaitingFence holds it) and answered MOVED once
// the new leader is known (stopServing), a few milliseconds later, rather
// than ERR unavailable, which costs a client its backoff, or a release
// its 200 ms retry interval (CLIENTS.md), at every graceful hand-off. If
// this node is named leader again instead, its fence is awaited and what
// was held is served after it.
func (s *shard) awaitingNewLeader() bool {
	return !s.serving && s.handingOff && s.leaderID == 0 && !s.stopping
}

// holding reports whether requests that this node does not serve now are
// held for a moment rather than answered at once: awaitingFence or
// awaitingNewLeader.
func (s *shard) holding() bool {
	return s.awaitingFence() || s.awaitingNewLeader()
}

// fenceWait bounds how long requests are held for a new leader's fence: an
// election timeout. A fence that has not applied by then is held up by
// more than a commit (a transfer of the leadership under way, during which
// dragonboat drops proposals; a leader cut off from its peers), and a
// client is better told at once, as it was before the wait (CI saw a query
// held 2.1 s on a node whose fence could not commit while the leadership
// moved on).
func (s *shard) fenceWait() int64 {
	return int64(time.Duration(electionTicks) * s.node.cfg.RTT)
}

// awaitFence asks for a fence of this node's, which Raft names leader, and
// holds the requests that come for it (awaitingFence) from now on, for
// fenceWait.
func (s *shard) awaitFence() {
	s.needFence = true
	s.fenceWaitUntil = monoNow() + s.fenceWait()
	s.timerMayBeEarlier(s.fenceWaitUntil)
	s.kickIfPending()
}

// fenceWaitRanOut answers what was held for the fence once fenceWait has
// passed without it, as a node that does not serve answers: releases and
// extends batched for it, queries and watches, and tries. Acquires that
// wait keep waiting within their own wait, as those parked while nobody
// leads do: served once the fence applies, MOVED if another node leads
// first.
func (s *shard) fenceWaitRanOut() {
	s.fenceWaitUntil = 0
	if s.serving {
		return
	}
	if s.node.tracing {
		s.trace("fence not applied in time: not holding requests for it", "leader", s.leaderID)
	}
	s.dropPending()
	s.kickReads()
	for _, ks := range s.keys {
		s.endTries(ks, errNotServing)
		s.forgetIfIdle(ks)
	}
}

// endTries answers the tries (wait -1) still queued in ks, which wait
// there only until what decides them (triesQueued): a node awaiting its
// fence queues them rather than decide from a view that may lack the last
// commits, and a try whose owner's Grant is in flight waits for it
// (ownerGranting; those are left until it applied). TIMEOUT when err is
// nil (a serving node, once the Grants of those that fit, and of owners'
// retries, were proposed), else as a deferred err answers
// (deferredAnswer). An answer waits behind an earlier acquire of the key
// on the same connection, as every answer to one (op, key) does.
func (s *shard) endTries(ks *keyState, err error) {
	if !ks.triesQueued {
		return
	}
	ks.triesQueued = false
	var tries []*waiter
	for w := ks.head; w != nil; w = w.next {
		if w.tryLock && w.state == waitQueued {
			tries = append(tries, w)
		}
	}
	for _, w := range tries {
		if !w.inQueue || w.state != waitQueued {
			continue
		}
		switch {
		case err == nil && s.ownerGranting(ks, bytesOf(w.owner), w.permits):
			ks.triesQueued = true
		case s.hasEarlierLive(w):
			w.state, w.deferred = waitDeferred, deferredAnswer{err: err}
			ks.deferred++
		case err == nil:
			s.send(w.cs, w.op(), bytesOf(ks.key), codec.StatusTimeout)
			s.finish(w)
		default:
			s.answerNotServing(w.cs, w.op(), bytesOf(ks.key))
			s.finish(w)
		}
	}
}

// leaderUpdated follows Raft's view of who leads the shard.
func (s *shard) leaderUpdated(leaderID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaderID = leaderID
	s.kickReads() // reads held for a fence are answered if it will not come
	if leaderID == s.node.cfg.ID {
		if !s.serving && !s.stopping {
			// Serve only once our fence has applied: by then every earlier
			// committed entry is in our view, and from it on no other
			// node's batch takes effect (statemachine: The fence).
			s.awaitFence()
		}
		return
	}
	s.fenceWaitUntil = 0
	if leaderID == 0 && !s.stopping {
		// Nobody leads for a moment (an election, a transfer): stop
		// serving, but keep the waiters parked. They are answered MOVED
		// once the new leader is known, or served again if it is us. So
		// are the commands batched during a hand-off (awaitingNewLeader).
		s.serving = false
		if !s.handingOff {
			s.dropPending()
			// Cut off, or the leader it was is gone: ERR unavailable. A
			// hand-off ends them with MOVED once the new leader is known
			// (stopServing).
			s.endWatches()
		}
		return
	}
	s.stopServing()
}

// startServing runs when this node's fence applies.
func (s *shard) startServing(now int64) {
	if s.serving || s.stopping || s.leaderID != s.node.cfg.ID {
		return
	}
	s.serving = true
	if s.node.tracing {
		s.trace("serving", "held", s.table.Len(), "busy", len(s.keys))
	}
	// Holders could not extend while no leader existed, so the new leader
	// does not charge them for that time: every lease starts afresh.
	// Waiters parked while nobody led are served again.
	s.table.Each(func(slot uint32) { s.setDeadline(slot, s.table.LeaseMs(slot), now) })
	s.fenceWaitUntil = 0
	for _, ks := range s.keys {
		s.regrantParked(ks)
		s.grantHead(ks)
		s.endTries(ks, nil)
		s.forgetIfIdle(ks)
	}
	s.kickIfPending()
	s.kickReads()
}

// lostFence stops serving once another node's fence applied after ours, or
// a batch of ours came back Fenced: our batches change nothing any more.
// Waiters and watches stay parked, as while nobody leads (a watch's lines
// come from the entries this node applies, whoever proposed them, so it
// misses nothing meanwhile); if Raft still says we lead (a
// fence proposed by a node that had just lost its leadership can come
// after ours), a new fence claims the table back and serving resumes.
func (s *shard) lostFence() {
	s.serving = false
	s.dropPending()
	if s.leaderID == s.node.cfg.ID && !s.stopping {
		s.awaitFence()
	}
	if s.node.tracing {
		s.trace("fence lost: not serving", "leader", s.leaderID)
	}
}

// stopServing answers every waiter and every command not yet proposed,
// and ends every watch: MOVED to the new leader, or ERR unavailable.
func (s *shard) stopServing() {
	s.serving = false
	s.dropPending()
	s.endWatches()
	var queue []*waiter
	for _, ks := range s.keys {
		// A snapshot of the queue: answering a waiter releases the answers
		// deferred behind it, which leave the queue under the loop.
		queue = queue[:0]
		for w := ks.head; w != nil; w = w.next {
			queue = append(queue, w)
		}
		for _, w := range queue {
			if !w.inQueue {
				continue
			}
			// Waiters ahead of w were answered already, so an earlier live
			// acquire of its connection is one whose Grant is in flight:
			// w's answer must not overtake that one's, which comes when
			// the Grant applies or is dropped (then finish sends w's).
			earlier := s.hasEarlierLive(w)
			switch {
			case w.state == waitQueued && earlier:
				w.state, w.deferred = waitDeferred, deferredAnswer{err: errNotServing}
				ks.deferred++
				s.waits.clear(w)
			case w.state == waitQueued:
				s.answerNotServing(w.cs, w.op(), bytesOf(ks.key))
				s.finish(w)
			case w.state == waitDeferred && !earlier:
				s.sendDeferred(w)
				ks.unlink(w)
				w.state = waitDone
				w.cs.removeWaiter(w)
			}
		}
		s.forgetIfIdle(ks)
	}
}

// dropPending answers the requesters of commands that were batched but not
// proposed; a waiter whose Grant was among them goes back to the queue.
func (s *shard) dropPending() {
	for i := range s.origins {
		o := &s.origins[i]
		s.settle(o)
		switch o.kind {
		case originClient:
			s.answerNotServing(o.cs, o.op, bytesOf(o.ks.key))
			s.answeredClient(o)
		case originGrant:
			o.ks.grantSettled(o.w)
			o.w.state = waitQueued
			o.ks.triesQueued = o.ks.triesQueued || o.w.tryLock
		case originInternal:
			if o.shared {
				o.ks.notExpiring(o.token)
			} else {
				o.ks.expiring = false
			}
		}
	}
	s.pending.Reset()
	s.origins = s.origins[:0]
	for _, ks := range s.keys {
		s.forgetIfIdle(ks)
	}
}

// reset replaces the committed view of the shard with the table t as
// loaded (a snapshot recovery, or the start). The state machine calls it
// (Node.Reset) with s.mu held, as it swapped the table. Everything else
// keeps pointing at the keyStates it knows: proposals in flight, batched
// origins, waiters and their timers. So the keyStates are updated in place
// rather than replaced, each finding its holder in the new table (a key it
// does not hold just becomes free); the lease deadlines, which were by the
// old table's slots, start afresh for every lock of the new one.
func (s *shard) reset(t sm.Table) {
	now := monoNow()
	s.table = t
	s.leases.reset(t.Slots())
	for _, ks := range s.keys {
		s.refreshSlot(ks)
		ks.noneExpiring()
	}
	t.Each(func(slot uint32) { s.setDeadline(slot, t.LeaseMs(slot), now) })
	held := t.Len()
	s.stats.held.Store(int64(held))
	s.stats.clusterVersion.Store(t.ClusterVersion())
	// Once per shard at start, and once per snapshot recovery: rare.
	s.node.log.Info("shard table loaded", "shard", s.id, "locks", held)
	for _, ks := range s.keys {
		s.grantHead(ks)
		s.forgetIfIdle(ks)
	}
	s.kickIfPending()
}
