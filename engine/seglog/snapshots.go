package seglog

import (
	"errors"
	"fmt"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// SaveSnapshots saves the snapshot of each update that has one newer than
// its replica's newest, in one synced record. Unlike a snapshot saved by
// SaveRaftState it does not move the max index, as in dragonboat's store.
// Should a SaveRaftState of the same replica save a snapshot at the same
// time, the newest of the two wins whichever record comes last.
func (l *LogDB) SaveSnapshots(updates []pb.Update) error {
	rec := make([]byte, headerSize)
	call := savecall.NewCall("seglog")
	for i := range updates {
		ud := &updates[i]
		ch, err := call.Snapshot((*saveMemory)(l), ud)
		if err != nil {
			return err
		}
		if ch.SetSnapshot {
			if rec, err = appendMarshalOp(rec, opSnapshot, ch.Replica, ud.Snapshot.Index, &ud.Snapshot); err != nil {
				return err
			}
		}
	}
	if len(rec) == headerSize {
		return nil
	}
	return l.write(rec, true)
}

// GetSnapshot returns the replica's newest snapshot, or an empty one
// (pb.IsEmptySnapshot) if it has none.
func (l *LogDB) GetSnapshot(shardID, replicaID uint64) (pb.Snapshot, error) {
	l.idx.mu.RLock()
	r := l.idx.get(raftio.GetNodeInfo(shardID, replicaID))
	if r == nil || !r.hasSnap {
		l.idx.mu.RUnlock()
		return pb.Snapshot{}, nil
	}
	data := r.snapshot // never modified in place: replaced on each save
	l.idx.mu.RUnlock()
	var ss pb.Snapshot
	if err := ss.Unmarshal(data); err != nil {
		return pb.Snapshot{}, fmt.Errorf("seglog: shard %d replica %d: snapshot: %w", shardID, replicaID, err)
	}
	return ss, nil
}

// ImportSnapshot resets the replica to the imported snapshot, as
// dragonboat's store does, with one synced record: its snapshot is replaced by
// ss (even if older), its bootstrap record says it joins (Join, ss.Type),
// its State is the snapshot's term with the snapshot's index as commit (no
// vote), and its max index is the snapshot's index, which hides any entry
// above it. Entries at or below it are left alone (the snapshot covers
// them; they go with the next RemoveEntriesTo).
func (l *LogDB) ImportSnapshot(ss pb.Snapshot, replicaID uint64) error {
	if ss.Type == pb.UnknownStateMachine {
		return errors.New("seglog: import of a snapshot of unknown state machine type")
	}
	if pb.IsEmptySnapshot(ss) {
		return errors.New("seglog: import of an empty snapshot")
	}
	ni := raftio.GetNodeInfo(ss.ShardID, replicaID)
	bs := pb.Bootstrap{Join: true, Type: ss.Type}
	st := pb.State{Term: ss.Term, Commit: ss.Index}
	rec, err := appendMarshalOp(make([]byte, headerSize), opSnapshotSet, ni, ss.Index, &ss)
	if err == nil {
		rec, err = appendMarshalOp(rec, opBootstrap, ni, 0, &bs)
	}
	if err == nil {
		rec, err = appendMarshalOp(rec, opState, ni, 0, &st)
	}
	if err != nil {
		return err
	}
	rec, _ = appendOp(rec, opMaxIndex, ni, ss.Index, 0)
	return l.write(rec, true)
}
