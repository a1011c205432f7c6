package seglog

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/baton-dev/baton/engine/stagetrace"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// maxKeptBuffer bounds the record buffers kept for reuse: a rare large
// record (entries of big commands, a snapshot) should not pin its buffer.
const maxKeptBuffer = 1 << 20

// saveContext is a step worker's reusable record buffer and scratch space,
// so that SaveRaftState allocates nothing in the steady state.
type saveContext struct {
	mu   sync.Mutex
	buf  []byte
	call *savecall.Call
}

func newSaveContext() *saveContext {
	return &saveContext{call: savecall.NewCall("seglog")}
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
// As in dragonboat's store: a State equal to the last
// one saved is not written again; a snapshot is saved only if newer than
// the replica's newest, and then sets the max index to its own index before
// the update's entries, if any, set it to their highest index. An update
// whose snapshot is newer than its last entry is an error. These decisions
// are engine/internal/savecall's; this method
// writes what it decides.
//
// workerID is dragonboat's 1-based step worker id; calls with the same id
// share a context and are serialised.
func (l *LogDB) SaveRaftState(updates []pb.Update, workerID uint64) error {
	if len(updates) == 0 {
		return nil
	}
	start := time.Now()
	var saveAt int64
	if stagetrace.On {
		saveAt = stagetrace.Now()
		stagetrace.Committed(updates, saveAt)
	}
	c, release := l.workers.Get(workerID)
	defer release()
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := append(c.buf[:0], make([]byte, headerSize)...)
	defer func() {
		if cap(buf) > maxKeptBuffer {
			buf = nil
		}
		c.buf = buf[:0]
	}()
	call := c.call
	call.Reset()

	for i := range updates {
		ud := &updates[i]
		ch, err := call.Update((*saveMemory)(l), ud)
		if err != nil {
			return err
		}
		if ch.SetState {
			if buf, err = appendMarshalOp(buf, opState, ch.Replica, 0, &ud.State); err != nil {
				return err
			}
		}
		if ch.SetSnapshot {
			if buf, err = appendMarshalOp(buf, opSnapshot, ch.Replica, ud.Snapshot.Index, &ud.Snapshot); err != nil {
				return err
			}
		}
	}
	// Entries go after every snapshot of the call, and the max indexes
	// after every entry, each update's last.
	changes := call.Changes()
	var err error
	for i := range updates {
		for j := range updates[i].EntriesToSave {
			e := &updates[i].EntriesToSave[j]
			if buf, err = appendMarshalOp(buf, opEntry, changes[i].Replica, e.Index, e); err != nil {
				return err
			}
		}
	}
	for i := range changes {
		if changes[i].SetMax {
			buf, _ = appendOp(buf, opMaxIndex, changes[i].Replica, changes[i].MaxIndex, 0)
		}
	}
	if len(buf) == headerSize {
		return nil
	}
	mustSync := call.MustSync()
	end, err := l.appendRecord(buf)
	if err != nil {
		return err
	}
	var writeAt int64
	if stagetrace.On {
		writeAt = stagetrace.Now()
	}
	if mustSync {
		yieldToSenders(updates)
		if err := l.syncTo(end); err != nil {
			return err
		}
	}
	if stagetrace.On {
		stagetrace.Saved(updates, saveAt, writeAt, stagetrace.Now())
	}
	l.saves.Record(mustSync, start)
	return nil
}

// yieldToSenders lets the goroutine that sends a leader's Replicate
// messages run before the step worker enters its fdatasync, when
// sendsFirst says so. dragonboat hands those messages to its transport's
// send queue just before it saves the same entries, so that the followers'
// flushes can run beside the leader's (Raft thesis 10.2.1); but the send
// goroutine, readied by that hand-off, waits on this goroutine's P, and no
// other P took it over while the flush held this one in its system call.
// Measured with tools/bench-stages.sh, one client on 3 nodes: the message
// reached the socket 190 µs after the proposal without the yield, 50 µs
// with it, so the follower's flush began before the leader's had ended
// rather than after it (BENCHMARKS.md, "Where a commit's time goes").
func yieldToSenders(updates []pb.Update) {
	if sendsFirst(updates) {
		runtime.Gosched()
	}
}

// yieldMaxBytes is the most entry bytes a save may carry for its step
// worker to yield before the flush. A larger save is a leader that is
// saturated: the followers already have a pipeline of their own, and the
// yield, which puts the step worker behind every goroutine this P has
// queued, would only delay the flush that the next batch waits for (4 x
// 1024 in flight lost 10 to 20 % with a yield at every save; 16 x 16, whose
// saves are a few KiB, gained).
const yieldMaxBytes = 8 << 10

// sendsFirst reports whether a save of updates should let the leader's
// send goroutine run first: it hands followers Replicate messages and is
// small (yieldMaxBytes). A follower's update carries no Replicate message
// (its acks go out after the save), so its flush is never delayed.
func sendsFirst(updates []pb.Update) bool {
	replicates, size := false, 0
	for i := range updates {
		for j := range updates[i].Messages {
			replicates = replicates || updates[i].Messages[j].Type == pb.Replicate
		}
		for j := range updates[i].EntriesToSave {
			size += len(updates[i].EntriesToSave[j].Cmd)
		}
	}
	return replicates && size <= yieldMaxBytes
}

// saveMemory is the LogDB as engine/internal/savecall sees it
// (savecall.Memory): what the store remembers of its replicas from before
// a call, which is what its index holds. A type of its own keeps these
// methods out of LogDB's.
type saveMemory LogDB

// LastState returns the last State this process wrote for the replica, and
// false if it wrote none since Open (or since RemoveNodeData).
func (m *saveMemory) LastState(ni raftio.NodeInfo) (pb.State, bool) {
	m.idx.mu.RLock()
	defer m.idx.mu.RUnlock()
	if r := m.idx.get(ni); r != nil {
		return r.saved, r.savedSinceOpen
	}
	return pb.State{}, false
}

// SnapshotIndex returns the index of the replica's newest snapshot, 0 if
// it has none.
func (m *saveMemory) SnapshotIndex(ni raftio.NodeInfo) (uint64, error) {
	m.idx.mu.RLock()
	defer m.idx.mu.RUnlock()
	if r := m.idx.get(ni); r != nil && r.hasSnap {
		return r.snapIndex, nil
	}
	return 0, nil
}

// ReadRaftState returns the replica's saved State and the range of entries
// to replay after the snapshot at snapshotIndex, as dragonboat's store does:
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
