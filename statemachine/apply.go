package statemachine

import (
	"slices"
	"unsafe"
)

// row is one grant's row in the table, or a shared key's header: what
// pebble stores under the key, but for the owner, which the table keeps
// aside (see table.owners), and the key itself, which is in the arena. 16
// bytes, as the row was before the key moved into it: the row's flags take
// the low ShardBits bits of the token, which in a token are the shard id
// (the table knows it: token).
//
// There are three kinds of row (see "Shared holds" in the package doc):
// an exclusive lock's (the key's own row: in the index, its key in the
// arena); a shared key's header (rowShared: the key's own row too, with no
// token and no lease; the key's permits and holders are in table.shared);
// and a shared grant's (rowGrant: not in the index, and key is not an
// arena ref but the slot of its key's header row, so that a shared grant
// costs no key bytes).
type row struct {
	tok     uint64 // the holder's token, its low ShardBits bits the row's flags
	leaseMs uint32
	key     uint32 // the key's ref in the arena; a shared grant's: its header's slot
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
	// rowShared: the row is a shared key's header (held while the key has
	// shared holders; a ghost without rowShared once it has none).
	rowShared
	// rowGrant: the row is a shared grant's. A ghost grant keeps it, with
	// its token and its header's slot, so that the checkpoint can name the
	// pebble row it deletes.
	rowGrant

	rowFlags = 1<<ShardBits - 1
)

// freedWindow says that the entry's command cmd freed the shared grants
// freedAll[at:end].
type freedWindow struct{ cmd, at, end int }

// sharedKey is what the table knows of a key held by shared grants,
// beside its header row: its permits and an index of its holders, by
// token (for a Release, Extend or Expire of one of them, and for the
// release of all) and by owner (for a retry), so that no command scans
// the holders, of which a key may have MaxPermits.
type sharedKey struct {
	permits uint32
	grants  map[uint64]uint32 // token -> slot, every shared grant of the key
	owners  map[string]uint32 // owner -> slot, the grants with an owner; nil until one
}

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

	// shared holds every shared key's permits and holders, by the slot of
	// its header row; nil until the first shared grant. Aside from the
	// rows, as owners are, so that an exclusive lock costs nothing for
	// it.
	shared map[uint32]*sharedKey
	// spare keeps up to maxSpare sharedKeys of small keys that went free,
	// their maps emptied but not their memory, for the next key that
	// becomes shared: so a semaphore that its holders leave and take
	// again allocates nothing.
	spare []*sharedKey
	// freedAll lists, for the entry being applied, the grants freed by
	// each Release without a token of a shared key, and freedBy says
	// which command freed which of them (Table.Freed); batch is the
	// entry's commands while applyBatch applies them, so that such a
	// release finds its own index among them (by address: nothing to do
	// per command). Kept in the table rather than in Result, so that a
	// Result stays the 24 comparable bytes it was (two more fields cost
	// the exclusive path about 30 instructions a command, measured with
	// cachegrind), and the rare release of every shared holder allocates
	// nothing once the list has grown. Emptied by endEntry.
	freedAll []uint32
	freedBy  []freedWindow
	batch    []Command

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
//   - Below LevelShared, a batch with a shared Grant (entry version 8) is
//     answered NotEnabled, every command of it, and changes nothing: a
//     replica of level 3 rejects the entry as unknown and skips it whole,
//     so no command of it may take effect on the others either.
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
	case t.level < LevelShared && h.shared:
		// An entry of version 8, which a replica of level 3 skips whole:
		// none of it may take effect here either.
		for range cmds {
			results = append(results, Result{Code: NotEnabled})
		}
	default:
		t.batch = cmds
		for i := range cmds {
			results = append(results, t.apply(&cmds[i]))
		}
		t.batch = nil // it aliases the Raft entries
	}
	return results
}

// apply executes one command. It is the whole of baton's lock semantics and
// must stay deterministic: its only inputs are the table and the command.
// An exclusive command of a key that is free or held exclusively takes the
// path it took before shared holds existed, at the cost of one test;
// anything shared is applyShared's.
func (t *table) apply(c *Command) Result {
	i, found := t.find(c.Key)
	var flags uint64
	if found {
		flags = t.rows[i].tok
	}
	// Only a held header has rowShared (a ghost has not).
	if flags&rowShared != 0 || c.Permits != 0 && c.Op == OpGrant {
		return t.applyShared(c, i, found, flags&rowHeld != 0)
	}
	held := flags&rowHeld != 0
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

// applyShared executes a command of a key held by shared grants (held,
// its header in slot i), or a shared Grant of any key (see "Shared holds"
// in the package doc). Like apply, deterministic: the holder index is
// only ever looked up, and the release of every holder goes in token
// order.
func (t *table) applyShared(c *Command, i uint32, found, held bool) Result {
	var sk *sharedKey
	if held && t.rows[i].tok&rowShared != 0 {
		sk = t.shared[i]
	}
	switch c.Op {
	case OpGrant:
		if c.Permits == 0 {
			// An exclusive Grant of a shared key: no upgrade in place.
			if len(c.Owner) > 0 {
				if _, ok := sk.owners[string(c.Owner)]; ok {
					return Result{Code: KindMismatch}
				}
			}
			return Result{Code: GrantRejected}
		}
		return t.grantShared(c, i, found, held, sk)
	case OpRelease:
		if c.Token == 0 {
			return t.releaseAll(i, sk, c)
		}
		g, ok := sk.grants[c.Token]
		if !ok {
			return Result{Code: NotHeld}
		}
		t.releaseGrant(g)
		return Result{Code: Released, Token: c.Token, Slot: g}
	case OpExtend:
		g, ok := sk.grants[c.Token]
		if !ok {
			return Result{Code: NotHeld}
		}
		t.change(g)
		t.rows[g].leaseMs = c.LeaseMs
		return Result{Code: Extended, Token: c.Token, Slot: g}
	case OpExpire:
		g, ok := sk.grants[c.Token]
		if !ok {
			return Result{Code: Noop}
		}
		t.releaseGrant(g)
		return Result{Code: Expired, Token: c.Token, Slot: g}
	}
	return Result{Code: Noop}
}

// grantShared applies the shared Grant c of a key whose row is in slot i
// (found: a ghost if not held), sk if shared holders hold it.
func (t *table) grantShared(c *Command, i uint32, found, held bool, sk *sharedKey) Result {
	switch {
	case t.level < LevelShared:
		return Result{Code: NotEnabled}
	case !held:
		if found {
			// A ghost: the key's row comes back, as its header.
			r := &t.rows[i]
			r.tok = r.tok&(rowStored|rowDirty|rowListed) | rowHeld | rowShared
			r.leaseMs = 0
		} else {
			i = t.insertRow(c.Key, rowHeld|rowShared)
		}
		t.change(i)
		t.addShared(i, c.Permits)
		return t.addGrant(i, c)
	case sk == nil:
		// Held exclusively: no downgrade in place.
		if len(c.Owner) > 0 && t.ownerOf(i) == string(c.Owner) {
			return Result{Code: KindMismatch}
		}
		return Result{Code: GrantRejected}
	}
	if len(c.Owner) > 0 {
		if g, ok := sk.owners[string(c.Owner)]; ok {
			return Result{Code: Regranted, Token: t.token(g), Slot: g}
		}
	}
	switch {
	case c.Permits != sk.permits:
		return Result{Code: PermitsMismatch}
	case plantedFull(uint32(len(sk.grants)) >= sk.permits): // the chaos run's planted bug; a no-op without -tags chaosmutation
		return Result{Code: GrantRejected}
	}
	return t.addGrant(i, c)
}

// addShared makes the key whose header is in slot h a shared key of
// permits, without holders yet.
func (t *table) addShared(h uint32, permits uint32) {
	if t.shared == nil {
		t.shared = make(map[uint32]*sharedKey)
	}
	if n := len(t.spare); n > 0 {
		sk := t.spare[n-1]
		t.spare = t.spare[:n-1]
		sk.permits = permits
		t.shared[h] = sk
		return
	}
	t.shared[h] = &sharedKey{permits: permits, grants: make(map[uint64]uint32, min(permits, 8))}
}

// The most sharedKeys table.spare keeps, and the most grants one may
// have had to be kept (its maps keep the room they grew to).
const (
	maxSpare       = 64
	maxSpareGrants = 64
)

// retire drops sk, a key's that has no holder left, or keeps it spare.
func (t *table) retire(sk *sharedKey) {
	if len(t.spare) >= maxSpare || sk.permits > maxSpareGrants {
		return
	}
	clear(sk.grants)
	clear(sk.owners)
	t.spare = append(t.spare, sk)
}

// addGrant issues a new token to the shared Grant c of the key whose
// header is in slot h.
func (t *table) addGrant(h uint32, c *Command) Result {
	t.seq++
	tok := t.seq<<ShardBits | t.shard
	g := t.newGrant(h, tok, c.LeaseMs, c.Owner, 0)
	t.change(g)
	return Result{Code: Granted, Token: tok, Slot: g}
}

// newGrant adds a held shared grant of the key whose header is in slot h
// (in t.shared), with flags (rowStored for a row the checkpoint has), and
// returns its slot.
func (t *table) newGrant(h uint32, tok uint64, leaseMs uint32, owner []byte, flags uint64) uint32 {
	g := t.newSlot()
	t.rows[g] = row{tok: t.rows[g].tok&rowListed | flags | rowGrant, key: h}
	t.hold(g, tok, leaseMs, owner)
	sk := t.shared[h]
	sk.grants[tok] = g
	if len(owner) > 0 {
		if sk.owners == nil {
			sk.owners = make(map[string]uint32)
		}
		sk.owners[t.owners[g]] = g // hold's string: one copy for both
	}
	return g
}

// releaseGrant frees the held shared grant in slot g, and its key's header
// if it was the last holder.
func (t *table) releaseGrant(g uint32) {
	h := t.rows[g].key
	sk := t.shared[h]
	delete(sk.grants, t.token(g))
	if t.rows[g].tok&rowOwned != 0 {
		delete(sk.owners, t.owners[g])
	}
	t.freeGrant(g)
	if len(sk.grants) == 0 {
		t.releaseHeader(h)
	}
}

// releaseAll frees every shared grant of the key whose header is in slot
// h, in token order, and the header: c, a Release without a token.
func (t *table) releaseAll(h uint32, sk *sharedKey, c *Command) Result {
	toks := make([]uint64, 0, len(sk.grants))
	for tok := range sk.grants {
		toks = append(toks, tok)
	}
	slices.Sort(toks)
	at := len(t.freedAll)
	for _, tok := range toks {
		g := sk.grants[tok]
		t.freedAll = append(t.freedAll, g)
		t.freeGrant(g) // sk goes as a whole, with its maps
	}
	t.releaseHeader(h)
	cmd := -1 // not applied by applyBatch: a test's
	for j := range t.batch {
		if &t.batch[j] == c {
			cmd = j
			break
		}
	}
	t.freedBy = append(t.freedBy, freedWindow{cmd: cmd, at: at, end: len(t.freedAll)})
	return Result{Code: Released, Slot: h}
}

// freeGrant frees the held shared grant in slot g, as release frees an
// exclusive one, but for the holder index (the caller's): a grant the
// checkpoint has becomes a ghost, keeping its token and header for the
// delete the checkpoint writes; any other leaves the table.
func (t *table) freeGrant(g uint32) {
	r := &t.rows[g]
	if r.tok&rowOwned != 0 {
		delete(t.owners, g)
	}
	r.tok &^= rowHeld | rowOwned
	r.leaseMs = 0
	t.held--
	if r.tok&rowStored != 0 {
		t.change(g)
		return
	}
	if r.tok&rowDirty != 0 {
		t.dirty--
	}
	*r = row{tok: r.tok & rowListed}
	t.freed = append(t.freed, g)
}

// releaseHeader frees the header in slot h of a key that has no shared
// holder left: the key is free, and its row a ghost or gone, as release
// leaves an exclusive lock's (but for held, which counts grants).
func (t *table) releaseHeader(h uint32) {
	t.retire(t.shared[h])
	delete(t.shared, h)
	t.rows[h].tok &= rowStored | rowDirty | rowListed
	t.unheld(h)
}

// token is the holder's token of the row in slot i.
func (t *table) token(i uint32) uint64 { return t.rows[i].tok&^rowFlags | t.shard }

// keyOf is the key of the row in slot i: the arena's bytes, read-only. A
// shared grant's is its header's.
func (t *table) keyOf(i uint32) []byte {
	r := &t.rows[i]
	if r.tok&rowGrant != 0 {
		r = &t.rows[r.key]
	}
	return t.keys.key(r.key)
}

// indexKey is the key of the row in slot i, which is in the index (an
// exclusive lock's, a header's or a ghost of either): keyOf without the
// test for a shared grant, for the index's probes.
func (t *table) indexKey(i uint32) []byte { return t.keys.key(t.rows[i].key) }

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
	// insertRow and hold, written out: the hot path of a grant.
	i := t.newSlot()
	t.rows[i] = row{tok: t.rows[i].tok&rowListed | flags, key: t.keys.add(key)}
	t.indexAdd(key, i)
	t.hold(i, tok, leaseMs, owner)
	return i
}

// insertRow adds a row with flags for key, which has no row, to the index
// and returns its slot.
func (t *table) insertRow(key []byte, flags uint64) uint32 {
	i := t.newSlot()
	t.rows[i] = row{tok: t.rows[i].tok&rowListed | flags, key: t.keys.add(key)}
	t.indexAdd(key, i)
	return i
}

// newSlot returns a free slot, whose row is empty but for rowListed.
func (t *table) newSlot() uint32 {
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		return i
	}
	t.rows = append(t.rows, row{})
	return uint32(len(t.rows) - 1)
}

// hold makes the row in slot i, which is not held, the holder's.
func (t *table) hold(i uint32, tok uint64, leaseMs uint32, owner []byte) {
	r := &t.rows[i]
	r.tok = r.tok&(rowStored|rowDirty|rowListed|rowGrant) | tok&^rowFlags | rowHeld
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
	t.unheld(i)
}

// unheld finishes the release of the key's row in slot i, no longer
// held: a row the checkpoint has becomes a ghost, which the next
// checkpoint deletes; any other is back to what the checkpoint says
// (free), so it is no longer dirty, and leaves the table.
func (t *table) unheld(i uint32) {
	if t.rows[i].tok&rowStored != 0 {
		t.change(i)
		return
	}
	if t.rows[i].tok&rowDirty != 0 {
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
	if cap(t.freedAll) > maxKeptFreedAll {
		t.freedAll = nil // a release of a million holders: not kept
	}
	t.freedAll, t.freedBy = t.freedAll[:0], t.freedBy[:0]
}

// maxKeptFreedAll is the most slots of freedAll endEntry keeps room for.
const maxKeptFreedAll = 1 << 12

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
		case r.tok&rowGrant != 0:
			// A ghost grant is in no index and has no key bytes.
			*r = row{}
			t.free = append(t.free, i)
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

// get returns key's holder, if key is held: for a shared key, its permits
// and holders.
func (t *table) get(key []byte) (LookupResult, bool) {
	i, ok := t.heldSlot(key)
	if !ok {
		return LookupResult{}, false
	}
	if t.rows[i].tok&rowShared != 0 {
		sk := t.shared[i]
		return LookupResult{Held: true, Permits: sk.permits, Holders: uint32(len(sk.grants))}, true
	}
	return LookupResult{Held: true, Token: t.token(i), LeaseMs: t.rows[i].leaseMs, Owner: t.ownerOf(i)}, true
}

// len is the number of grants held: exclusive locks and shared grants, not
// keys (a shared key's header is not a grant).
func (t *table) len() int { return t.held }

// isGrant reports whether the row in slot i is a held grant (an exclusive
// lock or a shared grant), not a header, a ghost or a free row.
func (t *table) isGrant(i uint32) bool { return t.rows[i].tok&(rowHeld|rowShared) == rowHeld }

// permitsOf is the permits of the grant in slot i: its key's for a shared
// grant, 0 for an exclusive lock.
func (t *table) permitsOf(i uint32) uint32 {
	if r := t.rows[i]; r.tok&rowGrant != 0 {
		return t.shared[r.key].permits
	}
	return 0
}

// each calls fn for every held grant, in slot order. Keys alias the arena
// and owners the owner strings (both immutable, read-only) so that handing
// a million locks to the observer does not allocate a million slices.
func (t *table) each(fn func(Lock)) {
	for i := range t.rows {
		if s := uint32(i); t.isGrant(s) {
			fn(Lock{Key: t.keyOf(s), Token: t.token(s), LeaseMs: t.rows[i].leaseMs, Owner: aliasBytes(t.ownerOf(s)), Permits: t.permitsOf(s)})
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
