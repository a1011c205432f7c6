package seglog

import (
	"fmt"
	"math"

	"github.com/baton-dev/baton/engine/internal/readback"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

const (
	// locateBatch bounds how many locations IterateEntries copies out of
	// the index at a time.
	locateBatch = 1024
	// readGap is how far apart two entries of one segment may be and still
	// be read with one pread: the op header between the entries of a save.
	readGap = 64
	// maxRead bounds one pread.
	maxRead = 1 << 20
)

// IterateEntries appends to ents the replica's consecutive entries from
// low up to (not including) high, and adds their sizes (each entry's
// SizeUpperLimit, as dragonboat counts them) to size, with dragonboat's
// store's rules: entries above the max index are never returned; it stops after
// the first entry that takes size past maxSize (so that entry is included);
// it stops at the first missing index, without an error.
//
// Entries are read back from the segment files with pread, several at a
// time when they sit together. Checking each entry and counting it against
// maxSize is engine/internal/readback's.
func (l *LogDB) IterateEntries(ents []pb.Entry, size uint64, shardID, replicaID, low, high, maxSize uint64) ([]pb.Entry, uint64, error) {
	ni := raftio.GetNodeInfo(shardID, replicaID)
	l.files.RLock()
	defer l.files.RUnlock()
	var locs []loc
	var buf []byte
	got := readback.Start(ents, size, low, maxSize)
	for {
		var more bool
		locs, more = l.locate(locs[:0], ni, got.Next(), high, got.Budget())
		if len(locs) == 0 {
			return got.Entries, got.Size, nil
		}
		for k := 0; k < len(locs); {
			// Entries k..j-1 are read with one pread.
			j := k + 1
			for j < len(locs) && locs[j].seg == locs[k].seg && locs[j].off >= locs[j-1].off+locs[j-1].n &&
				locs[j].off-(locs[j-1].off+locs[j-1].n) <= readGap && locs[j].off+locs[j].n-locs[k].off <= maxRead {
				j++
			}
			start, stop := int64(locs[k].off), int64(locs[j-1].off)+int64(locs[j-1].n)
			buf = grow(buf[:0], int(stop-start))
			if err := l.readAt(locs[k].seg, buf, start); err != nil {
				return nil, 0, err
			}
			for ; k < j; k++ {
				// The entry does not keep buf, which is reused.
				full, err := got.Add(buf[int64(locs[k].off)-start:][:locs[k].n])
				if err != nil {
					return nil, 0, fmt.Errorf("seglog: shard %d replica %d: %w", shardID, replicaID, err)
				}
				if full {
					return got.Entries, got.Size, nil
				}
			}
		}
		if !more {
			return got.Entries, got.Size, nil
		}
	}
}

// locate appends to locs the locations of the replica's consecutive
// entries from low, below high and the max index, until their encoded
// sizes pass budget (readback.Result.Budget) or locateBatch of them. An
// entry's encoding is smaller than its SizeUpperLimit, so the entry that
// takes the size past maxSize is normally among them; more says that
// entries may follow, and IterateEntries then asks again.
func (l *LogDB) locate(locs []loc, ni raftio.NodeInfo, low, high, budget uint64) (_ []loc, more bool) {
	l.idx.mu.RLock()
	defer l.idx.mu.RUnlock()
	r := l.idx.get(ni)
	if r == nil || !r.hasMax {
		return locs, false
	}
	if r.maxIndex < math.MaxUint64 && high > r.maxIndex+1 {
		high = r.maxIndex + 1
	}
	k := r.entries.find(low + 1)
	if low >= high || k == len(r.entries) || r.entries[k].first > low {
		return locs, false
	}
	run := &r.entries[k]
	var bytes uint64
	for i := low; i < high && i < run.end(); i++ {
		if len(locs) == locateBatch || bytes > budget {
			return locs, true
		}
		lc := run.locs[i-run.first]
		locs = append(locs, lc)
		bytes += uint64(lc.n)
	}
	return locs, false
}

// readAt fills buf from segment seq at off. Callers hold files (read).
func (l *LogDB) readAt(seq uint64, buf []byte, off int64) error {
	s := l.segs[seq]
	if s == nil {
		return fmt.Errorf("seglog: segment %d of a live entry is not open", seq)
	}
	n, err := s.r.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	return fmt.Errorf("seglog: read %s at %d: %d of %d bytes: %v", s.path, off, n, len(buf), err)
}

// RemoveEntriesTo removes the replica's entries with index up to and
// including index (raftio's contract: (0, index]), with one synced record.
// The max index is left alone, as in dragonboat's store. Their space is
// reclaimed when nothing live is left in their segments (see
// CompactEntriesTo).
func (l *LogDB) RemoveEntriesTo(shardID, replicaID, index uint64) error {
	rec, _ := appendOp(make([]byte, headerSize), opCompact, raftio.GetNodeInfo(shardID, replicaID), index, 0)
	return l.write(rec, true)
}

// CompactEntriesTo retires the segments that hold nothing live any more,
// when there are more of them than spares to keep, by switching to a new
// segment now (two syncs): a switch is what makes retiring safe (see
// rotate), and a node under load switches often enough by itself, but one
// that writes little could otherwise keep dead segments for long. The
// returned channel is closed: the work is done when it returns.
func (l *LogDB) CompactEntriesTo(shardID, replicaID, index uint64) (<-chan struct{}, error) {
	if l.closed.Load() {
		return nil, errClosed
	}
	l.mu.Lock()
	err := l.err
	if err == nil && l.deadSegments() > maxSpares {
		if err = l.rotate(switchNow); err != nil {
			l.err = err
		}
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ch := make(chan struct{})
	close(ch)
	return ch, nil
}
