package raftlog

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// saveContext is a step worker's reusable batch and scratch space, so that
// SaveRaftState allocates nothing in the steady state: values are marshalled
// straight into the batch (pebble's deferred Set), and the batch is reset,
// not freed, after each commit.
type saveContext struct {
	mu      sync.Mutex
	batch   *pebble.Batch
	changes []change
}

func newSaveContext(db *pebble.DB) *saveContext {
	return &saveContext{batch: db.NewBatch()}
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
// workerID is dragonboat's 1-based step worker id; calls with the same id
// share a context and are serialised.
func (l *LogDB) SaveRaftState(updates []pb.Update, workerID uint64) error {
	if len(updates) == 0 {
		return nil
	}
	c, release := l.workers.Get(workerID)
	defer release()
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.batch
	defer b.Reset()
	changes := c.changes[:0]
	defer func() { c.changes = changes[:0] }()

	mustSync := false
	for i := range updates {
		ud := &updates[i]
		ch := change{ni: raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}}
		if !pb.IsEmptyState(ud.State) {
			prev, ok := l.lastState(changes, ch.ni)
			if !ok || !pb.IsStateEqual(prev, ud.State) {
				putState(b, ch.ni, &ud.State)
				ch.state, ch.setState = ud.State, true
				if !ok || prev.Term != ud.State.Term || prev.Vote != ud.State.Vote {
					mustSync = true
				}
			}
		}
		if !pb.IsEmptySnapshot(ud.Snapshot) {
			mustSync = true
			newer, err := l.snapshotIsNewer(changes, ch.ni, ud.Snapshot.Index)
			if err != nil {
				return err
			}
			if newer {
				if n := len(ud.EntriesToSave); n > 0 && ud.Snapshot.Index > ud.EntriesToSave[n-1].Index {
					return fmt.Errorf("raftlog: shard %d replica %d: snapshot %d is newer than the last entry %d saved with it",
						ud.ShardID, ud.ReplicaID, ud.Snapshot.Index, ud.EntriesToSave[n-1].Index)
				}
				if err := putSnapshot(b, ch.ni, &ud.Snapshot); err != nil {
					return err
				}
				ch.snap, ch.setSnap = ud.Snapshot.Index, true
				ch.maxIndex, ch.setMax = ud.Snapshot.Index, true
			}
		}
		changes = append(changes, ch)
	}
	// Entries go after every snapshot of the call, as in dragonboat's
	// store, so an update's entries set the max index last.
	for i := range updates {
		ud := &updates[i]
		if len(ud.EntriesToSave) == 0 {
			continue
		}
		mustSync = true
		maxIndex, err := putEntries(b, changes[i].ni, ud.EntriesToSave)
		if err != nil {
			return err
		}
		if maxIndex > 0 {
			changes[i].maxIndex, changes[i].setMax = maxIndex, true
		}
	}
	for i := range changes {
		if changes[i].setMax {
			putMaxIndex(b, changes[i].ni, changes[i].maxIndex)
		}
	}
	if b.Empty() {
		return nil
	}
	wo := pebble.NoSync
	if mustSync {
		wo = pebble.Sync
	}
	if err := l.db.Apply(b, wo); err != nil {
		return err
	}
	l.cache.apply(changes)
	if mustSync {
		l.syncedSaves.Add(1)
	} else {
		l.unsyncedSaves.Add(1)
	}
	return nil
}

// lastState returns the last State saved for the replica: by an earlier
// update of this call if any, else as the cache knows it.
func (l *LogDB) lastState(changes []change, ni raftio.NodeInfo) (pb.State, bool) {
	for i := len(changes) - 1; i >= 0; i-- {
		if changes[i].ni == ni && changes[i].setState {
			return changes[i].state, true
		}
	}
	ri := l.cache.get(ni)
	return ri.state, ri.hasState
}

// snapshotIsNewer reports whether a snapshot at index is newer than the
// replica's newest: the one of an earlier update of this call, else the
// cached one, else the one in pebble (read once, then cached).
func (l *LogDB) snapshotIsNewer(changes []change, ni raftio.NodeInfo, index uint64) (bool, error) {
	for i := len(changes) - 1; i >= 0; i-- {
		if changes[i].ni == ni && changes[i].setSnap {
			return index > changes[i].snap, nil
		}
	}
	cur, err := l.snapshotIndex(ni)
	if err != nil {
		return false, err
	}
	return index > cur, nil
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

// putEntries adds the entries to b, one record each, marshalled in place,
// and returns the highest index among them.
func putEntries(b *pebble.Batch, ni raftio.NodeInfo, ents []pb.Entry) (uint64, error) {
	maxIndex := uint64(0)
	for i := range ents {
		e := &ents[i]
		size := e.Size()
		op := b.SetDeferred(indexKeyLen, size)
		putIndexKey(op.Key, prefixEntry, ni.ShardID, ni.ReplicaID, e.Index)
		if n, err := e.MarshalTo(op.Value); err != nil || n != size {
			return 0, fmt.Errorf("raftlog: marshal entry %d: %d of %d bytes: %v", e.Index, n, size, err)
		}
		_ = op.Finish()
		if e.Index > maxIndex {
			maxIndex = e.Index
		}
	}
	return maxIndex, nil
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
