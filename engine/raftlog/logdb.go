package raftlog

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/baton-dev/baton/engine/internal/durable"
	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/baton-dev/baton/engine/internal/stepworkers"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// TypeName is the name of this store, returned by Factory.Name and
// LogDB.Name. NodeHost records it in its data directory and refuses to open
// that directory later with a store of another name, which is what keeps
// dragonboat's default store and this one (whose formats differ) from
// reading each other's data.
const TypeName = "baton-raftlog"

// LogDB is a Raft log store for dragonboat (a raftio.ILogDB) on a single
// pebble instance, with the semantics of dragonboat's default store except
// that a save whose only change is a commit index is not synced (see the
// package documentation).
//
// Concurrency: reads (IterateEntries, ReadRaftState, GetSnapshot,
// GetBootstrapInfo, ListNodeInfo) may run at any time, alongside anything;
// writes for different replicas may run at the same time; writes for one
// replica come one at a time, as dragonboat makes them (SaveRaftState and
// RemoveEntriesTo from the replica's step worker, ImportSnapshot and
// RemoveNodeData only while the replica is not running), with one overlap
// allowed because dragonboat has it: SaveSnapshots, from the snapshot
// worker, during a SaveRaftState of the same replica (the newest snapshot
// wins whatever the timing). SaveRaftState calls with the same worker id
// are serialised by a mutex of that worker's context, which dragonboat never
// contends. Close must come after every other call has returned.
type LogDB struct {
	db *pebble.DB

	cache   *cache
	workers *stepworkers.Contexts[saveContext]

	compactor *compactor
	busy      *busyMonitor
	closed    atomic.Bool

	// saves counts the SaveRaftState calls that wrote something, synced or
	// not (tests see the sync policy at work), and tells Options.OnSave.
	saves *savecall.Saves
}

var _ raftio.ILogDB = (*LogDB)(nil)

// Open opens the store in dir, creating it (and its missing parents) if
// needed.
func Open(dir string, opts Options) (*LogDB, error) {
	fs := opts.fs
	if fs == nil {
		fs = vfs.Default
	}
	if err := durable.MkdirAll(fs, dir); err != nil {
		return nil, fmt.Errorf("raftlog: create %s: %w", dir, err)
	}
	walDir := ""
	if opts.WALDir != "" && opts.WALDir != dir {
		if err := durable.MkdirAll(fs, opts.WALDir); err != nil {
			return nil, fmt.Errorf("raftlog: create %s: %w", opts.WALDir, err)
		}
		walDir = opts.WALDir
	}
	busy := newBusyMonitor(opts.Callback)
	prefill := prefillFS{FS: fs, walDir: dir, size: walPrefillSize}
	if walDir != "" {
		prefill.walDir = walDir
	}
	if opts.walPrefill != 0 {
		prefill.size = opts.walPrefill
	}
	db, err := pebble.Open(dir, pebbleOptions(prefill, walDir, busy.events()))
	if err != nil {
		return nil, fmt.Errorf("raftlog: open pebble in %s: %w", dir, err)
	}
	l := &LogDB{
		db:        db,
		cache:     newCache(),
		workers:   stepworkers.New(opts.Workers, func() *saveContext { return newSaveContext(db) }),
		compactor: newCompactor(db),
		busy:      busy,
		saves:     savecall.NewSaves(opts.OnSave),
	}
	busy.start(db.Metrics)
	return l, nil
}

// Name returns TypeName.
func (l *LogDB) Name() string { return TypeName }

// BinaryFormat returns raftio.PlainLogDBBinVersion, the version dragonboat
// gives a store that keeps one record per entry (its batched format, with
// several entries per record, is raftio.LogDBBinVersion). NodeHost records
// it beside TypeName and checks it on every start.
func (l *LogDB) BinaryFormat() uint32 { return raftio.PlainLogDBBinVersion }

// Close stops the background compactions (waiting for a running one) and
// closes pebble. Closing an already closed store does nothing.
func (l *LogDB) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	l.compactor.close()
	l.busy.close()
	return l.db.Close()
}

// errClosed is returned by CompactEntriesTo after Close; other methods
// panic there, as pebble does, since calling them then is a bug.
var errClosed = errors.New("raftlog: closed")

// get reads the value of key into fn, which must not keep the slice. found
// is false (and fn not called) when the key does not exist.
func (l *LogDB) get(key []byte, fn func([]byte) error) (found bool, err error) {
	v, closer, err := l.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = fn(v)
	return true, errors.Join(err, closer.Close())
}

// closeIter closes it, keeping the first error.
func closeIter(it io.Closer, err *error) {
	if cerr := it.Close(); cerr != nil && *err == nil {
		*err = cerr
	}
}

// SaveBootstrapInfo saves the replica's bootstrap record, synced.
func (l *LogDB) SaveBootstrapInfo(shardID, replicaID uint64, bootstrap pb.Bootstrap) error {
	data, err := bootstrap.Marshal()
	if err != nil {
		return err
	}
	return l.db.Set(replicaKey(prefixBootstrap, shardID, replicaID), data, pebble.Sync)
}

// GetBootstrapInfo returns the replica's bootstrap record, or
// raftio.ErrNoBootstrapInfo if none was saved.
func (l *LogDB) GetBootstrapInfo(shardID, replicaID uint64) (pb.Bootstrap, error) {
	var bs pb.Bootstrap
	found, err := l.get(replicaKey(prefixBootstrap, shardID, replicaID), bs.Unmarshal)
	if err != nil {
		return pb.Bootstrap{}, err
	}
	if !found {
		return pb.Bootstrap{}, raftio.ErrNoBootstrapInfo
	}
	return bs, nil
}

// ListNodeInfo lists the replicas that have a bootstrap record, which is
// how dragonboat's store defines the replicas it holds, in shard then
// replica order.
func (l *LogDB) ListNodeInfo() (_ []raftio.NodeInfo, err error) {
	it := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixBootstrap},
		UpperBound: []byte{prefixBootstrap + 1},
	})
	defer closeIter(it, &err)
	nis := make([]raftio.NodeInfo, 0)
	for ok := it.First(); ok; ok = it.Next() {
		shardID, replicaID, ok := parseReplicaKey(it.Key())
		if !ok {
			return nil, fmt.Errorf("raftlog: bad bootstrap key %x", it.Key())
		}
		nis = append(nis, raftio.GetNodeInfo(shardID, replicaID))
	}
	return nis, it.Error()
}

// RemoveNodeData removes everything stored for the replica (bootstrap,
// state, max index, snapshot records and entries) in one synced batch, so a
// power loss leaves either all of it or none.
func (l *LogDB) RemoveNodeData(shardID, replicaID uint64) error {
	b := l.db.NewBatch()
	defer b.Close()
	for _, p := range []byte{prefixBootstrap, prefixState, prefixMaxIndex} {
		if err := b.Delete(replicaKey(p, shardID, replicaID), nil); err != nil {
			return err
		}
	}
	for _, p := range []byte{prefixSnapshot, prefixEntry} {
		if err := b.DeleteRange(indexKey(p, shardID, replicaID, 0),
			replicaRangeEnd(p, shardID, replicaID), nil); err != nil {
			return err
		}
	}
	if err := l.db.Apply(b, pebble.Sync); err != nil {
		return err
	}
	// Known to be empty now: no state (the next one is synced), no max
	// index (readers see no log), no snapshot.
	l.cache.set(raftio.GetNodeInfo(shardID, replicaID),
		replicaInfo{maxKnown: true, snapKnown: true})
	return nil
}
