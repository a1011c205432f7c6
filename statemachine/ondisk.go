package statemachine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

const (
	tablePrefix = 't'
	metaPrefix  = 'm'
	// grantPrefix is the key prefix of a shared grant's row:
	// 'g' shard(u32 BE) keylen(u8) key token(u64 BE). A prefix of its own,
	// not a suffix of the key's row under 't': a key may be any bytes, so
	// no suffix could tell a grant's row from another key's.
	grantPrefix = 'g'
	prefixLen   = 1 + 4
	rowLen      = 8 + 4 // a row's value without its owner, which follows
	// grantKeyLen is what a grant row's key has beyond its prefix and
	// user key: the key's length and the token.
	grantKeyLen = 1 + 8
	metaLen     = 8 + 8 + 8
	// metaLenBeforeFence is the meta of the release before the fence
	// (applied, seq), which Open reads as fence 0.
	metaLenBeforeFence = 8 + 8
	// metaLenVersioned is the meta of a table whose cluster version is 2
	// or more (applied, seq, fence, version); a table never raised keeps
	// metaLen, which a build of level 1 reads.
	metaLenVersioned = metaLen + 8
	// stopEvery is how many rows Open, SaveSnapshot and RecoverFromSnapshot
	// handle between looks at their stop channel: often enough to stop a
	// big table promptly, rarely enough to cost nothing.
	stopEvery = 4096
)

// ErrClosed is returned by Lookup once the state machine is closed (or before
// it is opened).
var ErrClosed = errors.New("statemachine: closed")

// OpenDB opens (creating if needed) the pebble DB in dir that all shards of a
// node share. The options suit a lock table: many small keys and values, a
// write-mostly load (Update never reads pebble), modest memory.
func OpenDB(dir string) (*pebble.DB, error) {
	// Reads are rare (Open, snapshots), so a small cache is enough; the DB
	// holds its own reference once opened.
	cache := pebble.NewCache(8 << 20)
	defer cache.Unref()
	opts := &pebble.Options{
		Cache: cache,
		// Only checkpoints write here (see Update), a few MiB at a time:
		// small memtables keep the memory they pin (outside the Go heap)
		// small too.
		MemTableSize:                4 << 20,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       16,
		LBaseMaxBytes:               64 << 20,
		MaxOpenFiles:                1024,
		// The node also runs Raft and the network loops; one compaction at
		// a time keeps pebble from taking every core.
		MaxConcurrentCompactions: func() int { return 1 },
		FormatMajorVersion:       pebble.FormatNewest,
	}
	opts.Levels = make([]pebble.LevelOptions, 7)
	for i := range opts.Levels {
		l := &opts.Levels[i]
		l.BlockSize = 16 << 10
		l.TargetFileSize = 8 << 20 << i
		l.Compression = pebble.SnappyCompression
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("statemachine: open pebble in %s: %w", dir, err)
	}
	return db, nil
}

// Factory returns the dragonboat constructor for baton's on-disk state
// machine. All shards of a node share db (keys are prefixed by shard id);
// obs is told of every change and may be nil.
//
// Lookup (what NodeHost.SyncRead and StaleRead call) takes a LookupKey and
// returns a LookupResult value. It reads the in-memory table under a
// read-write mutex, so it is safe while dragonboat runs Update or
// RecoverFromSnapshot concurrently; it may see the effects of an Update
// that has not returned yet (those entries are committed in Raft, so this
// is never older than the committed state).
func Factory(db *pebble.DB, obs Observer) sm.CreateOnDiskStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IOnDiskStateMachine {
		return newOnDisk(db, obs, shardID)
	}
}

// onDisk is one shard's replica of the lock table.
//
// dragonboat serializes Open, Update, Sync, PrepareSnapshot,
// RecoverFromSnapshot and Close; Lookup and SaveSnapshot run concurrently with
// them, and the observer reads the table (Table) whenever it holds its
// lock (Observer.Locker). Hence the fields they share: every change of t
// (and of the table it points to) is made under the observer's lock and,
// inside it, mu, which guards t against Lookup; SaveSnapshot uses only its
// own pebble snapshot, and snapMu guards the set of snapshots Close must
// release. The serialized methods read t without a lock: only they change
// it.
type onDisk struct {
	db    *pebble.DB
	obs   Observer
	shard uint64

	tableLo [prefixLen]byte // first key of the shard's table
	tableHi [prefixLen]byte // first key after it
	grantLo [prefixLen]byte // first key of the shard's shared grants
	grantHi [prefixLen]byte // first key after them
	metaKey [prefixLen]byte
	dirKey  [prefixLen]byte // the shard's directory (see dirPrefix)

	mu sync.RWMutex
	t  *table // nil before Open and after Close

	// applied is the last applied Raft index (the meta has the
	// checkpoint's). Written under mu, with t, so that a backup's Lookup
	// reads the two alike; the serialized methods read it without.
	applied uint64

	// uncheckpointed counts the commands applied since the last checkpoint.
	uncheckpointed int

	// Scratch reused by every Update.
	cmds    []Command
	results []Result

	// noObs stands for the observer's lock when there is none.
	noObs sync.Mutex

	snapMu sync.Mutex
	snaps  map[*snapCtx]struct{}
}

func newOnDisk(db *pebble.DB, obs Observer, shard uint64) *onDisk {
	s := &onDisk{db: db, obs: obs, shard: shard, snaps: map[*snapCtx]struct{}{}}
	// A bad shard id still gets keys (truncated) so that nothing here can
	// panic; Open refuses it before any key is used.
	s.tableLo = shardKey(tablePrefix, shard)
	s.tableHi = shardKey(tablePrefix, shard+1)
	s.grantLo = shardKey(grantPrefix, shard)
	s.grantHi = shardKey(grantPrefix, shard+1)
	s.metaKey = shardKey(metaPrefix, shard)
	s.dirKey = shardKey(dirPrefix, shard)
	return s
}

func shardKey(prefix byte, shard uint64) (k [prefixLen]byte) {
	k[0] = prefix
	binary.BigEndian.PutUint32(k[1:], uint32(shard))
	return k
}

// meta is what a shard's checkpoint holds besides its rows: the applied
// index, the token counter, the fence and the cluster version, which the
// meta's row stores (see the package doc's layout), and the directory,
// which has a row of its own (dirPrefix) and is not part of encode's.
type meta struct {
	applied, seq, fence uint64
	level               uint64 // levelNone, or 0 (the same) in a meta built by hand
	// dirVersion and dir are the table's directory (0 and "": never
	// set). A string, so that a meta stays comparable; it aliases the
	// table's dir, which is never changed in place.
	dirVersion uint64
	dir        string
}

// meta is the table's meta at the applied index.
func (t *table) meta(applied uint64) meta {
	return meta{applied: applied, seq: t.seq, fence: t.fence, level: t.level, dirVersion: t.dirVersion, dir: aliasString(t.dir)}
}

// versioned reports whether the meta carries its cluster version: only
// from 2 on, so that a build of level 1 can open the data dir until then.
func (m meta) versioned() bool { return m.level > levelNone }

// encode appends the stored meta to v: metaLen bytes, or metaLenVersioned
// with the version.
func (m meta) encode(v []byte) []byte {
	v = binary.LittleEndian.AppendUint64(v, m.applied)
	v = binary.LittleEndian.AppendUint64(v, m.seq)
	v = binary.LittleEndian.AppendUint64(v, m.fence)
	if m.versioned() {
		v = binary.LittleEndian.AppendUint64(v, m.level)
	}
	return v
}

// decodeMeta reads a stored meta of any length: a meta written before the
// fence existed has none, which is fence 0 (every batch applies), and one
// without a version is of version 1. A versioned meta of version 1 or
// less is not one encode writes: false, as for a bad length.
func decodeMeta(v []byte) (meta, bool) {
	switch len(v) {
	case metaLenBeforeFence, metaLen, metaLenVersioned:
	default:
		return meta{}, false
	}
	m := meta{applied: binary.LittleEndian.Uint64(v), seq: binary.LittleEndian.Uint64(v[8:]), level: levelNone}
	if len(v) >= metaLen {
		m.fence = binary.LittleEndian.Uint64(v[16:])
	}
	if len(v) == metaLenVersioned {
		if m.level = binary.LittleEndian.Uint64(v[24:]); !m.versioned() {
			return meta{}, false
		}
	}
	return m, true
}

// Open implements sm.IOnDiskStateMachine: it loads the shard's table into
// memory and returns the applied index stored with it.
func (s *onDisk) Open(stopc <-chan struct{}) (uint64, error) {
	if s.shard < 1 || s.shard > MaxShards {
		return 0, fmt.Errorf("statemachine: shard id %d out of range 1..%d", s.shard, MaxShards)
	}
	m, found, err := s.readMeta()
	if err != nil {
		return 0, err
	}
	if m.level > FeatureLevel {
		return 0, TooOld(s.shard, m.level)
	}
	t := newTable(s.shard, m.seq, 0)
	t.fence = m.fence
	if found {
		t.level = m.level
	}
	if !found {
		// Rows without meta are what an interrupted RecoverFromSnapshot
		// leaves; the shard starts empty and dragonboat brings it up to date
		// from a snapshot or the log.
		if err := s.dropOrphanRows(); err != nil {
			return 0, err
		}
	} else if err := s.readDir(t); err != nil {
		return 0, err
	} else if err := s.load(t, stopc); err != nil {
		return 0, err
	}
	s.install(t, m.applied)
	return m.applied, nil
}

func (s *onDisk) readMeta() (meta, bool, error) {
	v, closer, err := s.db.Get(s.metaKey[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return meta{}, false, nil
	}
	if err != nil {
		return meta{}, false, fmt.Errorf("statemachine: shard %d: read meta: %w", s.shard, err)
	}
	defer closer.Close()
	m, ok := decodeMeta(v)
	if !ok {
		return meta{}, false, fmt.Errorf("statemachine: shard %d: meta is %d bytes, want %d, %d with a cluster version of 2 or more, or %d (written before the fence)",
			s.shard, len(v), metaLen, metaLenVersioned, metaLenBeforeFence)
	}
	return m, true, nil
}

// dropOrphanRows deletes the shard's rows and directory, if it has any: a
// new shard (the common case) gets no tombstone and no fsync. (A
// directory without a meta is not something this code leaves, as the
// meta and the directory are deleted and written in the same batches, but
// a shard without a meta has no directory whatever the disk says.)
func (s *onDisk) dropOrphanRows() error {
	hasRows := false
	for _, r := range [][2][]byte{{s.tableLo[:], s.tableHi[:]}, {s.grantLo[:], s.grantHi[:]}} {
		it := s.db.NewIter(&pebble.IterOptions{LowerBound: r[0], UpperBound: r[1]})
		hasRows = it.First() || hasRows
		if err := it.Close(); err != nil {
			return fmt.Errorf("statemachine: shard %d: scan table: %w", s.shard, err)
		}
	}
	_, closer, err := s.db.Get(s.dirKey[:])
	hasDir := err == nil
	if hasDir {
		_ = closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("statemachine: shard %d: read directory: %w", s.shard, err)
	}
	if !hasRows && !hasDir {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(s.tableLo[:], s.tableHi[:], nil)
	_ = b.DeleteRange(s.grantLo[:], s.grantHi[:], nil)
	_ = b.Delete(s.dirKey[:], nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("statemachine: shard %d: drop orphan rows: %w", s.shard, err)
	}
	return nil
}

// load reads the shard's rows into t: the keys' rows (exclusive locks and
// shared keys' headers), then the shared grants, each of which must find
// its header, and every header at least one grant.
func (s *onDisk) load(t *table, stopc <-chan struct{}) error {
	var err error
	n := 0
	it := s.db.NewIter(&pebble.IterOptions{LowerBound: s.tableLo[:], UpperBound: s.tableHi[:]})
	for ok := it.First(); ok; ok = it.Next() {
		if n%stopEvery == 0 && stopped(stopc) {
			err = sm.ErrOpenStopped
			break
		}
		n++
		k, v := it.Key()[prefixLen:], it.Value()
		if err = s.checkRow(t, k, v); err != nil {
			break
		}
		tok, leaseMs, owner := decodeRow(v)
		if tok == 0 {
			h := t.insertRow(k, rowHeld|rowShared|rowStored)
			t.addShared(h, leaseMs)
			continue
		}
		t.insert(k, tok, leaseMs, owner, rowStored)
	}
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("statemachine: shard %d: scan table: %w", s.shard, cerr)
	}
	if err != nil {
		return err
	}
	it = s.db.NewIter(&pebble.IterOptions{LowerBound: s.grantLo[:], UpperBound: s.grantHi[:]})
	for ok := it.First(); ok; ok = it.Next() {
		if n%stopEvery == 0 && stopped(stopc) {
			err = sm.ErrOpenStopped
			break
		}
		n++
		var g grantRow
		if g, err = s.checkGrant(t, it.Key()[prefixLen:], it.Value()); err != nil {
			break
		}
		var h uint32
		if h, err = s.checkHolder(t, g); err != nil {
			break
		}
		t.newGrant(h, g.token, g.leaseMs, g.owner, rowStored)
	}
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("statemachine: shard %d: scan shared grants: %w", s.shard, cerr)
	}
	if err != nil {
		return err
	}
	for h, sk := range t.shared {
		if len(sk.grants) == 0 {
			return fmt.Errorf("statemachine: shard %d: shared key %q has no grant", s.shard, t.keyOf(h))
		}
	}
	return nil
}

// checkRow refuses a stored row of a key that this code could not have
// written: an exclusive lock's, or a shared key's header (token 0,
// permits where the lease is, no owner), which a table of a cluster
// version below LevelShared cannot have.
func (s *onDisk) checkRow(t *table, k, v []byte) error {
	if !rowShapeOK(k, v) {
		return fmt.Errorf("statemachine: shard %d: corrupt row %q", s.shard, k)
	}
	tok, permits, _ := decodeRow(v)
	switch {
	case tok == 0 && (len(v) != rowLen || permits == 0 || permits > MaxPermits || t.level < LevelShared):
		return fmt.Errorf("statemachine: shard %d: corrupt shared key %q (%d bytes, permits %d, cluster version %d)", s.shard, k, len(v), permits, t.level)
	case tok != 0 && !t.validToken(tok):
		return fmt.Errorf("statemachine: shard %d: row %q has token %d not issued by this shard", s.shard, k, tok)
	}
	return nil
}

// grantRow is a shared grant's stored row, decoded (its slices alias the
// row).
type grantRow struct {
	key, owner []byte
	token      uint64
	leaseMs    uint32
}

// checkGrant decodes a shared grant's stored key (without its prefix) and
// value, and refuses one this code could not have written: of a bad shape,
// whose key and value disagree on the token, or with a token the shard did
// not issue.
func (s *onDisk) checkGrant(t *table, k, v []byte) (grantRow, error) {
	var g grantRow
	if len(k) < grantKeyLen+1 || int(k[0]) != len(k)-grantKeyLen || !rowShapeOK(k[1:len(k)-8], v) {
		return g, fmt.Errorf("statemachine: shard %d: corrupt shared grant %q", s.shard, k)
	}
	g.key = k[1 : len(k)-8]
	g.token, g.leaseMs, g.owner = decodeRow(v)
	if binary.BigEndian.Uint64(k[len(k)-8:]) != g.token || !t.validToken(g.token) {
		return g, fmt.Errorf("statemachine: shard %d: shared grant of %q has token %d, not issued by this shard or not its key's", s.shard, g.key, g.token)
	}
	return g, nil
}

// checkHolder returns the slot of the header of g's key, and refuses g as
// one more holder of it if the key is not shared, has all its permits
// taken, or a grant of the same owner: what no table this code applied
// has.
func (s *onDisk) checkHolder(t *table, g grantRow) (uint32, error) {
	h, ok := t.find(g.key)
	if !ok || t.rows[h].tok&rowShared == 0 {
		return 0, fmt.Errorf("statemachine: shard %d: shared grant %d of %q, which is not a shared key", s.shard, g.token, g.key)
	}
	sk := t.shared[h]
	if uint32(len(sk.grants)) >= sk.permits {
		return 0, fmt.Errorf("statemachine: shard %d: shared key %q has more grants than its %d permits", s.shard, g.key, sk.permits)
	}
	if _, dup := sk.owners[string(g.owner)]; len(g.owner) > 0 && dup {
		return 0, fmt.Errorf("statemachine: shard %d: shared key %q has two grants of owner %q", s.shard, g.key, g.owner)
	}
	return h, nil
}

// rowShapeOK reports whether a stored key (without its prefix) and value
// have the lengths of the layout in the package doc.
func rowShapeOK(k, v []byte) bool {
	return len(k) >= 1 && len(k) <= MaxKeyLen && len(v) >= rowLen && len(v) <= rowLen+MaxOwnerLen
}

// decodeRow splits a stored value (of a valid shape) into its token, lease
// and owner (nil for none; it aliases v). A value written before owners
// existed is rowLen bytes, so it decodes to a row without owner.
func decodeRow(v []byte) (tok uint64, leaseMs uint32, owner []byte) {
	tok, leaseMs = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint32(v[8:])
	if len(v) == rowLen {
		return tok, leaseMs, nil
	}
	return tok, leaseMs, v[rowLen:]
}

// validToken reports whether tok can have been issued by the shard, given
// its counter.
func (t *table) validToken(tok uint64) bool {
	return tok&MaxShards == t.shard && tok>>ShardBits >= 1 && tok>>ShardBits <= t.seq
}

func stopped(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// install makes t, at applied, the shard's table, and tells the observer,
// under its lock: from the observer's Reset on, it reads t.
func (s *onDisk) install(t *table, applied uint64) {
	lk := s.locker()
	lk.Lock()
	defer lk.Unlock()
	s.mu.Lock()
	s.t, s.applied = t, applied
	s.mu.Unlock()
	if s.obs != nil {
		s.obs.Reset(s.shard, Table{t})
	}
}

// Update implements sm.IOnDiskStateMachine: it applies the entries to the
// in-memory table one at a time (table.applyBatch, which also decides the
// fence) and tells the observer of every decodable entry, fences and
// Fenced batches included, each under the observer's lock from its change
// to the end of its Applied; pebble is written only when a checkpoint
// bound is reached (checkpointKeys, checkpointCommands; see the package
// doc), after the observer was told, and an error of that checkpoint is
// Update's (the table and the observer have the entries; the next
// checkpoint writes them). Result.Value is the entry's number of commands
// (0 for a fence, an empty or an undecodable entry), whatever their
// results.
func (s *onDisk) Update(ents []sm.Entry) ([]sm.Entry, error) {
	if len(ents) == 0 {
		return ents, nil
	}
	if stageOn {
		stageUpdate(s.shard, ents) // the probe build's trace; nothing otherwise
	}
	cmds, results := s.cmds[:0], s.results[:0]
	t := s.t
	if t == nil {
		return ents, ErrClosed
	}
	lk := s.locker()
	for i := range ents {
		e := &ents[i]
		e.Result = sm.Result{}
		if len(e.Cmd) == 0 {
			continue
		}
		start := len(cmds)
		var h Header
		var err error
		if h, cmds, err = DecodeBatch(e.Cmd, cmds); err != nil {
			// Every replica rejects the same bytes alike, so skipping the
			// entry keeps them identical.
			continue
		}
		h.Size = len(e.Cmd)
		// The entry's change and its Applied under the observer's lock,
		// so that the observer never sees one without the other.
		lk.Lock()
		s.mu.Lock()
		results = t.applyBatch(h, cmds[start:], results)
		s.applied = e.Index
		s.mu.Unlock()
		if s.obs != nil {
			s.obs.Applied(s.shard, e.Index, h, cmds[start:], results[start:])
		}
		t.endEntry()
		lk.Unlock()
		e.Result.Value = uint64(len(cmds) - start)
	}
	s.mu.Lock()
	s.applied = ents[len(ents)-1].Index
	s.mu.Unlock()
	s.uncheckpointed += len(cmds)

	var err error
	if t.dirty >= checkpointKeys || s.uncheckpointed >= checkpointCommands {
		// Synced, so that it bounds what a crash makes dragonboat apply
		// again: pebble may keep a small unsynced batch in its WAL buffer,
		// and a kill -9 would lose it. One fsync per 65,536 keys or a
		// million commands costs nothing measurable.
		err = s.checkpoint(pebble.Sync)
	}
	// Drop the keys, which alias dragonboat's entries, so that they can be
	// collected before the next Update.
	clear(cmds)
	s.cmds, s.results = cmds[:0], results[:0]
	return ents, err
}

// locker is the observer's lock of the shard's table (see
// Observer.Locker), or a lock nobody else takes when there is no observer.
func (s *onDisk) locker() sync.Locker {
	if s.obs == nil {
		return &s.noObs
	}
	return s.obs.Locker(s.shard)
}

// Update writes a checkpoint of its own when either bound is reached, so
// that however long dragonboat waits between Syncs (minutes), the changed
// set (and the batch that writes it) stays a few MiB, and a restart after
// a crash applies at most about a million commands again (a fraction of a
// second) before the node serves.
const (
	checkpointKeys     = 1 << 16 // keys changed since the last checkpoint
	checkpointCommands = 1 << 20 // commands applied since the last checkpoint
)

// checkpoint writes, in one pebble batch, the row of every key changed since
// the last checkpoint (a delete for a key that is free now and was held
// then), the meta (applied index, seq, fence, cluster version) and, if it
// changed since the last checkpoint, the directory. Only the serialized
// methods call it, so the table cannot change under it; Lookup only reads.
//
// Until the next checkpoint pebble lags the table; that is safe because
// the Raft log keeps every entry after the index in the meta: dragonboat
// compacts the log only up to an index it has called Sync at, and Open
// returns the checkpoint's index, from which dragonboat applies the log
// again.
func (s *onDisk) checkpoint(opts *pebble.WriteOptions) error {
	t := s.t
	b := s.db.NewBatch()
	defer b.Close()
	t.eachChanged(func(i uint32, held bool) {
		switch {
		case held:
			s.writeRow(b, t, i)
		case t.rows[i].tok&rowGrant != 0:
			s.deleteGrant(b, t.keyOf(i), t.token(i))
		default:
			s.deleteRow(b, t.keyOf(i))
		}
	})
	if t.dirChanged {
		s.putDir(b, t.dirVersion, t.dir)
	}
	s.putMeta(b, t.meta(s.applied))
	if err := b.Commit(opts); err != nil {
		// The changes stay recorded: the next checkpoint writes them.
		return fmt.Errorf("statemachine: shard %d: checkpoint: %w", s.shard, err)
	}
	// Ghosts leave the index and the arena: neither the observer nor
	// Lookup may read them meanwhile.
	lk := s.locker()
	lk.Lock()
	s.mu.Lock()
	t.checkpointed()
	s.mu.Unlock()
	lk.Unlock()
	s.uncheckpointed = 0
	return nil
}

// writeRow adds the row of t's held slot i to b, of whichever kind: an
// exclusive lock's, a shared key's header or a shared grant's.
func (s *onDisk) writeRow(b *pebble.Batch, t *table, i uint32) {
	switch r := &t.rows[i]; {
	case r.tok&rowGrant != 0:
		s.putGrant(b, t.keyOf(i), t.token(i), r.leaseMs, t.ownerOf(i))
	case r.tok&rowShared != 0:
		s.putRow(b, t.keyOf(i), 0, t.shared[i].permits, "")
	default:
		s.putRow(b, t.keyOf(i), t.token(i), r.leaseMs, t.ownerOf(i))
	}
}

// grantKey writes the key of key's shared grant tok into dst, which is
// prefixLen+grantKeyLen+len(key) bytes long.
func (s *onDisk) grantKey(dst, key []byte, tok uint64) {
	copy(dst, s.grantLo[:])
	dst[prefixLen] = byte(len(key))
	copy(dst[prefixLen+1:], key)
	binary.BigEndian.PutUint64(dst[prefixLen+1+len(key):], tok)
}

// putGrant adds the row of key's shared grant tok to b, with its lease and
// owner ("" for none).
func (s *onDisk) putGrant(b *pebble.Batch, key []byte, tok uint64, leaseMs uint32, owner string) {
	op := b.SetDeferred(prefixLen+grantKeyLen+len(key), rowLen+len(owner))
	s.grantKey(op.Key, key, tok)
	binary.LittleEndian.PutUint64(op.Value, tok)
	binary.LittleEndian.PutUint32(op.Value[8:], leaseMs)
	copy(op.Value[rowLen:], owner)
	_ = op.Finish()
}

// deleteGrant adds the deletion of key's shared grant tok to b.
func (s *onDisk) deleteGrant(b *pebble.Batch, key []byte, tok uint64) {
	op := b.DeleteDeferred(prefixLen + grantKeyLen + len(key))
	s.grantKey(op.Key, key, tok)
	_ = op.Finish()
}

// putRow adds key's row and owner ("" for none) to b, in the layout of the
// package doc: a shared key's header is token 0, with its permits for the
// lease.
func (s *onDisk) putRow(b *pebble.Batch, key []byte, tok uint64, leaseMs uint32, owner string) {
	op := b.SetDeferred(prefixLen+len(key), rowLen+len(owner))
	copy(op.Key, s.tableLo[:])
	copy(op.Key[prefixLen:], key)
	binary.LittleEndian.PutUint64(op.Value, tok)
	binary.LittleEndian.PutUint32(op.Value[8:], leaseMs)
	copy(op.Value[rowLen:], owner)
	_ = op.Finish() // cannot fail: the batch is not indexed
}

// deleteRow adds the deletion of key's row to b.
func (s *onDisk) deleteRow(b *pebble.Batch, key []byte) {
	op := b.DeleteDeferred(prefixLen + len(key))
	copy(op.Key, s.tableLo[:])
	copy(op.Key[prefixLen:], key)
	_ = op.Finish()
}

// putMeta adds the shard's meta to b, always in the layout with the fence,
// and with the cluster version once it is 2 or more.
func (s *onDisk) putMeta(b *pebble.Batch, m meta) {
	var v [metaLenVersioned]byte
	_ = b.Set(s.metaKey[:], m.encode(v[:0]), nil)
}

// Lookup implements sm.IOnDiskStateMachine: a LookupKey answers a
// LookupResult from the in-memory table (see Factory on concurrency), a
// BackupQuery a *ShardBackup.
func (s *onDisk) Lookup(q interface{}) (interface{}, error) {
	var k LookupKey
	switch q := q.(type) {
	case LookupKey:
		k = q
	case BackupQuery:
		return s.captureBackup()
	default:
		return nil, fmt.Errorf("statemachine: Lookup takes a LookupKey or a BackupQuery, not %T", q)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.t == nil {
		return nil, ErrClosed
	}
	r, _ := s.t.get(k)
	return r, nil
}

// Sync implements sm.IOnDiskStateMachine: a checkpoint, fsynced (which
// also makes every earlier checkpoint durable: pebble's WAL is in order).
func (s *onDisk) Sync() error {
	if s.t == nil {
		return nil // Close wrote the last checkpoint
	}
	return s.checkpoint(pebble.Sync)
}

// Close implements sm.IOnDiskStateMachine. It writes a synced checkpoint, so
// that a clean restart applies nothing twice, then drops the in-memory table and
// any snapshot not yet saved; the shared DB stays open.
func (s *onDisk) Close() error {
	var err error
	if s.t != nil {
		err = s.checkpoint(pebble.Sync)
	}
	s.mu.Lock()
	s.t = nil
	s.mu.Unlock()
	s.snapMu.Lock()
	pending := make([]*snapCtx, 0, len(s.snaps))
	for c := range s.snaps {
		pending = append(pending, c)
	}
	s.snapMu.Unlock()
	for _, c := range pending {
		s.release(c)
	}
	return err
}
