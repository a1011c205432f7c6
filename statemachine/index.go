package statemachine

import (
	"bytes"
	"hash/maphash"
)

// keyIndex finds a key's row: an open-addressed hash table with linear
// probing, each entry a uint64 of the key's 32-bit hash (high half) and its
// row's slot plus one (low half; 0 is an empty entry). Keys are not in it:
// an entry whose hash matches is checked against the row's key in the
// arena, so the index is 8 bytes per entry and holds no pointer for the GC
// to scan. It is kept between 3/16 and 3/4 full (it doubles past 3/4 and
// halves below 3/16, down to minIndex), and a removal shifts later entries
// back instead of leaving a tombstone, so that lookups stay short however
// much the table churns.
//
// The hash is maphash with a seed per process: clients choose the keys, and
// must not be able to choose ones that collide.
type keyIndex struct {
	entries []uint64
	n       int // keys in the index
}

const minIndex = 64

var indexSeed = maphash.MakeSeed()

func hashKey(key []byte) uint32 {
	h := maphash.Bytes(indexSeed, key)
	return uint32(h ^ h>>32)
}

func entryOf(h uint32, slot uint32) uint64 { return uint64(h)<<32 | uint64(slot+1) }

func entrySlot(e uint64) uint32 { return uint32(e) - 1 }

func entryHash(e uint64) uint32 { return uint32(e >> 32) }

// find returns the slot of key's row, and whether it has one.
func (t *table) find(key []byte) (uint32, bool) {
	x := &t.index
	if x.n == 0 {
		return 0, false
	}
	h := hashKey(key)
	mask := uint32(len(x.entries) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := x.entries[i]
		if e == 0 {
			return 0, false
		}
		if entryHash(e) == h && bytes.Equal(t.indexKey(entrySlot(e)), key) {
			return entrySlot(e), true
		}
	}
}

// indexAdd adds key, which the index has not, with the row in slot.
func (t *table) indexAdd(key []byte, slot uint32) {
	x := &t.index
	if 4*(x.n+1) > 3*len(x.entries) {
		x.resize(max(minIndex, 2*len(x.entries)))
	}
	x.put(entryOf(hashKey(key), slot))
	x.n++
}

// put places e in the first empty entry from its home.
func (x *keyIndex) put(e uint64) {
	mask := uint32(len(x.entries) - 1)
	i := entryHash(e) & mask
	for x.entries[i] != 0 {
		i = (i + 1) & mask
	}
	x.entries[i] = e
}

// indexRemove removes key, whose row is in slot, from the index.
func (t *table) indexRemove(key []byte, slot uint32) {
	x := &t.index
	mask := uint32(len(x.entries) - 1)
	i := hashKey(key) & mask
	for entrySlot(x.entries[i]) != slot {
		i = (i + 1) & mask
	}
	// Shift back every later entry of the run that may sit at i: one whose
	// home is not cyclically in (i, j].
	for j := (i + 1) & mask; x.entries[j] != 0; j = (j + 1) & mask {
		home := entryHash(x.entries[j]) & mask
		if (j-home)&mask >= (j-i)&mask {
			x.entries[i] = x.entries[j]
			i = j
		}
	}
	x.entries[i] = 0
	x.n--
	if len(x.entries) > minIndex && 16*x.n < 3*len(x.entries) {
		x.resize(len(x.entries) / 2)
	}
}

// resize rebuilds the index with size entries (a power of two), from the
// hashes it keeps: no key is read.
func (x *keyIndex) resize(size int) {
	old := x.entries
	x.entries = make([]uint64, size)
	for _, e := range old {
		if e != 0 {
			x.put(e)
		}
	}
}
