package engine

import (
	"strconv"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// Shared holds (protocol 1.4, S): a key held by up to permits shared
// grants, each with its own token, lease and owner, on the same FIFO
// queue as exclusive acquires (A). The state machine keeps the grants (a
// header row for the key, a row per grant: statemachine "Shared holds");
// what the leader adds is the same as for A: the queue, the Grants it
// proposes for the waiters that fit (batch.go: grantFitting), a lease
// timer per grant (by its slot, as for an exclusive lock), and the
// Expires and Extends in flight of each grant (grantOp), which an
// exclusive holder keeps in its keyState's expiring and extending.
//
// The view of a key (keyState.slot) is its table row: an exclusive
// holder's grant, or a shared key's header (keyState.shared). A result
// names a grant's slot, not the header's, so a result about shared
// grants is followed by a fresh look at the table (refreshSlot), which
// during an entry's Applied is the entry's end: every decision taken from
// it is about the next batch, which comes after the whole entry anyway.

// freeAll is the freeing of a command that frees every holder of its
// key: a Release without a token (grantFitting).
const freeAll = 1 << 30

// grantOp is what is in flight for one shared grant of a key.
type grantOp struct {
	// expiring: an Expire of the grant is in flight.
	expiring bool
	// extending: Extends of the grant proposed and not applied yet, under
	// which its lease does not run out (see leaseDue).
	extending int32
}

// opOf is what is in flight for the shared grant with token.
func (ks *keyState) opOf(token uint64) grantOp { return ks.grantOps[token] }

// setOp records what is in flight for the shared grant with token,
// keeping no entry for a grant with nothing in flight.
func (ks *keyState) setOp(token uint64, op grantOp) {
	if op == (grantOp{}) {
		delete(ks.grantOps, token)
		return
	}
	if ks.grantOps == nil {
		ks.grantOps = make(map[uint64]grantOp)
	}
	ks.grantOps[token] = op
}

// notExpiring records that no Expire of the grant with token is in flight
// any more: it applied, or will not. (The exclusive holder's is
// ks.expiring.)
func (ks *keyState) notExpiring(token uint64) {
	if op, ok := ks.grantOps[token]; ok {
		op.expiring = false
		ks.setOp(token, op)
	}
}

// noneExpiring clears every shared grant's Expire in flight: the grants
// went (a Release of every holder), or the table was replaced.
func (ks *keyState) noneExpiring() {
	for tok, op := range ks.grantOps {
		op.expiring = false
		ks.setOp(tok, op)
	}
}

// refreshSlot reads the key's row and kind from the table, after a result
// about shared grants (see the top of this file).
func (s *shard) refreshSlot(ks *keyState) {
	ks.expiring = false
	slot, held := s.table.Find(bytesOf(ks.key))
	if !held {
		ks.slot, ks.shared = noSlot, false
		return
	}
	ks.slot = int32(slot)
	_, _, ks.shared = s.table.Shared(slot)
}

// holdersOf reports how many grants hold the key in the view, and
// whether that one is exclusive.
func (s *shard) holdersOf(ks *keyState) (holders int32, exclusive bool) {
	if ks.slot == noSlot || !s.table.Held(uint32(ks.slot)) {
		return 0, false
	}
	if h, _, ok := s.table.Shared(uint32(ks.slot)); ok {
		return int32(h), false
	}
	return 1, true
}

// fitsNow reports whether an acquire (permits 0: exclusive) would be
// granted at once: the key has room for it, nothing is granted to anybody
// else right now that would take that room, and nobody waits before it.
func (s *shard) fitsNow(ks *keyState, permits uint32) bool {
	if ks.granting != nil || ks.firstQueued() != nil {
		return false
	}
	holders, exclusive := s.holdersOf(ks)
	if permits == 0 {
		return holders == 0 && ks.sharedGranting == 0
	}
	return !exclusive && holders+ks.sharedGranting < int32(permits)
}

// grantSlot is the slot of the grant of ks with token, if it holds.
func (s *shard) grantSlot(ks *keyState, token uint64) (uint32, bool) {
	if !ks.shared {
		return uint32(ks.slot), token != 0 && s.holderToken(ks) == token
	}
	return s.table.Grant(bytesOf(ks.key), token)
}

// sharedRefusal checks an S before it queues: shared holds need every
// member at cluster version 4 (nothing of them is written before), and
// one key has one permits, that of its shared holders and of the S that
// wait for it. It returns the refusal, nil if there is none.
func (s *shard) sharedRefusal(ks *keyState, permits uint32) *codec.ParseError {
	if v := s.table.ClusterVersion(); v < sm.LevelShared {
		return &codec.ParseError{Code: codec.CodeUnavailable, Text: sharedNeedsVersion(v)}
	}
	if ks.shared && ks.slot != noSlot {
		if _, p, ok := s.table.Shared(uint32(ks.slot)); ok && p != permits {
			return permitsMismatch(permits, p)
		}
	}
	for w := ks.head; w != nil; w = w.next {
		if w.permits != 0 && w.live() {
			if w.permits != permits {
				return permitsMismatch(permits, w.permits)
			}
			break // the S in the queue all have the same permits
		}
	}
	return nil
}

// sharedNeedsVersion is the reason an S is not served below cluster
// version 4.
func sharedNeedsVersion(v uint64) string {
	return "shared holds need cluster version 4 (every member on a build with protocol 1.4); the cluster is at " + strconv.FormatUint(v, 10)
}

func permitsMismatch(asked, has uint32) *codec.ParseError {
	return &codec.ParseError{Code: codec.CodeBadRequest,
		Text: "permits " + strconv.FormatUint(uint64(asked), 10) + " differ from the key's " + strconv.FormatUint(uint64(has), 10)}
}

// refuseGrant answers w, whose Grant the state machine refused for what
// was asked rather than for the key's holders: a permits or kind mismatch
// (PermitsMismatch, KindMismatch), or shared holds not enabled yet
// (NotEnabled). It reports whether res was such a refusal.
func (s *shard) refuseGrant(w *waiter, res sm.Result) bool {
	var code, text string
	switch res.Code {
	case sm.PermitsMismatch:
		code, text = codec.CodeBadRequest, "permits differ from those of the key's shared holders"
	case sm.KindMismatch:
		code, text = codec.CodeBadRequest, "this owner holds the key exclusively: release it before a shared acquire"
		if w.permits == 0 {
			text = "this owner holds a shared grant of the key: release it before an exclusive acquire"
		}
	case sm.NotEnabled:
		code, text = codec.CodeUnavailable, sharedNeedsVersion(s.table.ClusterVersion())
	default:
		return false
	}
	s.sendError(w.cs, w.op(), bytesOf(w.ks.key), code, text)
	s.handPlace(w)
	s.finish(w)
	return true
}
