package engine

import "unsafe"

// The working state of busy keys (keyState): made when a key gets a waiter
// or a command, dropped when it has neither. The committed holder is the
// table's, so a held key needs none; but the next command of a key that
// was just granted is most often its release, a moment later, which would
// make its keyState again. So the keyStates of held keys that go idle are
// parked: kept, in the order they went idle, until maxParked newer ones
// push them out. What a shard keeps beyond its busy keys is bounded by
// maxParked, whatever it holds.

// maxParked is how many idle keyStates of held keys a shard keeps.
const maxParked = 4096

// addKey starts the working state of a key that has none, with its
// holder from the table.
func (s *shard) addKey(key []byte) *keyState {
	slot, held := s.table.Find(key)
	return s.addFound(key, slot, held)
}

// addFound is addKey for a key whose row the caller has looked up: slot,
// if held (Table.Find's: a shared key's header). The key's string is the table's bytes when it is held (they
// never change: statemachine.Table.Key), so that the release of a held
// key allocates no copy of it.
func (s *shard) addFound(key []byte, slot uint32, held bool) *keyState {
	ks := &keyState{slot: noSlot}
	if held {
		ks.slot = int32(slot)
		_, _, ks.shared = s.table.Shared(slot)
		b := s.table.Key(slot)
		ks.key = unsafe.String(unsafe.SliceData(b), len(b))
	} else {
		ks.key = string(key)
	}
	s.keys[ks.key] = ks
	return ks
}

// forgetIfIdle drops the working state of a key that has no waiter and no
// command any more: at once if the key is free, by parking if it is held.
// (A parked keyState of a key that became free leaves the map at once, and
// the ring when it is pushed out.)
func (s *shard) forgetIfIdle(ks *keyState) {
	if !ks.idle() || s.keys[ks.key] != ks {
		return
	}
	switch {
	case ks.slot == noSlot:
		delete(s.keys, ks.key)
	case !ks.parked:
		s.park(ks)
	}
}

// park keeps the idle keyState of a held key, pushing the oldest parked one
// out if maxParked are: that one is dropped if it is still idle (it stays
// if it is busy again, and is parked anew when it goes idle).
func (s *shard) park(ks *keyState) {
	ks.parked = true
	if len(s.parked) < maxParked {
		s.parked = append(s.parked, ks)
		return
	}
	old := s.parked[s.parkedNext]
	s.parked[s.parkedNext] = ks
	s.parkedNext = (s.parkedNext + 1) % maxParked
	old.parked = false
	if old.idle() && s.keys[old.key] == old {
		delete(s.keys, old.key)
	}
}
