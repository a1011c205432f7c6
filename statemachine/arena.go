package statemachine

// keyArena keeps the key bytes of one shard's table: no Go string per key,
// so a million held locks are a few dozen allocations the GC does not
// scan, not a million strings.
//
// A key is stored as a length byte and its bytes, in chunks of at most
// maxChunk bytes, and named by a ref: its chunk's number in the high 16
// bits, its offset in the low 16. A chunk is only ever appended to: the
// bytes of a key never change once written, so a slice of them stays valid
// and unchanged for as long as it is kept, even after the key is freed or
// moved (the chunk lives on until the GC sees no slice of it); backups and
// Observer.Reset hand out such slices.
//
// Freed bytes are reclaimed by compaction, one chunk at a time: when the
// live bytes of a chunk other than the one being appended to fall below
// half of it, its live keys are copied to the tail and the chunk is
// dropped (the table does it, since only it knows which keys are live:
// table.compactChunk). So every chunk but the tail is at least half live,
// the arena is at most twice its live bytes plus one chunk, and a pause is
// one chunk's keys: at most maxChunk bytes copied and as many index
// updates as the chunk has keys (about 3,000 of 20 bytes).
type keyArena struct {
	chunks [][]byte // by number; nil: a number free for reuse
	live   []int32  // live bytes (length bytes included) by chunk
	spare  []uint32 // numbers of dropped chunks
	tail   int32    // the chunk appended to; -1 before the first
	// next is the size of the next chunk: small tables (a node has up to
	// MaxShards) stay small, big ones get chunks of maxChunk.
	next int
}

const (
	minChunk = 1 << 10
	maxChunk = 1 << 16 // a ref's offset is 16 bits
	// maxChunks is what a ref's 16 bits of chunk number allow: 4 GiB of
	// keys per shard.
	maxChunks = 1 << 16
)

// A stored key is its length byte and up to MaxKeyLen bytes, which must fit
// a byte and the smallest chunk.
const (
	_ = uint(255 - MaxKeyLen)
	_ = uint(minChunk - 1 - MaxKeyLen)
)

func newKeyArena() keyArena { return keyArena{tail: -1, next: minChunk} }

func refOf(chunk uint32, off int) uint32 { return chunk<<16 | uint32(off) }

func splitRef(ref uint32) (chunk uint32, off int) { return ref >> 16, int(ref & 0xffff) }

// add stores key (1..MaxKeyLen bytes) and returns its ref.
func (a *keyArena) add(key []byte) uint32 {
	need := 1 + len(key)
	if a.tail < 0 || len(a.chunks[a.tail])+need > cap(a.chunks[a.tail]) {
		a.newTail()
	}
	c := a.chunks[a.tail]
	off := len(c)
	c = append(c, byte(len(key)))
	a.chunks[a.tail] = append(c, key...)
	a.live[a.tail] += int32(need)
	return refOf(uint32(a.tail), off)
}

func (a *keyArena) newTail() {
	size := a.next
	a.next = min(2*a.next, maxChunk)
	buf := make([]byte, 0, size)
	if n := len(a.spare); n > 0 {
		a.tail = int32(a.spare[n-1])
		a.spare = a.spare[:n-1]
		a.chunks[a.tail], a.live[a.tail] = buf, 0
		return
	}
	if len(a.chunks) == maxChunks {
		// 4 GiB of keys in one shard: far beyond any memory this runs in.
		panic("statemachine: key arena full")
	}
	a.tail = int32(len(a.chunks))
	a.chunks = append(a.chunks, buf)
	a.live = append(a.live, 0)
}

// key returns the bytes of the key at ref; they never change (see above).
func (a *keyArena) key(ref uint32) []byte {
	c, off := splitRef(ref)
	b := a.chunks[c]
	n := int(b[off])
	return b[off+1 : off+1+n : off+1+n]
}

// release frees the key at ref and reports the chunk to compact, if
// freeing it left a chunk other than the tail less than half live.
func (a *keyArena) release(ref uint32) (uint32, bool) {
	c, off := splitRef(ref)
	a.live[c] -= int32(1 + int(a.chunks[c][off]))
	if int32(c) == a.tail || 2*int(a.live[c]) >= len(a.chunks[c]) {
		return 0, false
	}
	return c, true
}

// each calls fn with the ref and bytes of every key stored in chunk c,
// freed ones too, in the order they were added.
func (a *keyArena) each(c uint32, fn func(ref uint32, key []byte)) {
	b := a.chunks[c]
	for off := 0; off < len(b); {
		n := int(b[off])
		fn(refOf(c, off), b[off+1:off+1+n:off+1+n])
		off += 1 + n
	}
}

// drop forgets chunk c, whose live keys were all moved.
func (a *keyArena) drop(c uint32) {
	a.chunks[c], a.live[c] = nil, 0
	a.spare = append(a.spare, c)
}

// bytes is what the arena's chunks take, for tests.
func (a *keyArena) bytes() (capacity, live int) {
	for i, c := range a.chunks {
		capacity += cap(c)
		live += int(a.live[i])
	}
	return capacity, live
}
