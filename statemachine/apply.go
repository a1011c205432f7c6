package statemachine

import "unsafe"

// row is one held lock's value: what pebble stores under the key, but for
// the owner, which the table keeps aside (see table.owners).
type row struct {
	token   uint64
	leaseMs uint32
	// owned says that table.owners has this row's owner, so that a row
	// without one is never looked up there. It takes bytes that were
	// padding: a row is 16 bytes, as before owners existed.
	owned bool
}

// table is one shard's lock table and token counter, in memory. Update
// applies commands here and never reads pebble, which keeps the hot path to
// a map lookup per command; pebble holds a checkpoint of the table (see
// onDisk.checkpoint), and changed is what the table has that the checkpoint
// has not.
//
// Rows live in a slab indexed from the map rather than as map values:
// assigning m[string(key)] allocates the key string even when the key is
// already present, so an Extend would allocate; updating rows[i] does not.
type table struct {
	shard uint64
	seq   uint64 // tokens issued so far; the next Grant issues seq+1
	// fence is the proposer of the latest fence applied, 0 before the
	// first (a fence's proposer is never 0): from a fence on, only that
	// proposer's batches apply (see applyBatch).
	fence uint64
	slot  map[string]uint32
	rows  []row
	free  []uint32 // slots of rows released, reused before rows grows

	// owners holds the owner of every row that has one, by slot. Not a
	// field of row, so that a lock without an owner costs what it did
	// before owners existed (a string in row would add 16 bytes to every
	// row); not a slice beside rows either, which would cost those 16
	// bytes per row as soon as one lock has an owner. nil until then.
	owners map[uint32]string

	// changed maps every key whose row differs from the last checkpoint
	// to whether the checkpoint has a row for it. A key's first change
	// since the checkpoint tells: only a Grant changes a key the
	// checkpoint holds as free. A key granted and released between two
	// checkpoints (most keys, under load) leaves the set again and never
	// reaches pebble.
	changed map[string]bool
}

func newTable(shard uint64, seq uint64, sizeHint int) *table {
	return &table{
		shard:   shard,
		seq:     seq,
		slot:    make(map[string]uint32, sizeHint),
		rows:    make([]row, 0, sizeHint),
		changed: make(map[string]bool),
	}
}

// applyBatch applies one decoded entry, its header h and commands cmds,
// and appends one result per command to results. It is where the fence is
// decided (see "The fence" in the package doc), and must stay
// deterministic like apply: its only inputs are the table and the entry.
//
//   - A fence (no commands: DecodeBatch guarantees it) makes its proposer
//     the table's fence.
//   - Once the table has a fence, a batch of any other proposer is answered
//     Fenced, every command of it, and changes nothing: no row, no token
//     counter, no changed set.
//   - Any other batch applies command by command, as it did before fences
//     existed (before the first fence, that is every batch).
func (t *table) applyBatch(h Header, cmds []Command, results []Result) []Result {
	switch {
	case h.Fence:
		t.fence = h.Proposer
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
	i, held := t.slot[string(c.Key)]
	switch c.Op {
	case OpGrant:
		held = t.plantedGrant(c.Key, held, i) // the chaos run's planted bugs; a no-op without -tags chaosmutation
		if held {
			// The holder's own retry gets its grant back; a Grant without
			// an owner never matches (ownerOf is "" for a row without one).
			if len(c.Owner) > 0 && t.ownerOf(i) == string(c.Owner) {
				return Result{Code: Regranted, Token: t.rows[i].token}
			}
			return Result{Code: GrantRejected}
		}
		t.seq++
		r := row{token: t.seq<<ShardBits | t.shard, leaseMs: c.LeaseMs}
		k := t.insert(c.Key, r, c.Owner)
		if _, ok := t.changed[k]; !ok {
			t.changed[k] = false
		}
		return Result{Code: Granted, Token: r.token}
	case OpRelease:
		if !held || (c.Token != 0 && t.rows[i].token != c.Token) {
			return Result{Code: NotHeld}
		}
		tok := t.rows[i].token
		t.remove(c.Key, i)
		return Result{Code: Released, Token: tok}
	case OpExtend:
		if !held || t.rows[i].token != c.Token {
			return Result{Code: NotHeld}
		}
		t.change(c.Key)
		t.rows[i].leaseMs = c.LeaseMs
		return Result{Code: Extended, Token: c.Token}
	case OpExpire:
		if !held || t.rows[i].token != c.Token {
			return Result{Code: Noop}
		}
		t.remove(c.Key, i)
		return Result{Code: Expired, Token: c.Token}
	}
	return Result{Code: Noop}
}

// change records that a held key is about to change. Its first change
// since the checkpoint finds it held, so the checkpoint has its row.
func (t *table) change(key []byte) {
	if _, ok := t.changed[string(key)]; !ok {
		t.changed[string(key)] = true
	}
}

// insert adds a row, with owner if it is not empty, and returns the key
// string the map keeps, so that other indexes of the key can share it.
func (t *table) insert(key []byte, r row, owner []byte) string {
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = uint32(len(t.rows))
		t.rows = append(t.rows, row{})
	}
	r.owned = len(owner) > 0
	if r.owned {
		if t.owners == nil {
			t.owners = make(map[uint32]string)
		}
		t.owners[i] = string(owner)
	}
	t.rows[i] = r
	k := string(key)
	t.slot[k] = i
	return k
}

// remove frees a held key, and its owner with it. A key granted since the
// checkpoint is back to what the checkpoint says (free), so it is no longer
// changed at all.
func (t *table) remove(key []byte, i uint32) {
	switch stored, ok := t.changed[string(key)]; {
	case !ok:
		t.changed[string(key)] = true
	case !stored:
		delete(t.changed, string(key))
	}
	delete(t.slot, string(key))
	if t.rows[i].owned {
		delete(t.owners, i)
	}
	t.rows[i] = row{}
	t.free = append(t.free, i)
}

// ownerOf is the owner of the row in slot i, "" if it has none.
func (t *table) ownerOf(i uint32) string {
	if !t.rows[i].owned {
		return ""
	}
	return t.owners[i]
}

// get returns key's row and owner, if key is held.
func (t *table) get(key []byte) (row, string, bool) {
	i, ok := t.slot[string(key)]
	if !ok {
		return row{}, "", false
	}
	return t.rows[i], t.ownerOf(i), true
}

func (t *table) len() int { return len(t.slot) }

// each is the iterator Observer.Reset receives. Keys and owners alias the
// maps' strings (read-only) so that handing a million locks to the observer
// does not allocate a million slices.
func (t *table) each(fn func(Lock)) {
	for k, i := range t.slot {
		r := t.rows[i]
		fn(Lock{Key: aliasBytes(k), Token: r.token, LeaseMs: r.leaseMs, Owner: aliasBytes(t.ownerOf(i))})
	}
}

// aliasBytes is s as a read-only byte slice, nil for "", without a copy.
func aliasBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
