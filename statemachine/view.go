package statemachine

// Table is one shard's lock table as the Observer reads it: the held keys,
// each in a row named by its slot, which stays the key's for as long as it
// is held. The observer may keep per-key state of its own in arrays indexed
// by slot (Slots bounds them), which is how the engine keeps a lease
// deadline per held key without a copy of the key. Every method must be
// called under the shard's Observer.Locker; the zero Table is empty.
type Table struct{ t *table }

// Find returns the slot of key's row, if key is held.
func (v Table) Find(key []byte) (uint32, bool) {
	if v.t == nil {
		return 0, false
	}
	return v.t.heldSlot(key)
}

// Held reports whether the row in slot is held (rather than free, or the
// row of a key released since the last checkpoint).
func (v Table) Held(slot uint32) bool {
	return v.t != nil && int(slot) < len(v.t.rows) && v.t.rows[slot].tok&rowHeld != 0
}

// Token is the token of the holder in slot, which must be held.
func (v Table) Token(slot uint32) uint64 { return v.t.token(slot) }

// LeaseMs is the lease of the holder in slot, which must be held.
func (v Table) LeaseMs(slot uint32) uint32 { return v.t.rows[slot].leaseMs }

// Owner is the owner of the holder in slot ("" for none), which must be
// held. It is the table's own string: it never changes.
func (v Table) Owner(slot uint32) string { return v.t.ownerOf(slot) }

// Key is the key of the row in slot, which must be held: read-only, and
// valid (unchanged) for as long as it is kept.
func (v Table) Key(slot uint32) []byte { return v.t.keyOf(slot) }

// Len is the number of held keys.
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

// Each calls fn with the slot of every held key, in slot order.
func (v Table) Each(fn func(slot uint32)) {
	if v.t == nil {
		return
	}
	for i := range v.t.rows {
		if v.t.rows[i].tok&rowHeld != 0 {
			fn(uint32(i))
		}
	}
}

// Locks calls fn for every held lock, in slot order. Keys alias the
// table's (read-only, never changed); owners are the table's own.
func (v Table) Locks(fn func(Lock)) {
	if v.t != nil {
		v.t.each(fn)
	}
}
