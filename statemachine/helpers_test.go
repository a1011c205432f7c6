package statemachine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

func openTestDB(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	db, err := OpenDB(dir)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// newTestDB opens a DB in a fresh temporary directory, closed at cleanup.
func newTestDB(t testing.TB) *pebble.DB {
	t.Helper()
	db := openTestDB(t, t.TempDir())
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openSM creates and opens shard's state machine over db.
func openSM(t testing.TB, db *pebble.DB, obs Observer, shard uint64) (*onDisk, uint64) {
	t.Helper()
	s := Factory(db, obs)(shard, 1).(*onDisk)
	applied, err := s.Open(make(chan struct{}))
	if err != nil {
		t.Fatalf("Open shard %d: %v", shard, err)
	}
	return s, applied
}

// syncSM writes and fsyncs s's checkpoint, as dragonboat's Sync does.
func syncSM(t testing.TB, s *onDisk) {
	t.Helper()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

func grant(key string, lease uint32) Command {
	return Command{Op: OpGrant, Key: []byte(key), LeaseMs: lease}
}

// grantBy is a Grant with an owner.
func grantBy(key string, lease uint32, owner string) Command {
	return Command{Op: OpGrant, Key: []byte(key), LeaseMs: lease, Owner: []byte(owner)}
}

// grantShared is a shared Grant of one of permits holds, by owner ("" for
// none).
func grantShared(key string, permits, lease uint32, owner string) Command {
	c := Command{Op: OpGrant, Key: []byte(key), LeaseMs: lease, Permits: permits}
	if owner != "" {
		c.Owner = []byte(owner)
	}
	return c
}

func release(key string, tok uint64) Command {
	return Command{Op: OpRelease, Key: []byte(key), Token: tok}
}

func extend(key string, tok uint64, lease uint32) Command {
	return Command{Op: OpExtend, Key: []byte(key), Token: tok, LeaseMs: lease}
}

func expire(key string, tok uint64) Command {
	return Command{Op: OpExpire, Key: []byte(key), Token: tok}
}

// encode builds one entry's bytes.
func encode(h Header, cmds ...Command) []byte {
	var b Batch
	for _, c := range cmds {
		b.Append(c)
	}
	return slices.Clone(b.Seal(h))
}

// encodeV1 builds one entry in version 1 of the encoding (no owners), as
// the code before owners did; written out here, not with Batch, so that it
// is an oracle for what DecodeBatch must still read. Owners are dropped.
func encodeV1(h Header, cmds ...Command) []byte {
	return encodeVersion(encVersionNoOwners, h, cmds...)
}

// encodeV2 is encodeV1 for version 2: a Grant with an owner is wire op 5
// with the owner after lease_ms. It writes version 2 whatever the
// commands, so that it can build entries DecodeBatch must reject.
func encodeV2(h Header, cmds ...Command) []byte {
	return encodeVersion(encVersion, h, cmds...)
}

func encodeVersion(version byte, h Header, cmds ...Command) []byte {
	buf := []byte{version}
	buf = binary.LittleEndian.AppendUint64(buf, h.Proposer)
	seq := h.Seq
	switch version {
	case encVersionReport, encVersionRaise:
		seq = h.Level // the level takes the seq field
	case encVersionDirectory:
		seq = h.Base // and so does a directory write's base
	}
	buf = binary.LittleEndian.AppendUint64(buf, seq)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(cmds)))
	if version == encVersionDirectory {
		// The blob, whatever its length, so that the tests can build
		// entries DecodeBatch must reject.
		buf = binary.AppendUvarint(buf, uint64(len(h.Blob)))
		buf = append(buf, h.Blob...)
	}
	for _, c := range cmds {
		// Version 8 is version 2 plus op 6, a shared Grant: permits
		// after the key, and an owner length whatever the owner.
		shared := version == encVersionShared && c.Op == OpGrant && c.Permits > 0
		owned := !shared && version >= 2 && c.Op == OpGrant && len(c.Owner) > 0
		switch {
		case shared:
			buf = append(buf, 6)
		case owned:
			buf = append(buf, 5)
		default:
			buf = append(buf, byte(c.Op))
		}
		buf = binary.AppendUvarint(buf, uint64(len(c.Key)))
		buf = append(buf, c.Key...)
		if c.Op != OpGrant {
			buf = binary.AppendUvarint(buf, c.Token)
		}
		if shared {
			buf = binary.AppendUvarint(buf, uint64(c.Permits))
		}
		if c.Op == OpGrant || c.Op == OpExtend {
			buf = binary.AppendUvarint(buf, uint64(c.LeaseMs))
		}
		if owned || shared {
			buf = binary.AppendUvarint(buf, uint64(len(c.Owner)))
			buf = append(buf, c.Owner...)
		}
	}
	return buf
}

// encodeSnapshot writes a snapshot stream of version 1 (no owners, which
// are dropped) or 2 by hand, as an oracle for readSnapshot: the locks are
// written in key order, whatever order they come in.
func encodeSnapshot(version byte, shard, applied, seq uint64, locks []Lock) []byte {
	return encodeStream(version, shard, meta{applied: applied, seq: seq}, locks)
}

// encodeSnapshotV3 is encodeSnapshot for version 3, the stream of a table
// with a fence (any fence, so that it can build streams readSnapshot must
// reject).
func encodeSnapshotV3(shard, applied, seq, fence uint64, locks []Lock) []byte {
	return encodeStream(snapVersionFence, shard, meta{applied: applied, seq: seq, fence: fence}, locks)
}

// encodeStream writes a stream of any version: m's fence from version 3 on
// (and dropped before), its level from version 4 on, its directory from
// version 5 on, owner lengths from version 2 on, permits from version 6
// on. The records are in key order, then token order (a shared key's
// grants).
func encodeStream(version byte, shard uint64, m meta, locks []Lock) []byte {
	locks = slices.Clone(locks)
	slices.SortFunc(locks, func(a, b Lock) int {
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	buf := append([]byte(snapMagic), version)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(shard))
	buf = binary.LittleEndian.AppendUint64(buf, m.applied)
	buf = binary.LittleEndian.AppendUint64(buf, m.seq)
	if version >= 3 {
		buf = binary.LittleEndian.AppendUint64(buf, m.fence)
	}
	if version >= 4 {
		buf = binary.LittleEndian.AppendUint64(buf, m.level)
	}
	if version >= 5 {
		buf = binary.LittleEndian.AppendUint64(buf, m.dirVersion)
		buf = binary.AppendUvarint(buf, uint64(len(m.dir)))
		buf = append(buf, m.dir...)
	}
	for _, l := range locks {
		buf = binary.AppendUvarint(buf, uint64(len(l.Key)))
		buf = append(buf, l.Key...)
		buf = binary.AppendUvarint(buf, l.Token)
		buf = binary.AppendUvarint(buf, uint64(l.LeaseMs))
		if version >= 2 {
			buf = binary.AppendUvarint(buf, uint64(len(l.Owner)))
			buf = append(buf, l.Owner...)
		}
		if version >= 6 {
			buf = binary.AppendUvarint(buf, uint64(l.Permits))
		}
	}
	buf = append(buf, 0)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(locks)))
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, crcTable))
}

// entry is a batch of proposer 7 at index, its seq the index.
func entry(index uint64, cmds ...Command) sm.Entry {
	return entryBy(index, 7, cmds...)
}

// entryBy is entry for another proposer.
func entryBy(index, proposer uint64, cmds ...Command) sm.Entry {
	return sm.Entry{Index: index, Cmd: encode(Header{Proposer: proposer, Seq: index}, cmds...)}
}

// fenceEntry is proposer's fence at index, its seq the index.
func fenceEntry(index, proposer uint64) sm.Entry {
	return sm.Entry{Index: index, Cmd: encode(Header{Proposer: proposer, Seq: index, Fence: true})}
}

// raiseEntry is replica 1's raise of the cluster version to level, at
// index.
func raiseEntry(index, level uint64) sm.Entry {
	return sm.Entry{Index: index, Cmd: encode(Header{Proposer: 1, Raise: true, Level: level})}
}

// dirEntry is replica 2's directory write of blob on base, at index.
func dirEntry(index, base uint64, blob string) sm.Entry {
	return sm.Entry{Index: index, Cmd: SealDirectory(2, base, []byte(blob))}
}

// update applies ents (cloned, so that callers can reuse them) and returns
// the per-entry Result.Value.
func update(t testing.TB, s *onDisk, ents ...sm.Entry) []uint64 {
	t.Helper()
	in := slices.Clone(ents)
	out, err := s.Update(in)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	vals := make([]uint64, len(out))
	for i, e := range out {
		vals[i] = e.Result.Value
	}
	return vals
}

// applied is one Observer.Applied call, copied.
type applied struct {
	shard, index uint64
	h            Header
	cmds         []Command
	results      []Result
}

// outcome is r without its slot: what the tests compare (slots are the
// table's business, checked by the index tests).
func outcome(r Result) Result {
	r.Slot = 0
	return r
}

// outcomes is outcome of each result, in place.
func outcomes(rs []Result) []Result {
	for i := range rs {
		rs[i] = outcome(rs[i])
	}
	return rs
}

// recorder is an Observer that keeps copies of what it was told. It checks
// that the state machine holds the table's lock (Locker) for every call.
type recorder struct {
	table   sync.Mutex // what Locker returns, for every shard
	mu      sync.Mutex
	resets  map[uint64]map[string]Lock // shard -> the locks of its last Reset
	applied []applied
	sizes   []int // Header.Size of each call in applied
}

func (r *recorder) Locker(uint64) sync.Locker { return &r.table }

// mustHoldTable panics if the table's lock is free: the state machine
// called the observer without it.
func (r *recorder) mustHoldTable(call string) {
	if r.table.TryLock() {
		r.table.Unlock()
		panic("statemachine called " + call + " without the table's lock")
	}
}

func newRecorder() *recorder { return &recorder{resets: map[uint64]map[string]Lock{}} }

func (r *recorder) Reset(shard uint64, t Table) {
	r.mustHoldTable("Reset")
	locks := map[string]Lock{}
	t.Locks(func(l Lock) {
		l.Key = bytes.Clone(l.Key)
		l.Owner = bytes.Clone(l.Owner)
		locks[string(l.Key)] = l
	})
	r.mu.Lock()
	r.resets[shard] = locks
	r.mu.Unlock()
}

func (r *recorder) Applied(shard, index uint64, h Header, cmds []Command, results []Result) {
	r.mustHoldTable("Applied")
	// The tests compare batch headers as proposed; the size the state
	// machine adds is kept apart (sizes).
	size := h.Size
	h.Size = 0
	h.Blob = bytes.Clone(h.Blob) // it aliases the entry
	a := applied{shard: shard, index: index, h: h}
	if len(results) > 0 { // nil for an entry without commands, to compare easily
		a.results = outcomes(slices.Clone(results))
	}
	for _, c := range cmds {
		c.Key = bytes.Clone(c.Key)
		c.Owner = bytes.Clone(c.Owner)
		a.cmds = append(a.cmds, c)
	}
	r.mu.Lock()
	r.applied = append(r.applied, a)
	r.sizes = append(r.sizes, size)
	r.mu.Unlock()
}

func (r *recorder) calls() []applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied)
}

func (r *recorder) lastReset(shard uint64) map[string]Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resets[shard]
}

// scan returns every key and value in db in [lo, hi) (all of it for nil
// bounds) as "key=value" lines, for whole-table comparisons.
func scan(t testing.TB, db *pebble.DB, lo, hi []byte) []string {
	t.Helper()
	it := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, fmt.Sprintf("%x=%x", it.Key(), it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scanShard returns the shard's table, shared grant and meta rows.
func scanShard(t testing.TB, db *pebble.DB, shard uint64) []string {
	lo, hi := shardKey(tablePrefix, shard), shardKey(tablePrefix, shard+1)
	glo, ghi := shardKey(grantPrefix, shard), shardKey(grantPrefix, shard+1)
	m := shardKey(metaPrefix, shard)
	out := scan(t, db, lo[:], hi[:])
	out = append(out, scan(t, db, glo[:], ghi[:])...)
	return append(out, scan(t, db, m[:], append(m[:], 0))...)
}

// lockState is one held lock as tests compare it: its row's values and
// its owner.
type lockState struct {
	token   uint64
	leaseMs uint32
	owner   string
}

// tableLocks returns a table as key -> lock; a shared grant is named by
// sharedName.
func tableLocks(tb *table) map[string]lockState {
	out := map[string]lockState{}
	tb.each(func(l Lock) {
		name := string(l.Key)
		if l.Permits > 0 {
			name = sharedName(name, l.Permits, l.Token)
		}
		out[name] = lockState{token: l.Token, leaseMs: l.LeaseMs, owner: string(l.Owner)}
	})
	return out
}

// sharedName is the name tableLocks gives a shared grant of key: the key,
// its permits and the grant's token, so that a key's grants are told
// apart and permits compared.
func sharedName(key string, permits uint32, tok uint64) string {
	return fmt.Sprintf("%s/S%d#%d", key, permits, tok)
}

// changedKeys returns the table's dirty rows as key -> whether the
// checkpoint has a row for the key (to overwrite or delete).
func changedKeys(tb *table) map[string]bool {
	out := map[string]bool{}
	tb.eachChanged(func(i uint32, _ bool) {
		out[string(tb.keyOf(i))] = tb.rows[i].tok&rowStored != 0
	})
	return out
}

// checkOwners checks the table's owner index: exactly the held rows marked
// owned have an entry in owners, and none is empty or too long; and the
// shared keys' (checkShared).
func checkOwners(t testing.TB, tb *table) {
	t.Helper()
	checkShared(t, tb)
	owned := 0
	for j := range tb.rows {
		i := uint32(j)
		if tb.rows[i].tok&rowHeld == 0 {
			continue
		}
		o, ok := tb.owners[i]
		if owned := tb.rows[i].tok&rowOwned != 0; ok != owned {
			t.Fatalf("slot %d: owned %v but owners has it: %v", i, owned, ok)
		}
		if ok && (o == "" || len(o) > MaxOwnerLen) {
			t.Fatalf("slot %d: owner %q", i, o)
		}
		if ok {
			owned++
		}
	}
	if owned != len(tb.owners) {
		t.Fatalf("owners has %d entries, %d held rows are owned", len(tb.owners), owned)
	}
}

// locks returns the state machine's in-memory table as key -> lock.
func locks(s *onDisk) map[string]lockState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return tableLocks(s.t)
}

// checkShared checks the table's shared keys against its rows: every held
// header has its sharedKey, with 1..permits grants, each a held grant row
// of that header with that token, the owners index has exactly the owned
// ones, under their owners; every held grant row is in its header's
// index; held counts the grants; no ghost grant is held or owned.
func checkShared(t testing.TB, tb *table) {
	t.Helper()
	grants, exclusive := 0, 0
	for j := range tb.rows {
		i := uint32(j)
		r := tb.rows[i]
		switch {
		case r.tok&rowGrant != 0 && r.tok&rowHeld == 0:
			if r.tok&(rowOwned|rowShared) != 0 {
				t.Fatalf("slot %d: a ghost grant with flags %b", i, r.tok&rowFlags)
			}
		case r.tok&rowHeld == 0:
			if r.tok&(rowShared|rowOwned) != 0 {
				t.Fatalf("slot %d: a row not held with flags %b", i, r.tok&rowFlags)
			}
		case r.tok&rowShared != 0:
			sk := tb.shared[i]
			if sk == nil || r.tok&(rowGrant|rowOwned) != 0 || r.tok&^rowFlags != 0 || r.leaseMs != 0 {
				t.Fatalf("slot %d: header %+v, shared %+v", i, r, sk)
			}
			if n := uint32(len(sk.grants)); n == 0 || n > sk.permits || sk.permits > MaxPermits {
				t.Fatalf("shared key %q: %d grants of %d permits", tb.keyOf(i), n, sk.permits)
			}
			owned := 0
			for tok, g := range sk.grants {
				if gr := tb.rows[g]; gr.tok&(rowHeld|rowGrant) != rowHeld|rowGrant || gr.key != i || tb.token(g) != tok {
					t.Fatalf("shared key %q: grant %d in slot %d is %+v", tb.keyOf(i), tok, g, gr)
				}
				if o := tb.ownerOf(g); o != "" {
					owned++
					if sk.owners[o] != g {
						t.Fatalf("shared key %q: owner %q of slot %d is indexed at %d", tb.keyOf(i), o, g, sk.owners[o])
					}
				}
			}
			if owned != len(sk.owners) {
				t.Fatalf("shared key %q: %d owned grants, %d in its owner index", tb.keyOf(i), owned, len(sk.owners))
			}
			if s, ok := tb.find(tb.keyOf(i)); !ok || s != i {
				t.Fatalf("shared key %q: its header %d is not in the index (%d %v)", tb.keyOf(i), i, s, ok)
			}
		case r.tok&rowGrant != 0:
			grants++
			h := tb.rows[r.key]
			if h.tok&(rowHeld|rowShared) != rowHeld|rowShared || tb.shared[r.key].grants[tb.token(i)] != i {
				t.Fatalf("slot %d: a grant of header %d, which does not have it", i, r.key)
			}
		default:
			exclusive++
		}
	}
	n := 0
	for h, sk := range tb.shared {
		if tb.rows[h].tok&rowShared == 0 {
			t.Fatalf("shared has slot %d, which is no header", h)
		}
		n += len(sk.grants)
	}
	if n != grants || tb.held != grants+exclusive {
		t.Fatalf("%d grant rows, %d in the shared keys; held %d, want %d", grants, n, tb.held, grants+exclusive)
	}
}
