package raftlog

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// saveContext is a step worker's reusable batch and scratch space, so that
// SaveRaftState allocates nothing in the steady state: values are marshalled
// straight into the batch (pebble's deferred Set), and the batch is reset,
// not freed, after each commit, as is the call's list of changes.
type saveContext struct {
	mu    sync.Mutex
	batch *pebble.Batch
	call  *savecall.Call
}

func newSaveContext(db *pebble.DB) *saveContext {
	return &saveContext{batch: db.NewBatch(), call: savecall.NewCall("raftlog")}
}

// SaveRaftState saves the states, snapshots and entries of the updates in
// one pebble batch, so that each call is atomic.
//
// The batch is committed with pebble.Sync if any update has entries to
// save, a snapshot, or a State whose term or vote differs from the last
// State saved for its replica since the store was opened (or none was);
// otherwise, when the only change is a commit index, with pebble.NoSync.
// The package documentation explains why that is safe.
//
// As in dragonboat's store: a State equal to the last one saved is not
// written again; a snapshot is saved only if newer than the replica's
// newest, and then sets the max index to its own index (so entries above it
// from an older term stop being visible) before the update's entries, if
// any, set it to their highest index. An update whose snapshot is newer
// than its last entry is an error (dragonboat's store panics): Raft never
// produces one.
//
// These decisions are engine/internal/savecall's, which engine/seglog
// shares; this method writes what it decides.
//
// workerID is dragonboat's 1-based step worker id; calls with the same id
// share a context and are serialised.
func (l *LogDB) SaveRaftState(updates []pb.Update, workerID uint64) error {
	if len(updates) == 0 {
		return nil
	}
	start := time.Now()
	c, release := l.workers.Get(workerID)
	defer release()
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.batch
	defer b.Reset()
	call := c.call
	call.Reset()

	for i := range updates {
		ud := &updates[i]
		ch, err := call.Update((*saveMemory)(l), ud)
		if err != nil {
			return err
		}
		if ch.SetState {
			putState(b, ch.Replica, &ud.State)
		}
		if ch.SetSnapshot {
			if err := putSnapshot(b, ch.Replica, &ud.Snapshot); err != nil {
				return err
			}
		}
	}
	// Entries go after every snapshot of the call, as in dragonboat's
	// store, and the max indexes after every entry, so an update's
	// entries set the max index last.
	changes := call.Changes()
	for i := range updates {
		if err := putEntries(b, changes[i].Replica, updates[i].EntriesToSave); err != nil {
			return err
		}
	}
	for i := range changes {
		if changes[i].SetMax {
			putMaxIndex(b, changes[i].Replica, changes[i].MaxIndex)
		}
	}
	if b.Empty() {
		return nil
	}
	mustSync := call.MustSync()
	wo := pebble.NoSync
	if mustSync {
		wo = pebble.Sync
	}
	if err := l.db.Apply(b, wo); err != nil {
		return err
	}
	l.cache.apply(changes)
	l.saves.Record(mustSync, start)
	return nil
}

// saveMemory is the LogDB as engine/internal/savecall sees it
// (savecall.Memory): what the store remembers of its replicas from before
// a call. A type of its own keeps these methods out of LogDB's.
type saveMemory LogDB

// LastState returns the last State written for the replica, as the cache
// knows it.
func (m *saveMemory) LastState(ni raftio.NodeInfo) (pb.State, bool) {
	ri := m.cache.get(ni)
	return ri.state, ri.hasState
}

// SnapshotIndex returns the index of the replica's newest snapshot (0:
// none), from the cache or else from pebble (read once, then cached).
func (m *saveMemory) SnapshotIndex(ni raftio.NodeInfo) (uint64, error) {
	return (*LogDB)(m).snapshotIndex(ni)
}

// putState adds the replica's state to b, marshalled in place.
func putState(b *pebble.Batch, ni raftio.NodeInfo, st *pb.State) {
	op := b.SetDeferred(replicaKeyLen, st.Size())
	putReplicaKey(op.Key, prefixState, ni.ShardID, ni.ReplicaID)
	// State.MarshalTo writes exactly Size() bytes and cannot fail.
	_, _ = st.MarshalTo(op.Value)
	_ = op.Finish() // only fails for indexed batches, which these are not
}

// putMaxIndex adds the replica's max index to b.
func putMaxIndex(b *pebble.Batch, ni raftio.NodeInfo, index uint64) {
	op := b.SetDeferred(replicaKeyLen, 8)
	putReplicaKey(op.Key, prefixMaxIndex, ni.ShardID, ni.ReplicaID)
	binary.BigEndian.PutUint64(op.Value, index)
	_ = op.Finish()
}

// putEntries adds the entries to b, one record each, marshalled in place.
func putEntries(b *pebble.Batch, ni raftio.NodeInfo, ents []pb.Entry) error {
	for i := range ents {
		e := &ents[i]
		size := e.Size()
		op := b.SetDeferred(indexKeyLen, size)
		putIndexKey(op.Key, prefixEntry, ni.ShardID, ni.ReplicaID, e.Index)
		if n, err := e.MarshalTo(op.Value); err != nil || n != size {
			return fmt.Errorf("raftlog: marshal entry %d: %d of %d bytes: %v", e.Index, n, size, err)
		}
		_ = op.Finish()
	}
	return nil
}

// ReadRaftState returns the replica's saved State and the range of entries
// to replay after the snapshot at snapshotIndex, as dragonboat's store does:
// FirstIndex is the lowest saved entry index at or above snapshotIndex and
// EntryCount runs from it to the max index; with no entries past the
// snapshot (or none at all) FirstIndex is snapshotIndex and EntryCount 0.
// Dragonboat's LogReader drops the part of that range the snapshot covers.
// It returns raftio.ErrNoSavedLog if no State was ever saved.
//
// A snapshotIndex above the max index (dragonboat's store panics there; no
// caller does it) also gives no entries: the snapshot covers the whole log.
func (l *LogDB) ReadRaftState(shardID, replicaID, snapshotIndex uint64) (raftio.RaftState, error) {
	ni := raftio.GetNodeInfo(shardID, replicaID)
	maxIndex, hasMax, err := l.maxIndex(ni)
	if err != nil {
		return raftio.RaftState{}, err
	}
	first, count := snapshotIndex, uint64(0)
	if hasMax && snapshotIndex < maxIndex {
		first, err = l.firstEntryIndex(ni, snapshotIndex, maxIndex)
		if err != nil {
			return raftio.RaftState{}, err
		}
		count = maxIndex - first + 1
	}
	var st pb.State
	found, err := l.get(replicaKey(prefixState, shardID, replicaID), st.Unmarshal)
	if err != nil {
		return raftio.RaftState{}, err
	}
	if !found {
		return raftio.RaftState{}, raftio.ErrNoSavedLog
	}
	return raftio.RaftState{State: st, FirstIndex: first, EntryCount: count}, nil
}

// maxIndex returns the replica's max index and whether it has one (it has
// none until an entry or a snapshot is saved), from the cache or else from
// pebble.
func (l *LogDB) maxIndex(ni raftio.NodeInfo) (uint64, bool, error) {
	if ri := l.cache.get(ni); ri.maxKnown {
		return ri.maxIndex, ri.hasMax, nil
	}
	var index uint64
	found, err := l.get(replicaKey(prefixMaxIndex, ni.ShardID, ni.ReplicaID), func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("raftlog: shard %d replica %d: max index record of %d bytes",
				ni.ShardID, ni.ReplicaID, len(v))
		}
		index = binary.BigEndian.Uint64(v)
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	l.cache.learnMaxIndex(ni, index, found)
	return index, found, nil
}
