package statemachine

import "unsafe"

// row is one key's row in the table: what pebble stores under the key, but
// for the owner, which the table keeps aside (see table.owners), and the
// key itself, which is in the arena. 16 bytes, as the row was before the
// key moved into it: the row's flags take the low ShardBits bits of the
// token, which in a token are the shard id (the table knows it: token).
type row struct {
	tok     uint64 // the holder's token, its low ShardBits bits the row's flags
	leaseMs uint32
	key     uint32 // the key's ref in the arena
}

// The flags of a row.
const (
	// rowHeld: the key is held. A row in the index without it is a ghost:
	// a key released since the checkpoint, whose row the checkpoint still
	// has and the next one deletes; a Grant of the key takes the ghost's
	// row back.
	rowHeld = 1 << iota
	// rowOwned: owners has the holder's owner, so that a row without one
	// is never looked up there.
	rowOwned
	// rowStored: the checkpoint has a row for the key.
	rowStored
	// rowDirty: the row differs from the checkpoint's (a ghost always does).
	rowDirty
	// rowListed: the slot is in table.changed. It outlives a row freed
	// before the checkpoint, so that the slot is listed at most once
	// whatever takes it next.
	rowListed

	rowFlags = 1<<ShardBits - 1
)

// table is one shard's lock table and token counter, in memory. Update
// applies commands here and never reads pebble, which keeps the hot path to
// a hash lookup per command; pebble holds a checkpoint of the table (see
// onDisk.checkpoint), and the dirty rows are what the table has that the
// checkpoint has not.
//
// A key is stored once: its bytes in the arena (keys), its row in a slab
// (rows) by slot, and the index from key to slot. None of the three holds
// a Go pointer per key, so a table of a million locks is a handful of
// allocations the GC does not scan, and a grant allocates nothing once the
// slab, the arena and the index have grown. Slots freed while an entry
// applies are reused only after it (endEntry), so that within one entry a
// slot names one key.
type table struct {
	shard uint64
	seq   uint64 // tokens issued so far; the next Grant issues seq+1
	// fence is the proposer of the latest fence applied, 0 before the
	// first (a fence's proposer is never 0): from a fence on, only that
	// proposer's batches apply (see applyBatch).
	fence uint64
	// level is the shard's cluster version: levelNone until a raise
	// applies (see FeatureLevel). From 2 on, the meta and the snapshot
	// stream carry it.
	level uint64
	// dirVersion counts the directory writes that took (0: the directory
	// was never set), and dir is the directory they left (nil while
	// dirVersion is 0): see "Directory" in the package doc. dir is
	// replaced by a new copy at each write, never changed in place, so
	// the slices of it that Table.Directory and snapshots hand out stay
	// valid. dirChanged says the checkpoint does not have it yet.
	dirVersion uint64
	dir        []byte
	dirChanged bool

	index keyIndex
	keys  keyArena
	rows  []row
	free  []uint32 // slots of rows freed, reused before rows grows
	freed []uint32 // slots freed by the entry being applied (endEntry)
	held  int      // rows held (the index has the ghosts too)

	// owners holds the owner of every row that has one, by slot. Not a
	// field of row, so that a lock without an owner costs what it did
	// before owners existed (a string in row would add 16 bytes to every
	// row); not a slice beside rows either, which would cost those 16
	// bytes per row as soon as one lock has an owner. nil until then.
	owners map[uint32]string

	// changed lists the slots of every row that became dirty since the
	// checkpoint (rowListed), and dirty counts the rows that still are. A
	// key's first change since the checkpoint finds whether the checkpoint
	// has its row (rowStored): only a Grant changes a key the checkpoint
	// holds as free. A key granted and released between two checkpoints
	// (most keys, under load) is not dirty any more and never reaches
	// pebble.
	changed []uint32
	dirty   int
}

func newTable(shard uint64, seq uint64, sizeHint int) *table {
	return &table{
		shard: shard,
		seq:   seq,
		level: levelNone,
		keys:  newKeyArena(),
		rows:  make([]row, 0, sizeHint),
	}
}

// applyBatch applies one decoded entry, its header h and commands cmds,
// and appends one result per command to results. It is where the fence is
// decided (see "The fence" in the package doc), and must stay
// deterministic like apply: its only inputs are the table and the entry.
//
//   - A fence (no commands: DecodeBatch guarantees it) makes its proposer
//     the table's fence.
//   - A hand-off request (no commands either) changes nothing: it is for
//     the engine of the shard's leader. So does a level report.
//   - A raise sets the table's cluster version to its level, if that is
//     higher: even above this build's FeatureLevel, so that every replica's
//     table stays alike; the engine then stops a node that is too old.
//   - A directory write (no commands either) replaces the directory if
//     the table's cluster version is LevelMembership or more and the
//     write's base is the directory's version (setDirectory). It is not
//     kept out by the fence: its compare-and-set is what orders the
//     writes of different nodes, and it changes no lock.
//   - Once the table has a fence, a batch of any other proposer is answered
//     Fenced, every command of it, and changes nothing: no row, no token
//     counter, no changed set.
//   - Any other batch applies command by command, as it did before fences
//     existed (before the first fence, that is every batch).
func (t *table) applyBatch(h Header, cmds []Command, results []Result) []Result {
	switch {
	case h.Fence:
		t.fence = h.Proposer
	case h.HandOff, h.Report:
	case h.Raise:
		// Never lowered: a raise proposed by a leader that had not applied
		// a later one yet changes nothing.
		t.level = max(t.level, h.Level)
	case h.Directory:
		t.setDirectory(h.Base, h.Blob)
	case t.fence != 0 && h.Proposer != t.fence:
		for range cmds {
			results = append(results, Result{Code: Fenced})
		}
	default:
		for i := range cmds {
			results = append(results, t.apply(&cmds[i]))
		}
	}
	return results
}

// apply executes one command. It is the whole of baton's lock semantics and
// must stay deterministic: its only inputs are the table and the command.
func (t *table) apply(c *Command) Result {
	i, found := t.find(c.Key)
	held := found && t.rows[i].tok&rowHeld != 0
	switch c.Op {
	case OpGrant:
		if t.plantedGrant(c.Key, held, i) != held { // the chaos run's planted bugs; a no-op without -tags chaosmutation
			i, found = t.find(c.Key)
			held = false
		}
		if held {
			// The holder's own retry gets its grant back; a Grant without
			// an owner never matches (ownerOf is "" for a row without one).
			if len(c.Owner) > 0 && t.ownerOf(i) == string(c.Owner) {
				return Result{Code: Regranted, Token: t.token(i), Slot: i}
			}
			return Result{Code: GrantRejected}
		}
		t.seq++
		tok := t.seq<<ShardBits | t.shard
		if found {
			// A ghost: the key's row comes back, and with it what the
			// checkpoint has.
			t.hold(i, tok, c.LeaseMs, c.Owner)
		} else {
			i = t.insert(c.Key, tok, c.LeaseMs, c.Owner, 0)
		}
		t.change(i)
		return Result{Code: Granted, Token: tok, Slot: i}
	case OpRelease:
		if !held || (c.Token != 0 && t.token(i) != c.Token) {
			return Result{Code: NotHeld}
		}
		tok := t.token(i)
		t.release(i)
		return Result{Code: Released, Token: tok, Slot: i}
	case OpExtend:
		if !held || t.token(i) != c.Token {
			return Result{Code: NotHeld}
		}
		t.change(i)
		t.rows[i].leaseMs = c.LeaseMs
		return Result{Code: Extended, Token: c.Token, Slot: i}
	case OpExpire:
		if !held || t.token(i) != c.Token {
			return Result{Code: Noop}
		}
		t.release(i)
		return Result{Code: Expired, Token: c.Token, Slot: i}
	}
	return Result{Code: Noop}
}

// token is the holder's token of the row in slot i.
func (t *table) token(i uint32) uint64 { return t.rows[i].tok&^rowFlags | t.shard }

// keyOf is the key of the row in slot i: the arena's bytes, read-only.
func (t *table) keyOf(i uint32) []byte { return t.keys.key(t.rows[i].key) }

// heldSlot returns the slot of key's row if key is held.
func (t *table) heldSlot(key []byte) (uint32, bool) {
	i, ok := t.find(key)
	return i, ok && t.rows[i].tok&rowHeld != 0
}

// change records that the row in slot i differs from the checkpoint's.
func (t *table) change(i uint32) {
	r := &t.rows[i]
	if r.tok&rowDirty == 0 {
		r.tok |= rowDirty
		t.dirty++
	}
	if r.tok&rowListed == 0 {
		r.tok |= rowListed
		t.changed = append(t.changed, i)
	}
}

// insert adds a held row for key, which has no row, with flags (rowStored
// for a row the checkpoint has), and returns its slot.
func (t *table) insert(key []byte, tok uint64, leaseMs uint32, owner []byte, flags uint64) uint32 {
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
		flags |= t.rows[i].tok & rowListed
	} else {
		i = uint32(len(t.rows))
		t.rows = append(t.rows, row{})
	}
	t.rows[i] = row{tok: flags, key: t.keys.add(key)}
	t.indexAdd(key, i)
	t.hold(i, tok, leaseMs, owner)
	return i
}

// hold makes the row in slot i, which is not held, the holder's.
func (t *table) hold(i uint32, tok uint64, leaseMs uint32, owner []byte) {
	r := &t.rows[i]
	r.tok = r.tok&(rowStored|rowDirty|rowListed) | tok&^rowFlags | rowHeld
	r.leaseMs = leaseMs
	if len(owner) > 0 {
		r.tok |= rowOwned
		if t.owners == nil {
			t.owners = make(map[uint32]string)
		}
		t.owners[i] = string(owner)
	}
	t.held++
}

// release frees the held row in slot i, and its owner with it. A row the
// checkpoint has becomes a ghost, which the next checkpoint deletes; any
// other is back to what the checkpoint says (free), so it is no longer
// dirty at all, and leaves the table.
func (t *table) release(i uint32) {
	r := &t.rows[i]
	if r.tok&rowOwned != 0 {
		delete(t.owners, i)
	}
	r.tok &= rowStored | rowDirty | rowListed
	r.leaseMs = 0
	t.held--
	if r.tok&rowStored != 0 {
		t.change(i)
		return
	}
	if r.tok&rowDirty != 0 {
		t.dirty--
	}
	t.drop(i)
	t.freed = append(t.freed, i)
}

// drop takes the row in slot i, held by no one, out of the index and its
// key out of the arena, compacting the key's chunk if that left it sparse.
// The slot keeps only rowListed; the caller frees it.
func (t *table) drop(i uint32) {
	ref := t.rows[i].key
	t.indexRemove(t.keys.key(ref), i)
	t.rows[i] = row{tok: t.rows[i].tok & rowListed}
	if c, sparse := t.keys.release(ref); sparse {
		t.compactChunk(c)
	}
}

// compactChunk moves the live keys of chunk c to the arena's tail and drops
// c: a key is live if its row still names this copy (a dead copy's key may
// have a row again, with a newer copy).
func (t *table) compactChunk(c uint32) {
	t.keys.each(c, func(ref uint32, key []byte) {
		if i, ok := t.find(key); ok && t.rows[i].key == ref {
			t.rows[i].key = t.keys.add(key)
		}
	})
	t.keys.drop(c)
}

// endEntry makes the slots freed by the entry just applied reusable: the
// entry's Applied has seen them (see table).
func (t *table) endEntry() {
	t.free = append(t.free, t.freed...)
	t.freed = t.freed[:0]
}

// eachChanged calls fn for every dirty row: held (the checkpoint must write
// it) or a ghost (the checkpoint must delete it).
func (t *table) eachChanged(fn func(i uint32, held bool)) {
	for _, i := range t.changed {
		if r := t.rows[i]; r.tok&rowDirty != 0 {
			fn(i, r.tok&rowHeld != 0)
		}
	}
}

// checkpointed records that the checkpoint now has every row as it is: no
// row is dirty, held ones are stored and ghosts leave the table.
func (t *table) checkpointed() {
	for _, i := range t.changed {
		r := &t.rows[i]
		dirty := r.tok&rowDirty != 0
		r.tok &^= rowDirty | rowListed
		switch {
		case !dirty:
		case r.tok&rowHeld != 0:
			r.tok |= rowStored
		default:
			t.drop(i)
			t.rows[i].tok = 0
			t.free = append(t.free, i)
		}
	}
	t.changed = t.changed[:0]
	t.dirty = 0
	t.dirChanged = false
}

// ownerOf is the owner of the row in slot i, "" if it has none.
func (t *table) ownerOf(i uint32) string {
	if t.rows[i].tok&rowOwned == 0 {
		return ""
	}
	return t.owners[i]
}

// get returns key's holder, if key is held.
func (t *table) get(key []byte) (LookupResult, bool) {
	i, ok := t.heldSlot(key)
	if !ok {
		return LookupResult{}, false
	}
	return LookupResult{Held: true, Token: t.token(i), LeaseMs: t.rows[i].leaseMs, Owner: t.ownerOf(i)}, true
}

func (t *table) len() int { return t.held }

// each calls fn for every held lock, in no order. Keys alias the arena and
// owners the owner strings (both immutable, read-only) so that handing a
// million locks to the observer does not allocate a million slices.
func (t *table) each(fn func(Lock)) {
	for i := range t.rows {
		if t.rows[i].tok&rowHeld != 0 {
			s := uint32(i)
			fn(Lock{Key: t.keyOf(s), Token: t.token(s), LeaseMs: t.rows[i].leaseMs, Owner: aliasBytes(t.ownerOf(s))})
		}
	}
}

// aliasString is b as a string without a copy: b must never change, as the
// arena's bytes never do.
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// aliasBytes is s as a read-only byte slice, nil for "", without a copy.
func aliasBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
