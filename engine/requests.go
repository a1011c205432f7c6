package engine

import (
	"time"

	"github.com/baton-dev/baton/codec"
	"github.com/baton-dev/baton/engine/stagetrace"
	sm "github.com/baton-dev/baton/statemachine"
)

// Requests, as the event loops hand them over: each is answered at once
// or becomes a command of the shard's pending batch.

// handle serves one parsed request. It returns true when it queued commands
// for the proposer.
func (s *shard) handle(cs *connState, r *codec.Request, now int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving && !s.holding() {
		if r.Op == codec.OpAcquire || r.Op == codec.OpShared {
			if ks := s.keys[string(r.Key)]; ks != nil && ks.hasLiveWaiter(cs) {
				// An earlier acquire of the key on this connection is still
				// unanswered (its Grant may be in flight): this answer must
				// not overtake it, or the client would pair them wrongly.
				s.deferAnswer(cs, ks, r.Op, errNotServing)
				return false
			}
		}
		switch {
		case r.Op == codec.OpRelease || r.Op == codec.OpExtend:
			s.answerNow(cs, r.Op, r.Key, s.keys[string(r.Key)], "", "")
		case (r.Op == codec.OpQuery || r.Op == codec.OpWatch || r.Op == codec.OpUnwatch) && s.node.clustered():
			s.queueRead(cs, r.Op, r.Key) // behind any earlier Q or W waiting for a ReadIndex (reads.go)
		case r.Op == codec.OpUnwatch:
			s.unwatch(cs, r.Key)
		default:
			s.answerNotServing(cs, r.Op, r.Key)
		}
		return false
	}
	before := s.pending.Len()
	switch r.Op {
	case codec.OpAcquire, codec.OpShared:
		s.acquire(cs, r, now)
	case codec.OpRelease, codec.OpExtend:
		if s.batchFull() {
			s.answerNow(cs, r.Op, r.Key, s.keys[string(r.Key)], codec.CodeOverloaded, tooManyCommands)
			break
		}
		s.releaseOrExtend(cs, r)
	case codec.OpQuery, codec.OpWatch, codec.OpUnwatch:
		if s.node.clustered() || !s.serving {
			// Behind a ReadIndex; or, held (awaiting the fence or a new
			// leader), until this node serves or another is named leader
			// (reads.go).
			s.queueRead(cs, r.Op, r.Key)
			break
		}
		// One member: its applied view holds everything acknowledged.
		s.serveRead(cs, r.Op, r.Key, now)
	}
	if stagetrace.On && before == 0 && s.pending.Len() > 0 {
		s.stageRead.Set(stagetrace.Since(epoch, now))
	}
	return s.pending.Len() > before
}

// badRequest answers a malformed request whose op and key could be read.
// A malformed A or S waits behind an earlier unanswered acquire of the
// same key on the same connection, so that answers to one (op, key) keep
// their order.
func (s *shard) badRequest(cs *connState, r *codec.Request, perr *codec.ParseError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Op == codec.OpAcquire || r.Op == codec.OpShared {
		if ks := s.keys[string(r.Key)]; ks != nil && ks.hasLiveWaiter(cs) {
			s.deferAnswer(cs, ks, r.Op, perr)
			return
		}
	}
	cs.sendParseError(r, perr, s.hold())
}

// acquire serves an A, or an S (r.Permits: a shared acquire, shared.go).
func (s *shard) acquire(cs *connState, r *codec.Request, now int64) {
	ks := s.keys[string(r.Key)]
	if ks == nil {
		ks = s.addKey(r.Key)
	}
	if r.Op == codec.OpShared {
		if perr := s.sharedRefusal(ks, r.Permits); perr != nil {
			// After any earlier acquire of the key on cs: answers to one
			// (op, key) keep their order.
			if ks.hasLiveWaiter(cs) {
				s.deferAnswer(cs, ks, r.Op, perr)
			} else {
				cs.sendParseError(r, perr, s.hold())
			}
			s.forgetIfIdle(ks)
			return
		}
	}
	retry := s.isRetry(ks, r.Owner)
	fits := s.fitsNow(ks, r.Permits)
	// A try that cannot be granted now is answered TIMEOUT at once, unless
	// that is not decided yet: while this node awaits its fence (the view
	// may lack the last commits), or while an acquire of the same owner
	// has its Grant in flight (the same acquire: a client's clean-up try
	// after a lost answer must not be told TIMEOUT of a grant that is
	// about to land). Then it queues, and endTries answers it.
	tryFails := r.WaitMs == codec.WaitNone && !retry && !fits
	undecided := tryFails && (!s.serving || s.ownerGranting(ks, r.Owner, r.Permits))
	if tryFails && !undecided {
		if ks.hasLiveWaiter(cs) {
			s.deferAnswer(cs, ks, r.Op, nil)
		} else {
			s.send(cs, r.Op, r.Key, codec.StatusTimeout)
		}
		s.forgetIfIdle(ks)
		return
	}
	if (retry || fits) && s.batchFull() {
		// It would be granted at once, by a command the batch has no room
		// for. (An acquire that queues adds no command, and a connection's
		// earlier acquire of the key means it queues: the order of
		// answers to one (op, key) is kept.)
		s.sendError(cs, r.Op, r.Key, codec.CodeOverloaded, tooManyCommands)
		s.forgetIfIdle(ks)
		return
	}
	if !retry && s.keyFull(ks, r.Owner) {
		if ks.hasLiveWaiter(cs) {
			s.deferAnswer(cs, ks, r.Op, &codec.ParseError{Code: codec.CodeOverloaded, Text: s.node.adm.tooManyForKey})
		} else {
			s.sendError(cs, r.Op, r.Key, codec.CodeOverloaded, s.node.adm.tooManyForKey)
		}
		return
	}
	w := &waiter{cs: cs, ks: ks, leaseMs: r.LeaseMs, permits: r.Permits, tryLock: r.WaitMs == codec.WaitNone, state: waitQueued, waitIdx: notInHeap, shard: s, received: now}
	if len(r.Owner) > 0 {
		w.owner = string(r.Owner)
	}
	if res := cs.addWaiter(w); res != added {
		s.refuseWaiter(cs, ks, r.Op, res)
		s.forgetIfIdle(ks)
		return
	}
	ks.enqueue(w)
	// A try queued while this node awaits its fence waits for it, even one
	// that fits: its Grant is proposed only once the node serves.
	ks.triesQueued = ks.triesQueued || undecided || (w.tryLock && !s.serving)
	if r.WaitMs > 0 {
		w.waitUntil = now + r.WaitMs*int64(time.Millisecond)
		s.waits.set(w)
		s.timerMayBeEarlier(w.waitUntil)
	}
	if retry {
		// The owner of a grant of the key asks again: its Grant answers
		// it, not the queue (owners.go).
		s.regrant(ks, w)
		return
	}
	s.grantHead(ks)
}

// deferAnswer queues a decided answer to an acquire (op A or S; TIMEOUT
// when err is nil) behind the connection's earlier acquire of the same
// key.
func (s *shard) deferAnswer(cs *connState, ks *keyState, op byte, err error) {
	w := &waiter{cs: cs, ks: ks, state: waitDeferred, deferred: deferredAnswer{err: err}, waitIdx: notInHeap, shard: s, received: monoNow()}
	if op == codec.OpShared {
		w.permits = sharedAnswer
	}
	if res := cs.addWaiter(w); res != added {
		// Order gives way to the limit: answer now rather than keep more.
		s.refuseWaiter(cs, ks, op, res)
		return
	}
	ks.enqueue(w)
}

// sharedAnswer is the permits of a deferred answer to an S: it only makes
// the waiter's op S (a deferred waiter is never granted).
const sharedAnswer = 1

// refuseWaiter answers an acquire that its connection could not take:
// ERR overloaded past a limit, nothing when the client is gone.
func (s *shard) refuseWaiter(cs *connState, ks *keyState, op byte, res addResult) {
	switch res {
	case connFull:
		s.sendError(cs, op, bytesOf(ks.key), codec.CodeOverloaded, cs.adm.tooManyOnConn)
	case nodeFull:
		s.sendError(cs, op, bytesOf(ks.key), codec.CodeOverloaded, cs.adm.tooManyOnNode)
	}
}

// keyFull reports whether an acquire of ks with owner would wait beyond
// MaxWaitersPerKey: this is where that limit is checked. Acquires of one
// owner are one acquire with one place in the queue (owners.go), so one
// whose owner already waits is let in; the queue is walked only at the
// limit.
func (s *shard) keyFull(ks *keyState, owner []byte) bool {
	if ks.waiting() < s.maxWaitersPerKey {
		return false
	}
	if len(owner) > 0 {
		for w := ks.head; w != nil; w = w.next {
			if w.live() && w.owner == string(owner) {
				return false
			}
		}
	}
	s.node.adm.hits.hit(limitWaitersPerKey)
	return true
}

func (s *shard) releaseOrExtend(cs *connState, r *codec.Request) {
	ks := s.keys[string(r.Key)]
	if ks == nil {
		slot, held := s.table.Find(r.Key)
		if !held && !s.node.clustered() && s.serving {
			// Nothing holds the key and nothing is in flight for it, and a
			// single node cannot have lost its leadership: the answer is
			// certain without a round through Raft (once it serves: before
			// its fence, its view may not hold the whole log yet).
			s.send(cs, r.Op, r.Key, codec.StatusNotHeld)
			return
		}
		// In a cluster "nothing holds it" may be a stale view: a leader
		// that was paused serves from its view until it learns of the new
		// term (about a second, seen in the chaos runs), and the new
		// leader may have granted the key meanwhile. Through Raft, the
		// answer is NOTHELD only if the committed table says so, and a
		// deposed leader's proposal fails (MOVED).
		ks = s.addFound(r.Key, slot, held)
	}
	o := origin{kind: originClient, op: r.Op, ks: ks, cs: cs}
	if r.Op == codec.OpRelease {
		s.propose(sm.Command{Op: sm.OpRelease, Key: r.Key, Token: r.Token}, o)
		freeing := int32(1) // one grant; an exclusive holder is the only one
		if r.Token == 0 {
			freeing = freeAll
		}
		s.handOff(ks, freeing)
		return
	}
	if _, held := s.grantSlot(ks, r.Token); held {
		o.extends, o.shared, o.token = true, ks.shared, r.Token
		if ks.shared {
			op := ks.opOf(r.Token)
			op.extending++
			ks.setOp(r.Token, op)
		} else {
			ks.extending++
		}
	}
	s.propose(sm.Command{Op: sm.OpExtend, Key: r.Key, Token: r.Token, LeaseMs: r.LeaseMs}, o)
}

// serveRead serves a Q, W or U from the view, which holds everything
// acknowledged (confirmed by a ReadIndex, in a cluster).
func (s *shard) serveRead(cs *connState, op byte, key []byte, now int64) {
	switch op {
	case codec.OpQuery:
		s.stateLine(cs, codec.OpQuery, key, now, false)
	case codec.OpWatch:
		s.watchW(cs, key, now)
	case codec.OpUnwatch:
		s.unwatch(cs, key)
	}
}

// stateLine sends the key's state in the view, as Q answers it (op Q) or
// as a watch's line (op W; event: a line after the watch's first), and
// returns the count of its shared holders (0 for FREE or HELD).
func (s *shard) stateLine(cs *connState, op byte, key []byte, now int64, event bool) (holders uint32) {
	r := codec.Response{Op: op, Key: key, Status: codec.StatusFree}
	if slot, held := s.table.Find(key); held {
		s.heldLine(&r, slot, now)
	}
	if event {
		cs.sendEvent(&r, s.hold())
	} else {
		cs.send(&r, s.hold())
	}
	return uint32(r.Holders)
}

// heldLine fills r with what holds the key whose row is slot: its
// exclusive holder, or its shared holds (protocol 1.4).
func (s *shard) heldLine(r *codec.Response, slot uint32, now int64) {
	if holders, permits, shared := s.table.Shared(slot); shared {
		r.Status, r.Holders, r.Permits = codec.StatusShared, uint64(holders), uint64(permits)
	} else {
		remaining := max(s.leases.deadlineOf(slot)-now, 0)
		r.Status, r.Token, r.Owner = codec.StatusHeld, s.table.Token(slot), bytesOf(s.table.Owner(slot))
		r.RemainingMs = uint64((remaining + int64(time.Millisecond) - 1) / int64(time.Millisecond))
	}
}

// answerNotServing answers a request this node cannot serve now: MOVED to
// the leader when another node is known to lead, else ERR unavailable.
func (s *shard) answerNotServing(cs *connState, op byte, key []byte) {
	r := s.notServing(cs, op, key)
	cs.send(&r, s.hold())
}

// answerNotServingEvent is answerNotServing for the line that ends a watch
// (watch.go).
func (s *shard) answerNotServingEvent(cs *connState, op byte, key []byte) {
	r := s.notServing(cs, op, key)
	cs.sendEvent(&r, s.hold())
}

// notServing is the answer of answerNotServing.
func (s *shard) notServing(cs *connState, op byte, key []byte) codec.Response {
	unavailable := func(text string) codec.Response {
		return codec.Response{Op: op, Key: key, Status: codec.StatusErr, Code: bytesOf(codec.CodeUnavailable), Text: bytesOf(text)}
	}
	if s.node.leaving.Load() {
		// Removed, or being removed: it sends nobody anywhere (PROTOCOL.md);
		// the client's refresh has the members to go to.
		return unavailable("this node is being removed from the cluster")
	}
	if s.leaderID != s.node.cfg.ID {
		if addr := s.node.movedAddr(cs, s.leaderID); addr != "" {
			return codec.Response{Op: op, Key: key, Status: codec.StatusMoved, Addr: bytesOf(addr)}
		}
	}
	return unavailable("leadership is changing or unknown, retry")
}

// Texts of ERR overloaded (those that name a configured number are the
// admission's).
const (
	tooManyCommands = "commits are stalled and too many commands wait to be proposed, retry later"
	tooManyReads    = "too many queries wait for the leader to confirm its leadership, retry later"
)

// batchFull reports whether the batch has no room for a client's command:
// this is where MaxPendingCommands is checked. It counts the commands
// proposed and not committed too: MaxProposalsInFlight alone bounds how
// many proposals Raft holds, not how big each is, and while commits stall
// every event loop's round of requests would become one more.
func (s *shard) batchFull() bool {
	if s.pending.Len()+s.inflightCmds < s.maxPending {
		return false
	}
	s.node.adm.hits.hit(limitPendingCommands)
	return true
}

func (s *shard) send(cs *connState, op byte, key []byte, st codec.Status) {
	cs.send(&codec.Response{Op: op, Key: key, Status: st}, s.hold())
}

func (s *shard) sendError(cs *connState, op byte, key []byte, code, text string) {
	cs.send(&codec.Response{Op: op, Key: key, Status: codec.StatusErr, Code: bytesOf(code), Text: bytesOf(text)}, s.hold())
}
