package raftlog

import (
	"fmt"
	"math"

	"github.com/baton-dev/baton/engine/internal/readback"
	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// IterateEntries appends to ents the replica's consecutive entries from
// low up to (not including) high, and adds their sizes (each entry's
// SizeUpperLimit, as dragonboat counts them) to size. It follows
// dragonboat's store exactly:
//
//   - Entries above the max index are stale (a later save at a lower index
//     superseded them) and never returned: high is cut to max index + 1.
//   - It stops after the first entry that takes size past maxSize, so that
//     entry is included: the result is never empty when entry low exists,
//     even if that one entry alone exceeds maxSize, and dragonboat's
//     LogReader drops the last entry when there is more than one.
//   - It stops at the first missing index: with low missing the result is
//     ents unchanged, and the caller (dragonboat's LogReader) turns a
//     short result into raft's ErrCompacted or ErrUnavailable. It returns
//     no error for missing entries, nor when the replica has no log.
//
// (Dragonboat's store, asked for the single entry low when it is missing,
// returns a zero Entry; this store returns none, which the LogReader reports
// as ErrUnavailable instead of handing raft an entry with index 0.)
//
// Checking each entry and counting it against maxSize is
// engine/internal/readback's, which engine/seglog shares.
func (l *LogDB) IterateEntries(ents []pb.Entry, size uint64, shardID, replicaID, low, high, maxSize uint64) (_ []pb.Entry, _ uint64, err error) {
	ni := raftio.GetNodeInfo(shardID, replicaID)
	maxIndex, hasMax, err := l.maxIndex(ni)
	if err != nil {
		return nil, 0, err
	}
	if !hasMax {
		return ents, size, nil
	}
	if maxIndex < math.MaxUint64 && high > maxIndex+1 {
		high = maxIndex + 1
	}
	if low >= high {
		return ents, size, nil
	}
	var lo, hi [indexKeyLen]byte
	it := l.db.NewIter(&pebble.IterOptions{
		LowerBound: putIndexKey(lo[:], prefixEntry, shardID, replicaID, low),
		UpperBound: putIndexKey(hi[:], prefixEntry, shardID, replicaID, high),
	})
	defer closeIter(it, &err)
	got := readback.Start(ents, size, low, maxSize)
	for ok := it.First(); ok; ok = it.Next() {
		if index, ok := keyIndex(it.Key()); !ok || index != got.Next() {
			break
		}
		// The entry does not keep the iterator's buffer.
		full, err := got.Add(it.Value())
		if err != nil {
			return nil, 0, fmt.Errorf("raftlog: shard %d replica %d: %w", shardID, replicaID, err)
		}
		if full {
			break
		}
	}
	if err := it.Error(); err != nil {
		return nil, 0, err
	}
	return got.Entries, got.Size, nil
}

// firstEntryIndex returns the lowest saved entry index in [from, maxIndex].
// The max index says entries up to it were saved and RemoveEntriesTo only
// removes entries a snapshot covers, so finding none means the store lost
// entries it acknowledged: an error, not an empty log (dragonboat's store
// panics there).
func (l *LogDB) firstEntryIndex(ni raftio.NodeInfo, from, maxIndex uint64) (_ uint64, err error) {
	var lo [indexKeyLen]byte
	it := l.db.NewIter(&pebble.IterOptions{
		LowerBound: putIndexKey(lo[:], prefixEntry, ni.ShardID, ni.ReplicaID, from),
		UpperBound: indexRangeEnd(prefixEntry, ni.ShardID, ni.ReplicaID, maxIndex),
	})
	defer closeIter(it, &err)
	if !it.First() {
		if err := it.Error(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("raftlog: shard %d replica %d: no entry in [%d, %d] though the max index is %d",
			ni.ShardID, ni.ReplicaID, from, maxIndex, maxIndex)
	}
	index, ok := keyIndex(it.Key())
	if !ok {
		return 0, fmt.Errorf("raftlog: bad entry key %x", it.Key())
	}
	return index, nil
}

// RemoveEntriesTo removes the replica's entries with index up to and
// including index (raftio's contract: (0, index]; index 0, which Raft does
// not use, goes too), in one synced range deletion. The max index is left
// alone, as in dragonboat's store. The space is reclaimed later, by
// compactions (CompactEntriesTo asks for one).
//
// (Dragonboat's pebble store deletes the range [0, index), keeping entry
// index; the contract, and dragonboat's tan store, remove it. Either is
// safe: dragonboat only removes entries a saved snapshot covers.)
func (l *LogDB) RemoveEntriesTo(shardID, replicaID, index uint64) error {
	return l.db.DeleteRange(indexKey(prefixEntry, shardID, replicaID, 0),
		indexRangeEnd(prefixEntry, shardID, replicaID, index), pebble.Sync)
}

// CompactEntriesTo asks pebble to compact the key range of the replica's
// entries up to index, so that the space of removed entries is reclaimed
// soon rather than whenever pebble gets to it. The compaction runs in the
// background, one at a time; the returned channel is closed when it is done
// (a failed compaction is logged and closes it too: it only concerns disk
// space).
func (l *LogDB) CompactEntriesTo(shardID, replicaID, index uint64) (<-chan struct{}, error) {
	if l.closed.Load() {
		return nil, errClosed
	}
	return l.compactor.add(raftio.GetNodeInfo(shardID, replicaID), index), nil
}
