package seglog

import (
	"fmt"
	"sync"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// maxKeptBuffer bounds the record buffers kept for reuse: a rare large
// record (entries of big commands, a snapshot) should not pin its buffer.
const maxKeptBuffer = 1 << 20

// saveContext is a step worker's reusable record buffer and scratch space,
// so that SaveRaftState allocates nothing in the steady state.
type saveContext struct {
	mu    sync.Mutex
	buf   []byte
	calls []callChange
}

// callChange is what one update of a SaveRaftState call changes, so that a
// later update of the same replica in the call sees it.
type callChange struct {
	ni       raftio.NodeInfo
	state    pb.State
	setState bool
	snap     uint64
	setSnap  bool
	maxIndex uint64
	setMax   bool
}

// SaveRaftState saves the states, snapshots and entries of the updates as
// one record, so that each call is atomic (the record's CRC covers it
// whole).
//
// The record is synced before SaveRaftState returns if any update has
// entries to save, a snapshot, or a State whose term or vote differs from
// the last State saved for its replica since the store was opened (or none
// was); otherwise, when the only change is a commit index, it is written
// but not synced. The package documentation explains why that is safe.
//
// As in engine/raftlog (and dragonboat's store): a State equal to the last
// one saved is not written again; a snapshot is saved only if newer than
// the replica's newest, and then sets the max index to its own index before
// the update's entries, if any, set it to their highest index. An update
// whose snapshot is newer than its last entry is an error.
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
	buf := append(c.buf[:0], make([]byte, headerSize)...)
	calls := c.calls[:0]
	defer func() {
		if cap(buf) > maxKeptBuffer {
			buf = nil
		}
		c.buf, c.calls = buf[:0], calls[:0]
	}()

	mustSync := false
	var err error
	for i := range updates {
		ud := &updates[i]
		ch := callChange{ni: raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}}
		if !pb.IsEmptyState(ud.State) {
			prev, ok := l.lastState(calls, ch.ni)
			if !ok || !pb.IsStateEqual(prev, ud.State) {
				if buf, err = appendMarshalOp(buf, opState, ch.ni, 0, &ud.State); err != nil {
					return err
				}
				ch.state, ch.setState = ud.State, true
				if !ok || prev.Term != ud.State.Term || prev.Vote != ud.State.Vote {
					mustSync = true
				}
			}
		}
		if !pb.IsEmptySnapshot(ud.Snapshot) {
			mustSync = true
			if l.snapshotIsNewer(calls, ch.ni, ud.Snapshot.Index) {
				if n := len(ud.EntriesToSave); n > 0 && ud.Snapshot.Index > ud.EntriesToSave[n-1].Index {
					return fmt.Errorf("seglog: shard %d replica %d: snapshot %d is newer than the last entry %d saved with it",
						ud.ShardID, ud.ReplicaID, ud.Snapshot.Index, ud.EntriesToSave[n-1].Index)
				}
				if buf, err = appendMarshalOp(buf, opSnapshot, ch.ni, ud.Snapshot.Index, &ud.Snapshot); err != nil {
					return err
				}
				ch.snap, ch.setSnap = ud.Snapshot.Index, true
				ch.maxIndex, ch.setMax = ud.Snapshot.Index, true
			}
		}
		calls = append(calls, ch)
	}
	// Entries go after every snapshot of the call, and the max indexes
	// after every entry, each update's last, as in engine/raftlog.
	for i := range updates {
		ud := &updates[i]
		highest := uint64(0)
		for j := range ud.EntriesToSave {
			e := &ud.EntriesToSave[j]
			mustSync = true
			if buf, err = appendMarshalOp(buf, opEntry, calls[i].ni, e.Index, e); err != nil {
				return err
			}
			highest = max(highest, e.Index)
		}
		if highest > 0 {
			calls[i].maxIndex, calls[i].setMax = highest, true
		}
	}
	for i := range calls {
		if calls[i].setMax {
			buf, _ = appendOp(buf, opMaxIndex, calls[i].ni, calls[i].maxIndex, 0)
		}
	}
	if len(buf) == headerSize {
		return nil
	}
	if err := l.write(buf, mustSync); err != nil {
		return err
	}
	if mustSync {
		l.syncedSaves.Add(1)
	} else {
		l.unsyncedSaves.Add(1)
	}
	return nil
}

// lastState returns the last State saved for the replica: by an earlier
// update of this call if any, else since the store was opened.
func (l *LogDB) lastState(calls []callChange, ni raftio.NodeInfo) (pb.State, bool) {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].ni == ni && calls[i].setState {
			return calls[i].state, true
		}
	}
	l.idx.mu.RLock()
	defer l.idx.mu.RUnlock()
	if r := l.idx.get(ni); r != nil {
		return r.saved, r.savedSinceOpen
	}
	return pb.State{}, false
}

// snapshotIsNewer reports whether a snapshot at index is newer than the
// replica's newest: the one of an earlier update of this call, else the
// index's.
func (l *LogDB) snapshotIsNewer(calls []callChange, ni raftio.NodeInfo, index uint64) bool {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].ni == ni && calls[i].setSnap {
			return index > calls[i].snap
		}
	}
	l.idx.mu.RLock()
	defer l.idx.mu.RUnlock()
	if r := l.idx.get(ni); r != nil && r.hasSnap {
		return index > r.snapIndex
	}
	return true
}

// ReadRaftState returns the replica's saved State and the range of entries
// to replay after the snapshot at snapshotIndex, as engine/raftlog does:
// FirstIndex is the lowest saved entry index at or above snapshotIndex and
// EntryCount runs from it to the max index; with no entries past the
// snapshot (or none at all) FirstIndex is snapshotIndex and EntryCount 0.
// It returns raftio.ErrNoSavedLog if no State was ever saved, and an error
// if the max index says there are entries past the snapshot but none is
// stored (the store lost entries it acknowledged).
func (l *LogDB) ReadRaftState(shardID, replicaID, snapshotIndex uint64) (raftio.RaftState, error) {
	l.idx.mu.RLock()
	defer l.idx.mu.RUnlock()
	r := l.idx.get(raftio.GetNodeInfo(shardID, replicaID))
	if r == nil {
		return raftio.RaftState{}, raftio.ErrNoSavedLog
	}
	first, count := snapshotIndex, uint64(0)
	if r.hasMax && snapshotIndex < r.maxIndex {
		var ok bool
		first, ok = r.entries.lowestFrom(snapshotIndex, r.maxIndex)
		if !ok {
			return raftio.RaftState{}, fmt.Errorf("seglog: shard %d replica %d: no entry in [%d, %d] though the max index is %d",
				shardID, replicaID, snapshotIndex, r.maxIndex, r.maxIndex)
		}
		count = r.maxIndex - first + 1
	}
	if !r.hasState {
		return raftio.RaftState{}, raftio.ErrNoSavedLog
	}
	return raftio.RaftState{State: r.state, FirstIndex: first, EntryCount: count}, nil
}
