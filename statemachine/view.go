package statemachine

import "slices"

// Table is one shard's lock table as the Observer reads it: the grants it
// holds, each in a row named by its slot, which stays the grant's for as
// long as it holds. Every grant has a slot of its own: an exclusive lock's
// is its key's row, and each shared grant of a key has one too, beside
// the key's header row (see "Shared holds" in the package doc). The
// observer may keep per-grant state of its own in arrays indexed by slot
// (Slots bounds them), which is how the engine keeps a lease deadline per
// grant without a copy of the key. Every method must be called under the
// shard's Observer.Locker; the zero Table is empty.
type Table struct{ t *table }

// Find returns the slot of key's row, if key is held: for a key held
// exclusively, its grant's slot; for a key held by shared grants, its
// header's, which is no grant (Shared tells them apart, and says how many
// hold the key; Grant and OwnerGrant find one of its grants).
func (v Table) Find(key []byte) (uint32, bool) {
	if v.t == nil {
		return 0, false
	}
	return v.t.heldSlot(key)
}

// Held reports whether the row in slot is held: a grant that holds, or
// the header of a key shared grants hold (rather than free, or the row of
// a grant or key released since the last checkpoint).
func (v Table) Held(slot uint32) bool {
	return v.t != nil && int(slot) < len(v.t.rows) && v.t.rows[slot].tok&rowHeld != 0
}

// Token is the token of the grant in slot, which must be held; 0 for a
// shared key's header.
func (v Table) Token(slot uint32) uint64 {
	if v.t.rows[slot].tok&rowShared != 0 {
		return 0
	}
	return v.t.token(slot)
}

// LeaseMs is the lease of the grant in slot, which must be held; 0 for a
// shared key's header.
func (v Table) LeaseMs(slot uint32) uint32 { return v.t.rows[slot].leaseMs }

// Owner is the owner of the grant in slot ("" for none, and for a shared
// key's header), which must be held. It is the table's own string: it
// never changes.
func (v Table) Owner(slot uint32) string { return v.t.ownerOf(slot) }

// Key is the key of the row in slot, which must be held (a shared grant's
// is its key's): read-only, and valid (unchanged) for as long as it is
// kept.
func (v Table) Key(slot uint32) []byte { return v.t.keyOf(slot) }

// Permits is the permits of the grant in slot, which must be held: 0 for an
// exclusive lock, its key's for a shared grant (and for a shared key's
// header).
func (v Table) Permits(slot uint32) uint32 {
	if v.t.rows[slot].tok&rowShared != 0 {
		return v.t.shared[slot].permits
	}
	return v.t.permitsOf(slot)
}

// Shared reports whether slot, which must be held, is the header of a key
// held by shared grants (the slot Find returns for such a key), and then
// how many grants hold the key (1..permits) and its permits: what `Q`
// answers (SHARED <holders> <permits>).
func (v Table) Shared(slot uint32) (holders, permits uint32, ok bool) {
	if v.t.rows[slot].tok&rowShared == 0 {
		return 0, 0, false
	}
	sk := v.t.shared[slot]
	return uint32(len(sk.grants)), sk.permits, true
}

// Grant returns the slot of key's grant with token, exclusive or shared, if
// it holds.
func (v Table) Grant(key []byte, token uint64) (uint32, bool) {
	i, ok := v.Find(key)
	switch {
	case !ok:
		return 0, false
	case v.t.rows[i].tok&rowShared != 0:
		g, ok := v.t.shared[i].grants[token]
		return g, ok
	}
	return i, token != 0 && v.t.token(i) == token
}

// OwnerGrant returns the slot of key's grant whose owner is owner (not
// ""), exclusive or shared, if it holds: the grant a retry of owner would
// get back (or, of the other kind, be refused for: KindMismatch).
func (v Table) OwnerGrant(key []byte, owner string) (uint32, bool) {
	i, ok := v.Find(key)
	switch {
	case !ok || owner == "":
		return 0, false
	case v.t.rows[i].tok&rowShared != 0:
		g, ok := v.t.shared[i].owners[owner]
		return g, ok
	}
	return i, v.t.ownerOf(i) == owner
}

// Holders calls fn with the slot of every shared grant of the key whose
// header is in slot (Find's slot of a shared key), in token order; it
// calls nothing for any other slot. It sorts the holders: rare use only.
func (v Table) Holders(slot uint32, fn func(grant uint32)) {
	if v.t == nil || int(slot) >= len(v.t.rows) || v.t.rows[slot].tok&(rowHeld|rowShared) != rowHeld|rowShared {
		return
	}
	grants := v.t.shared[slot].grants
	toks := make([]uint64, 0, len(grants))
	for tok := range grants {
		toks = append(toks, tok)
	}
	slices.Sort(toks)
	for _, tok := range toks {
		fn(grants[tok])
	}
}

// Freed returns the slots of the shared grants that the command cmd of the
// entry being applied (its index in Applied's cmds and results) freed, if
// it was a Release without a token of a key shared grants held (Released,
// Token 0, Slot the key's header), in token order: each of them ends
// with its lease. It is nil for any other command. Valid only during the
// entry's Applied: the slots are reusable after it, and the list is
// reused by the next entry. (Not a field of Result, so that a Result
// stays as small and comparable as it was: see table.freedAll.)
func (v Table) Freed(cmd int) []uint32 {
	if v.t == nil {
		return nil
	}
	for _, w := range v.t.freedBy {
		if w.cmd == cmd {
			return v.t.freedAll[w.at:w.end:w.end]
		}
	}
	return nil
}

// Len is the number of grants held: exclusive locks and shared grants (a
// key held by n shared grants counts n), the rows Each visits.
func (v Table) Len() int {
	if v.t == nil {
		return 0
	}
	return v.t.len()
}

// Slots is one more than the largest slot the table has used so far.
func (v Table) Slots() int {
	if v.t == nil {
		return 0
	}
	return len(v.t.rows)
}

// Each calls fn with the slot of every grant held, exclusive or shared (no
// header: each slot it gives has a token and a lease), in slot order.
func (v Table) Each(fn func(slot uint32)) {
	if v.t == nil {
		return
	}
	for i := range v.t.rows {
		if v.t.isGrant(uint32(i)) {
			fn(uint32(i))
		}
	}
}

// Locks calls fn for every grant held (one Lock per shared grant, with
// its key's permits), in slot order. Keys alias the table's (read-only,
// never changed); owners are the table's own.
func (v Table) Locks(fn func(Lock)) {
	if v.t != nil {
		v.t.each(fn)
	}
}
