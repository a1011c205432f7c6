package engine

import (
	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// Owners (protocol 1.1): an acquire may name its owner, which is kept with
// the grant. Three rules follow, all here:
//
//   - A retry: an acquire whose owner holds the key is answered OK with the
//     holder's token at once, without queueing. It is proposed as a Grant
//     with that owner, which the state machine answers Regranted (the same
//     token, nothing changed) if the owner still holds the key when it
//     applies: a leader that was deposed meanwhile cannot hand out a grant
//     that has since expired.
//   - One place: acquires of one key with the same owner are one acquire.
//     When a grant lands for one of them, every other waiting one is
//     answered OK with the same token (grantSameOwner). When the earliest
//     one stops waiting (its wait ran out, its connection closed), the next
//     one of the owner takes its place in the queue (handPlace).
//   - Disconnect: as without owners; a grant that lands for nobody is
//     released, unless another acquire of the owner took it.
//
// The rules hold for shared grants (S) as for exclusive ones, each kind
// on its own: acquires of one owner are one acquire only if they are of
// the same kind (and so, by the rule of one permits per key, of the same
// permits). An acquire whose owner holds a grant of the key of the other
// kind is a retry too, which the state machine refuses (KindMismatch:
// ERR badrequest, shared.go).
//
// The committed owner of each held key is the table's (statemachine keeps
// it with the grant), read through the key's slot.

// isRetry reports whether an acquire with owner is a retry of a grant
// that holds ks.
func (s *shard) isRetry(ks *keyState, owner []byte) bool {
	switch {
	case len(owner) == 0 || ks.slot == noSlot || !s.table.Held(uint32(ks.slot)):
		return false
	case ks.shared:
		_, ok := s.table.OwnerGrant(bytesOf(ks.key), string(owner))
		return ok
	}
	return s.table.Owner(uint32(ks.slot)) == string(owner)
}

// ownerGranting reports whether an acquire of owner, of the kind permits
// says, has its Grant in flight for ks: a try of that owner is then the
// same acquire, decided by that Grant's outcome (grantSameOwner answers it
// if it lands, endTries if not), not answered TIMEOUT before it; and a
// grant of that owner that lands for nobody is not given back, since that
// Grant will find it (Regranted). An exclusive Grant is found even when
// its acquire was abandoned (ks.granting); a shared one only while its
// acquire waits for it (an abandoned one is given back as it lands, if
// nobody else of its owner waits).
func (s *shard) ownerGranting(ks *keyState, owner []byte, permits uint32) bool {
	if len(owner) == 0 {
		return false
	}
	if g := ks.granting; g != nil && g.permits == permits && g.owner == string(owner) {
		return true
	}
	for z := ks.head; z != nil; z = z.next {
		if (z.state == waitGranting || z.state == waitRegranting) && z.permits == permits && z.owner == string(owner) {
			return true
		}
	}
	return false
}

// regrant proposes the Grant of a retry. w is the acquire, in the queue
// as waitRegranting until the outcome is known (regranted).
func (s *shard) regrant(ks *keyState, w *waiter) {
	w.state = waitRegranting
	s.propose(sm.Command{Op: sm.OpGrant, Key: bytesOf(ks.key), LeaseMs: w.leaseMs, Owner: bytesOf(w.owner), Permits: w.permits},
		origin{kind: originGrant, ks: ks, w: w})
}

// regranted settles a retry whose Grant applied. Regranted: the owner
// still holds the key, w gets the holder's token (after any earlier
// acquire of the key on its connection). Granted: the key had become free
// and the retry took it, as a new acquire would have. Rejected: someone
// else holds the key now, and w waits like any acquire (or times out, for
// a try-lock).
func (s *shard) regranted(w *waiter, res sm.Result, failed bool, now int64) {
	ks := w.ks
	switch {
	case res.Code == sm.Regranted && (failed || w.abandoned):
		// Nobody waits for the answer; the grant is the holder's own and
		// stays.
		s.finish(w)
	case res.Code == sm.Regranted:
		s.node.metrics.acquireGranted(w.received, now)
		if s.hasEarlierLive(w) {
			// An earlier acquire of the key on this connection is still
			// unanswered: the OK waits its turn behind it.
			w.state, w.deferred = waitDeferred, deferredAnswer{token: res.Token}
			ks.deferred++
			s.waits.clear(w)
			return
		}
		w.cs.send(&codec.Response{Op: w.op(), Key: bytesOf(ks.key), Status: codec.StatusOK, Token: res.Token}, s.hold())
		s.finish(w)
	case res.Code == sm.Granted:
		s.granted(w, res.Token, true, failed, now)
	case failed || w.abandoned:
		s.finish(w)
	case s.refuseGrant(w, res):
	case w.tryLock:
		s.send(w.cs, w.op(), bytesOf(ks.key), codec.StatusTimeout)
		s.finish(w)
	default:
		w.state = waitQueued // waits from where it joined the queue
	}
}

// regrantParked proposes the retries that a lost leadership sent back to
// the queue before their Grant was proposed (dropPending), once this node
// serves again and their owner still holds the key.
func (s *shard) regrantParked(ks *keyState) {
	if ks.slot == noSlot {
		return
	}
	for w := ks.head; w != nil; w = w.next {
		if w.state == waitQueued && w.owner != "" && s.isRetry(ks, bytesOf(w.owner)) {
			s.regrant(ks, w)
		}
	}
}

// grantSameOwner answers OK with token every other waiting acquire of the
// key whose owner is w's, of w's kind: they are one acquire with w, just
// granted. It reports whether any was answered, so that a grant whose own
// requester is gone is kept for them.
func (s *shard) grantSameOwner(ks *keyState, w *waiter, token uint64) bool {
	owner := w.owner
	if owner == "" {
		return false
	}
	answered := false
	for z := ks.head; z != nil; {
		next := z.next
		if z.owner == owner && z.permits == w.permits && z.state == waitQueued {
			answered = true
			s.node.metrics.acquireGranted(z.received, monoNow())
			if s.hasEarlierLive(z) {
				// Its connection has an earlier acquire of the key still
				// waiting: the OK goes out after that one's answer.
				z.state, z.deferred = waitDeferred, deferredAnswer{token: token}
				ks.deferred++
				s.waits.clear(z)
			} else {
				z.cs.send(&codec.Response{Op: z.op(), Key: bytesOf(ks.key), Status: codec.StatusOK, Token: token}, s.hold())
				s.finish(z)
			}
		}
		z = next
	}
	return answered
}

// handPlace gives w's place in the queue to the next acquire of the same
// owner that still waits, as w stops waiting (its answer is sent now, or
// it is gone). Only one whose connection has no earlier acquire of the key
// waiting may move up, so that no answer overtakes another on a connection.
func (s *shard) handPlace(w *waiter) {
	if w.owner == "" || !w.inQueue {
		return
	}
	ks := w.ks
	for z := w.next; z != nil; z = z.next {
		if z.owner == w.owner && z.permits == w.permits && z.state == waitQueued && !s.hasEarlierLive(z) {
			ks.unlink(z)
			ks.insertBefore(z, w)
			return
		}
	}
}
