package seglog

import (
	"fmt"
	"slices"

	"github.com/lni/dragonboat/v4/raftio"
)

const (
	// relocateLive is how little of a segment may still be live (a
	// fraction of segmentSize: 1/relocateLive) for its live entries to be
	// copied forward at a segment switch.
	relocateLive = 8
	// relocateMaxEntries bounds the entries copied at one switch, which
	// holds the append mutex; so does half a segment of bytes.
	relocateMaxEntries = 4096
)

// movedEntry is a live entry to copy forward.
type movedEntry struct {
	ni    raftio.NodeInfo
	index uint64
	l     loc
}

// relocation returns a record (after headerSize reserved bytes) that copies
// forward the live entries of the older segments that are mostly dead, so
// that a few long-lived entries (a replica that writes little, and is
// rarely snapshotted) do not keep whole segments: once the copies are in
// the index, those segments hold nothing live and the next switch retires
// them. It returns nil when there is nothing to copy. The copies keep
// their replica and index (the record is applied like a save of them);
// their bytes, each entry's pb.Entry encoding, are copied as they are.
// Callers hold mu.
func (l *LogDB) relocation() ([]byte, error) {
	l.idx.mu.RLock()
	var seqs []uint64
	for seq, le := range l.idx.live {
		if (l.active == nil || seq != l.active.seq) && le.bytes <= l.segmentSize/relocateLive {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs) // oldest first
	pick := make(map[uint64]bool)
	want, bytes := 0, int64(0)
	for _, seq := range seqs {
		le := l.idx.live[seq]
		if want+le.n > relocateMaxEntries || bytes+le.bytes > l.segmentSize/2 {
			break
		}
		pick[seq] = true
		want += le.n
		bytes += le.bytes
	}
	var moved []movedEntry
	if want > 0 {
		moved = make([]movedEntry, 0, want)
		for ni, r := range l.idx.replicas {
			for _, run := range r.entries {
				for k, lc := range run.locs {
					if pick[lc.seg] {
						moved = append(moved, movedEntry{ni: ni, index: run.first + uint64(k), l: lc})
					}
				}
			}
			if len(moved) == want {
				break
			}
		}
	}
	l.idx.mu.RUnlock()
	if len(moved) == 0 {
		return nil, nil
	}
	l.relocated += len(moved)
	rec := make([]byte, headerSize)
	for _, m := range moved {
		var d []byte
		rec, d = appendOp(rec, opEntry, m.ni, m.index, int(m.l.n))
		s := l.segs[m.l.seg]
		if s == nil {
			return nil, fmt.Errorf("seglog: live entries in segment %d, which is not open", m.l.seg)
		}
		if n, err := s.r.ReadAt(d, int64(m.l.off)); n != len(d) {
			return nil, fmt.Errorf("seglog: read %s at %d: %d of %d bytes: %v", s.path, m.l.off, n, len(d), err)
		}
	}
	return rec, nil
}
