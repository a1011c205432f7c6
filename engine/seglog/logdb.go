package seglog

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/engine/internal/durable"
	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/baton-dev/baton/engine/internal/stepworkers"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// TypeName is the name of this store, returned by Factory.Name and
// LogDB.Name. NodeHost records it in its data directory and refuses to open
// that directory later with a store of another name, which keeps the other
// stores (whose formats differ) from reading this one's data and back.
const TypeName = "baton-seglog"

// LogDB is a Raft log store for dragonboat (a raftio.ILogDB) on a log of
// segment files with an in-memory index, with the semantics of dragonboat's
// default store except that a save whose only change is a commit index is
// not synced (see the package documentation).
//
// Concurrency: reads (IterateEntries,
// ReadRaftState, GetSnapshot, GetBootstrapInfo, ListNodeInfo) may run at any
// time, alongside anything; writes for different replicas may run at the
// same time; writes for one replica come one at a time as dragonboat makes
// them, except that SaveSnapshots may overlap a SaveRaftState of the same
// replica (the newest snapshot wins). Close must come after every other
// call has returned.
type LogDB struct {
	fs          vfs.FS
	dir         string
	segmentSize int64

	// Lock order: mu, then files, then idx.mu. Writers take mu to
	// append, and idx.mu (under mu) to apply what they appended; they
	// take files (under mu, without idx.mu) only to add or retire a
	// segment. Readers take files (read) for as long as they read
	// segment files, and idx.mu (read) inside it to look up where.

	// mu serialises appends and guards the append state below and, for
	// writes, segs.
	mu sync.Mutex
	// synced is signalled (with mu) when a sync ends.
	synced *sync.Cond
	// active is the segment appended to, w its write handle, off the
	// offset of the next record in it.
	active *segment
	w      vfs.File
	off    int64
	// written counts the bytes appended since Open; durable is how many
	// of them are known synced. syncing is set while a goroutine syncs
	// w outside mu (group commit).
	written, durable uint64
	syncing          bool
	// err is the first write or sync failure: after it the file's state
	// is unknown, so every later write fails with it.
	err     error
	nextSeq uint64
	// spares are retired segment files kept for recycling, and
	// preparing says one is being zero-filled in the background.
	spares    []spare
	preparing bool
	// wbuf is what is handed to Write: a copy of the record.
	wbuf []byte
	// created and recycled count the segment files zero-filled and
	// recycled since Open, relocated the entries copied forward, for
	// tests.
	created, recycled, relocated int

	// files guards segs against readers: the live segments, the active
	// one included, by sequence number.
	files sync.RWMutex
	segs  map[uint64]*segment

	idx *index

	workers *stepworkers.Contexts[saveContext]

	closed atomic.Bool
	// background tracks the goroutine preparing a spare, which Close
	// waits for.
	background sync.WaitGroup

	// saves counts the SaveRaftState calls that wrote something, synced or
	// not (tests see the sync policy at work), and tells Options.OnSave.
	saves *savecall.Saves
}

var _ raftio.ILogDB = (*LogDB)(nil)

// Open opens the store in dir, creating it (and its missing parents) if
// needed: it replays every live segment to rebuild the index, then starts
// a new segment (see recover).
func Open(dir string, opts Options) (*LogDB, error) {
	fs := opts.fs
	if fs == nil {
		fs = vfs.Default
	}
	if err := durable.MkdirAll(fs, dir); err != nil {
		return nil, fmt.Errorf("seglog: create %s: %w", dir, err)
	}
	l := &LogDB{
		fs:          fs,
		dir:         dir,
		segmentSize: segmentSize,
		segs:        make(map[uint64]*segment),
		idx:         newIndex(),
		workers:     stepworkers.New(opts.Workers, newSaveContext),
		saves:       savecall.NewSaves(opts.OnSave),
	}
	if opts.segmentSize != 0 {
		l.segmentSize = opts.segmentSize
	}
	l.synced = sync.NewCond(&l.mu)
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

// Name returns TypeName.
func (l *LogDB) Name() string { return TypeName }

// BinaryFormat returns raftio.PlainLogDBBinVersion, the version dragonboat
// gives a store that keeps one record per entry; TypeName is what tells the stores apart.
func (l *LogDB) BinaryFormat() uint32 { return raftio.PlainLogDBBinVersion }

// Close syncs what was written (so a clean shutdown keeps commit-only
// saves too) and closes the files. Closing an already closed store does
// nothing.
func (l *LogDB) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	l.background.Wait()
	l.mu.Lock()
	for l.syncing {
		l.synced.Wait()
	}
	var err error
	if l.err == nil && l.w != nil {
		err = l.w.Sync()
	}
	l.err = errClosed
	l.mu.Unlock()
	return errors.Join(err, l.closeFiles())
}

// closeFiles closes every open file handle.
func (l *LogDB) closeFiles() error {
	var errs []error
	if l.w != nil {
		errs = append(errs, l.w.Close())
		l.w = nil
	}
	l.files.Lock()
	defer l.files.Unlock()
	for seq, s := range l.segs {
		errs = append(errs, s.r.Close())
		delete(l.segs, seq)
	}
	return errors.Join(errs...)
}

// errClosed is returned by every call after Close.
var errClosed = errors.New("seglog: closed")

// SaveBootstrapInfo saves the replica's bootstrap record, synced.
func (l *LogDB) SaveBootstrapInfo(shardID, replicaID uint64, bootstrap pb.Bootstrap) error {
	rec, err := appendMarshalOp(make([]byte, headerSize), opBootstrap,
		raftio.GetNodeInfo(shardID, replicaID), 0, &bootstrap)
	if err != nil {
		return err
	}
	return l.write(rec, true)
}

// GetBootstrapInfo returns the replica's bootstrap record, or
// raftio.ErrNoBootstrapInfo if none was saved.
func (l *LogDB) GetBootstrapInfo(shardID, replicaID uint64) (pb.Bootstrap, error) {
	l.idx.mu.RLock()
	r := l.idx.get(raftio.GetNodeInfo(shardID, replicaID))
	if r == nil || !r.hasBootstrap {
		l.idx.mu.RUnlock()
		return pb.Bootstrap{}, raftio.ErrNoBootstrapInfo
	}
	data := r.bootstrap // never modified in place: replaced on each save
	l.idx.mu.RUnlock()
	var bs pb.Bootstrap
	if err := bs.Unmarshal(data); err != nil {
		return pb.Bootstrap{}, fmt.Errorf("seglog: shard %d replica %d: bootstrap: %w", shardID, replicaID, err)
	}
	return bs, nil
}

// ListNodeInfo lists the replicas that have a bootstrap record, which is
// how dragonboat's store defines the replicas it holds, in shard then
// replica order.
func (l *LogDB) ListNodeInfo() ([]raftio.NodeInfo, error) {
	l.idx.mu.RLock()
	nis := make([]raftio.NodeInfo, 0)
	for ni, r := range l.idx.replicas {
		if r.hasBootstrap {
			nis = append(nis, ni)
		}
	}
	l.idx.mu.RUnlock()
	slices.SortFunc(nis, compareNodeInfo)
	return nis, nil
}

// RemoveNodeData removes everything stored for the replica (bootstrap,
// state, max index, snapshot and entries) with one synced record, so a
// power loss leaves either all of it or none. The space of its entries is
// reclaimed when their segments are retired.
func (l *LogDB) RemoveNodeData(shardID, replicaID uint64) error {
	rec, _ := appendOp(make([]byte, headerSize), opRemove, raftio.GetNodeInfo(shardID, replicaID), 0, 0)
	return l.write(rec, true)
}
