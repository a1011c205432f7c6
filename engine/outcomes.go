package engine

import (
	"errors"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// Outcomes: what an applied entry changes in the shard's view, on every
// replica, and the answers on the node that proposed it.

// applied processes one applied entry in log order. The state machine
// calls it (Node.Applied) with s.mu held, as it changed the table. The
// answers the entry produces are written when it is done, one write per
// connection, by this goroutine (heldAnswers).
func (s *shard) applied(h sm.Header, cmds []sm.Command, results []sm.Result) {
	s.applying = true
	s.applyEntry(h, cmds, results)
	s.applying = false
	s.held.write()
}

func (s *shard) applyEntry(h sm.Header, cmds []sm.Command, results []sm.Result) {
	now := monoNow()
	s.countLogged(h.Size)
	if h.HandOff {
		// Its Proposer is a replica id, not a proposer's: matched to no
		// proposal.
		s.handOffAsked(h.Proposer)
		return
	}
	if h.Report || h.Raise {
		// Replica ids too, and no commands.
		s.levelApplied(h)
		return
	}
	if h.Directory {
		// A membership write (membership.go): its proposer waits for its
		// outcome through Raft, not through a batch's requests.
		if s.id == 1 {
			s.node.loadDirectory(s.table)
		}
		return
	}
	var p *proposal
	if h.Proposer == s.node.proposerID {
		p = s.match(h.Seq)
	}
	switch {
	case p != nil && p.fence:
		s.startServing(now)
	case h.Fence && h.Proposer != s.node.proposerID && s.serving:
		// Another node claimed the table: from here on no batch of ours
		// takes effect.
		s.lostFence()
	case len(results) > 0 && results[0].Code == sm.Fenced:
		// A batch of a node that did not hold the fence: it changed
		// nothing. If it is ours, its requesters are answered as if Raft
		// had dropped it, and we do not hold the fence any more.
		if p != nil {
			if s.node.tracing {
				s.trace("batch fenced", "commands", len(cmds), "serving", s.serving)
			}
			if s.serving {
				s.lostFence()
			}
			s.resolveDropped(p)
		}
		s.kickIfPending()
		return
	}
	s.node.metrics.countApplied(&s.stats, cmds, results)
	for i := range cmds {
		var o *origin
		if p != nil && i < len(p.origins) {
			o = &p.origins[i]
		}
		s.applyOne(i, &cmds[i], results[i], o, p != nil && p.failed, now)
	}
	s.stats.held.Store(int64(s.table.Len()))
	if len(s.watchDirty) > 0 {
		s.sendWatched(now)
	}
	s.kickIfPending()
}

// match finds the in-flight proposal with seq. Proposals of this node apply
// in the order they were proposed, so any older one still in flight will
// never apply: it is resolved as dropped.
func (s *shard) match(seq uint64) *proposal {
	for len(s.inflight) > 0 && s.inflight[0].seq < seq {
		s.resolveDropped(s.popInflight())
	}
	if len(s.inflight) > 0 && s.inflight[0].seq == seq {
		return s.popInflight()
	}
	return nil
}

// popInflight takes the oldest proposal off the in-flight list.
func (s *shard) popInflight() *proposal {
	p := s.inflight[0]
	s.inflight[0] = nil
	s.inflight = s.inflight[1:]
	s.inflightCmds -= len(p.origins)
	p.settled = true
	return p
}

// applyOne processes command i of the entry, c, whose outcome is res.
func (s *shard) applyOne(i int, c *sm.Command, res sm.Result, o *origin, failed bool, now int64) {
	var ks *keyState
	if o != nil {
		ks = o.ks
		s.settle(o)
	} else {
		ks = s.keys[string(c.Key)]
	}
	// The committed view, kept on every replica: the holders are the
	// table's, their lease deadlines the shard's. An exclusive grant's
	// result says what the key's row is now; one about shared grants
	// needs a look at the table (shared.go).
	switch res.Code {
	case sm.Granted:
		if ks != nil {
			if c.Permits != 0 {
				s.refreshSlot(ks)
			} else {
				ks.slot, ks.expiring, ks.shared = int32(res.Slot), false, false
			}
		}
		s.setDeadline(res.Slot, c.LeaseMs, now)
		s.watchChanged(c, res)
	case sm.Released, sm.Expired:
		if ks != nil {
			if ks.shared || res.Token == 0 || int32(res.Slot) != ks.slot {
				s.refreshSlot(ks)
				if res.Token == 0 {
					ks.noneExpiring()
				} else {
					ks.notExpiring(res.Token)
				}
			} else {
				ks.slot, ks.expiring = noSlot, false
			}
		}
		s.leases.clear(res.Slot)
		if res.Token == 0 {
			// A Release of every shared holder: Slot is the key's header.
			for _, g := range s.table.Freed(i) {
				s.leases.clear(g)
			}
		}
		s.watchChanged(c, res)
	case sm.Extended:
		s.setDeadline(res.Slot, c.LeaseMs, now)
	}
	if ks == nil {
		return
	}
	if o != nil {
		s.answer(o, c, res, failed, now)
	}
	s.grantHead(ks)
	if s.serving {
		s.endTries(ks, nil)
	}
	s.forgetIfIdle(ks)
}

// settle ends the bookkeeping of one of this node's commands for its key:
// it applied, will never apply, or was never proposed.
func (s *shard) settle(o *origin) {
	ks := o.ks
	ks.inflight--
	if !o.extends {
		return
	}
	if o.shared {
		op := ks.opOf(o.token)
		op.extending--
		ks.setOp(o.token, op)
		if slot, held := s.grantSlot(ks, o.token); op.extending == 0 && s.serving && held && !op.expiring && !s.leases.armed(slot) {
			s.armLease(slot)
		}
		return
	}
	ks.extending--
	if ks.extending == 0 && s.serving && s.holderToken(ks) != 0 && !ks.expiring && !s.leases.armed(uint32(ks.slot)) {
		// A lease that ran out under the Extend is looked at again (an
		// Extend that applied sets a fresh deadline right after).
		s.armLease(uint32(ks.slot))
	}
}

// answer tells the requester of one of this node's commands its outcome.
func (s *shard) answer(o *origin, c *sm.Command, res sm.Result, failed bool, now int64) {
	ks := o.ks
	switch o.kind {
	case originInternal:
		if c.Op == sm.OpExpire && res.Code != sm.Expired {
			s.expireFailed(o)
		}
		if s.node.tracing {
			s.trace("internal command applied", "op", c.Op, "key", ks.key, "token", c.Token, "result", res.Code, "failed", failed)
		}
	case originClient:
		if failed {
			return
		}
		if res.Code == sm.NotEnabled {
			// Never proposed so (an S is refused below the version that
			// enables it), but never answered NOTHELD for it either.
			s.sendError(o.cs, o.op, c.Key, codec.CodeUnavailable, sharedNeedsVersion(s.table.ClusterVersion()))
			s.answeredClient(o)
			return
		}
		st := codec.StatusNotHeld
		if res.Code == sm.Released || res.Code == sm.Extended {
			st = codec.StatusOK
		}
		s.send(o.cs, o.op, c.Key, st)
		s.answeredClient(o)
	case originGrant:
		w := o.w
		if w.state == waitRegranting {
			s.regranted(w, res, failed, now)
			return
		}
		ks.grantSettled(w)
		switch {
		case res.Code == sm.Granted, res.Code == sm.Regranted:
			s.granted(w, res.Token, res.Code == sm.Granted, failed, now)
		case w.abandoned || failed:
			s.handPlace(w)
			s.finish(w)
		case s.refuseGrant(w, res):
		case w.tryLock:
			s.send(w.cs, w.op(), c.Key, codec.StatusTimeout)
			s.finish(w)
		default:
			w.state = waitQueued // keeps its place; the key was not free after all
		}
	}
}

// granted answers the acquire a grant landed for, and every other waiting
// acquire of its owner. A new grant (fresh: not the owner's own grant found
// again) that nobody waits for any more is given back at once, unless
// another acquire of its owner has a Grant in flight, which will be
// Regranted it (ownerGranting).
func (s *shard) granted(w *waiter, token uint64, fresh, failed bool, now int64) {
	ks := w.ks
	live := !failed && !w.abandoned && !w.cs.peerGone(now)
	if live {
		s.sendGrant(w, token, fresh) // provisional after the client's FIN (halfclose.go)
		s.node.metrics.acquireGranted(w.received, now)
	}
	s.finish(w)
	// Only the serving leader gives it back: a node that does not serve may
	// be deposed, and the new leader may have given this very grant to a
	// retry of its owner since (the release would be fenced then, but the
	// lease frees the key anyway).
	if !s.grantSameOwner(ks, w, token) && !live && fresh && s.serving && !s.ownerGranting(ks, bytesOf(w.owner), w.permits) {
		if s.node.tracing {
			s.trace("grant for nobody: released", "key", ks.key, "token", token, "failed", failed, "abandoned", w.abandoned)
		}
		s.giveBack(ks, token)
	}
}

// giveBack proposes the release of the grant of ks with token, which
// nobody holds for (its client is gone, or stopped waiting), with the
// next waiters' Grants in the same batch.
func (s *shard) giveBack(ks *keyState, token uint64) {
	s.propose(sm.Command{Op: sm.OpRelease, Key: bytesOf(ks.key), Token: token}, origin{kind: originInternal, ks: ks, token: token, shared: ks.shared})
	s.handOff(ks, 1)
	s.node.metrics.abandonedReleased.Inc()
}

// finish takes an answered waiter out of the queue, then releases answers
// that were deferred behind it on the same connection.
func (s *shard) finish(w *waiter) {
	ks := w.ks
	if ks.deferred > 0 {
		for z := w.next; z != nil; {
			next := z.next
			if z.cs == w.cs {
				if z.state != waitDeferred {
					break
				}
				s.sendDeferred(z)
				ks.unlink(z)
				z.state = waitDone
				z.cs.removeWaiter(z)
			}
			z = next
		}
	}
	ks.unlink(w)
	w.state = waitDone
	w.cs.removeWaiter(w)
	s.waits.clear(w)
}

// errNotServing is the deferred answer of an acquire that leadership
// moved away from: MOVED, or ERR unavailable, decided when it is sent.
var errNotServing = errors.New("not serving")

func (s *shard) sendDeferred(z *waiter) {
	key, op := bytesOf(z.ks.key), z.op()
	if z.deferred.err == errNotServing {
		s.answerNotServing(z.cs, op, key)
		return
	}
	if z.deferred.token != 0 {
		z.cs.send(&codec.Response{Op: op, Key: key, Status: codec.StatusOK, Token: z.deferred.token}, s.hold())
		return
	}
	var perr *codec.ParseError
	if errors.As(z.deferred.err, &perr) {
		z.cs.sendParseError(&codec.Request{Op: op, Key: key}, perr, s.hold())
		return
	}
	s.send(z.cs, op, key, codec.StatusTimeout)
}
