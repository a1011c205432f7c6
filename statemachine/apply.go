package statemachine

import "unsafe"

// row is one held lock's value: what pebble stores under the key.
type row struct {
	token   uint64
	leaseMs uint32
}

// table is the in-memory mirror of one shard's pebble table plus its token
// counter. Update applies commands here and only writes pebble, never reads
// it, which keeps the hot path to a map lookup per command.
//
// Rows live in a slab indexed from the map rather than as map values:
// assigning m[string(key)] allocates the key string even when the key is
// already present, so an Extend would allocate; updating rows[i] does not.
type table struct {
	shard uint64
	seq   uint64 // tokens issued so far; the next Grant issues seq+1
	slot  map[string]uint32
	rows  []row
	free  []uint32 // slots of rows released, reused before rows grows
}

func newTable(shard uint64, seq uint64, sizeHint int) *table {
	return &table{
		shard: shard,
		seq:   seq,
		slot:  make(map[string]uint32, sizeHint),
		rows:  make([]row, 0, sizeHint),
	}
}

// change says what apply did to the command's key, i.e. what the pebble batch
// must record for it.
type change uint8

const (
	unchanged change = iota
	put              // the key now holds the returned row
	del              // the key is now free
)

// apply executes one command. It is the whole of baton's lock semantics and
// must stay deterministic: its only inputs are the table and the command.
func (t *table) apply(c *Command) (Result, change, row) {
	i, held := t.slot[string(c.Key)]
	switch c.Op {
	case OpGrant:
		if held {
			return Result{Code: GrantRejected}, unchanged, row{}
		}
		t.seq++
		r := row{token: t.seq<<ShardBits | t.shard, leaseMs: c.LeaseMs}
		t.insert(c.Key, r)
		return Result{Code: Granted, Token: r.token}, put, r
	case OpRelease:
		if !held || (c.Token != 0 && t.rows[i].token != c.Token) {
			return Result{Code: NotHeld}, unchanged, row{}
		}
		tok := t.rows[i].token
		t.remove(c.Key, i)
		return Result{Code: Released, Token: tok}, del, row{}
	case OpExtend:
		if !held || t.rows[i].token != c.Token {
			return Result{Code: NotHeld}, unchanged, row{}
		}
		t.rows[i].leaseMs = c.LeaseMs
		return Result{Code: Extended, Token: c.Token}, put, t.rows[i]
	case OpExpire:
		if !held || t.rows[i].token != c.Token {
			return Result{Code: Noop}, unchanged, row{}
		}
		t.remove(c.Key, i)
		return Result{Code: Expired, Token: c.Token}, del, row{}
	}
	return Result{Code: Noop}, unchanged, row{}
}

func (t *table) insert(key []byte, r row) {
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
		t.rows[i] = r
	} else {
		i = uint32(len(t.rows))
		t.rows = append(t.rows, r)
	}
	t.slot[string(key)] = i
}

func (t *table) remove(key []byte, i uint32) {
	delete(t.slot, string(key))
	t.rows[i] = row{}
	t.free = append(t.free, i)
}

func (t *table) get(key []byte) (row, bool) {
	i, ok := t.slot[string(key)]
	if !ok {
		return row{}, false
	}
	return t.rows[i], true
}

func (t *table) len() int { return len(t.slot) }

// each is the iterator Observer.Reset receives. Keys alias the map's strings
// (read-only) so that handing a million locks to the observer does not
// allocate a million slices.
func (t *table) each(fn func(Lock)) {
	for k, i := range t.slot {
		r := t.rows[i]
		fn(Lock{Key: unsafe.Slice(unsafe.StringData(k), len(k)), Token: r.token, LeaseMs: r.leaseMs})
	}
}
