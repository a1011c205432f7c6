package raftlog

import (
	"errors"
	"fmt"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Snapshot records are keyed by index and the newest is the one with the
// highest key. Saving one deletes the older ones with a range deletion (no
// read needed), and since a reader takes the highest key, two writers racing
// (dragonboat's step worker saving a snapshot received from the leader, its
// snapshot worker saving one it made) can leave an extra old record but
// never make the newest go backwards.

// putSnapshot adds the snapshot to b, replacing the replica's older ones.
func putSnapshot(b *pebble.Batch, ni raftio.NodeInfo, ss *pb.Snapshot) error {
	data, err := ss.Marshal()
	if err != nil {
		return err
	}
	if ss.Index > 0 {
		if err := b.DeleteRange(indexKey(prefixSnapshot, ni.ShardID, ni.ReplicaID, 0),
			indexKey(prefixSnapshot, ni.ShardID, ni.ReplicaID, ss.Index), nil); err != nil {
			return err
		}
	}
	return b.Set(indexKey(prefixSnapshot, ni.ShardID, ni.ReplicaID, ss.Index), data, nil)
}

// SaveSnapshots saves the snapshot of each update that has one newer than
// its replica's newest, in one synced batch. Unlike a snapshot saved by
// SaveRaftState it does not move the max index, as in dragonboat's store:
// these are snapshots a replica made of its own applied state, below its
// log's end.
func (l *LogDB) SaveSnapshots(updates []pb.Update) error {
	b := l.db.NewBatch()
	defer b.Close()
	call := savecall.NewCall("raftlog")
	for i := range updates {
		ud := &updates[i]
		ch, err := call.Snapshot((*saveMemory)(l), ud)
		if err != nil {
			return err
		}
		if ch.SetSnapshot {
			if err := putSnapshot(b, ch.Replica, &ud.Snapshot); err != nil {
				return err
			}
		}
	}
	if b.Empty() {
		return nil
	}
	if err := l.db.Apply(b, pebble.Sync); err != nil {
		return err
	}
	l.cache.apply(call.Changes())
	return nil
}

// GetSnapshot returns the replica's newest snapshot, or an empty one
// (pb.IsEmptySnapshot) if it has none.
func (l *LogDB) GetSnapshot(shardID, replicaID uint64) (pb.Snapshot, error) {
	ni := raftio.GetNodeInfo(shardID, replicaID)
	ss, found, err := l.readNewestSnapshot(ni)
	if err != nil {
		return pb.Snapshot{}, err
	}
	if !found {
		l.cache.learnSnapshotIndex(ni, 0)
		return pb.Snapshot{}, nil
	}
	l.cache.learnSnapshotIndex(ni, ss.Index)
	return ss, nil
}

// snapshotIndex returns the index of the replica's newest snapshot (0: none),
// from the cache or else from pebble.
func (l *LogDB) snapshotIndex(ni raftio.NodeInfo) (uint64, error) {
	if ri := l.cache.get(ni); ri.snapKnown {
		return ri.snapIndex, nil
	}
	ss, _, err := l.readNewestSnapshot(ni)
	if err != nil {
		return 0, err
	}
	l.cache.learnSnapshotIndex(ni, ss.Index)
	return ss.Index, nil
}

func (l *LogDB) readNewestSnapshot(ni raftio.NodeInfo) (_ pb.Snapshot, found bool, err error) {
	it := l.db.NewIter(&pebble.IterOptions{
		LowerBound: indexKey(prefixSnapshot, ni.ShardID, ni.ReplicaID, 0),
		UpperBound: replicaRangeEnd(prefixSnapshot, ni.ShardID, ni.ReplicaID),
	})
	defer closeIter(it, &err)
	if !it.Last() {
		return pb.Snapshot{}, false, it.Error()
	}
	var ss pb.Snapshot
	if err := ss.Unmarshal(it.Value()); err != nil {
		return pb.Snapshot{}, false, fmt.Errorf("raftlog: shard %d replica %d: snapshot: %w",
			ni.ShardID, ni.ReplicaID, err)
	}
	return ss, true, nil
}

// ImportSnapshot resets the replica to the imported snapshot, as
// dragonboat's store does, in one synced batch: its snapshot records are
// replaced by ss, its bootstrap record says it joins (Join, ss.Type), its
// State is the snapshot's term with the snapshot's index as commit (no
// vote), and its max index is the snapshot's index, which hides any entry
// above it. Entries at or below it are left alone (the snapshot covers
// them; they go with the next RemoveEntriesTo).
func (l *LogDB) ImportSnapshot(ss pb.Snapshot, replicaID uint64) error {
	if ss.Type == pb.UnknownStateMachine {
		return errors.New("raftlog: import of a snapshot of unknown state machine type")
	}
	if pb.IsEmptySnapshot(ss) {
		return errors.New("raftlog: import of an empty snapshot")
	}
	ni := raftio.GetNodeInfo(ss.ShardID, replicaID)
	bs := pb.Bootstrap{Join: true, Type: ss.Type}
	bsData, err := bs.Marshal()
	if err != nil {
		return err
	}
	st := pb.State{Term: ss.Term, Commit: ss.Index}
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(indexKey(prefixSnapshot, ni.ShardID, ni.ReplicaID, 0),
		replicaRangeEnd(prefixSnapshot, ni.ShardID, ni.ReplicaID), nil); err != nil {
		return err
	}
	if err := putSnapshot(b, ni, &ss); err != nil {
		return err
	}
	if err := b.Set(replicaKey(prefixBootstrap, ni.ShardID, ni.ReplicaID), bsData, nil); err != nil {
		return err
	}
	putState(b, ni, &st)
	putMaxIndex(b, ni, ss.Index)
	if err := l.db.Apply(b, pebble.Sync); err != nil {
		return err
	}
	l.cache.set(ni, replicaInfo{
		state: st, hasState: true,
		maxKnown: true, hasMax: true, maxIndex: ss.Index,
		snapKnown: true, snapIndex: ss.Index,
	})
	return nil
}
