package seglog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lni/dragonboat/v4/logger"
)

var plog = logger.GetLogger("seglog")

// recover rebuilds the index from the segment files and starts a new
// active segment. Callers hold nothing; nothing else runs yet.
//
// The newest segment whose first record is a valid checkpoint is the last
// one, L. Only the newest file may lack one (a power loss while it was
// being started): it holds nothing and becomes a spare; a second such file
// is corruption. L's checkpoint lists the older segments that still hold
// live entries and where each ends; they are replayed in order up to those
// ends, and any invalid record before its end is an error naming the file
// and offset. Older segments it does not list are retired ones whose
// rename a power loss undid; they become spares. L itself is replayed up to
// its first invalid record: a torn or unsynced tail is the end of the log.
// Nothing is written into L after that point, ever: the new segment's
// checkpoint records where L ends, and the next Open stops reading there.
func (l *LogDB) recover() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("seglog: list %s: %w", l.dir, err)
	}
	var seqs []uint64
	for _, name := range names {
		if seq, ok := parseSegmentName(name); ok {
			seqs = append(seqs, seq)
		} else if name == prepareName {
			// A spare whose zero-filling a crash cut short; the next
			// one would replace it anyway.
			if err := l.fs.Remove(l.fs.PathJoin(l.dir, name)); err != nil {
				plog.Warningf("remove %s: %v", name, err)
			}
		} else if strings.HasPrefix(name, sparePrefix) {
			path := l.fs.PathJoin(l.dir, name)
			info, err := l.fs.Stat(path)
			if err != nil {
				return fmt.Errorf("seglog: %w", err)
			}
			l.spares = append(l.spares, spare{path: path, size: info.Size()})
		}
	}
	slices.Sort(seqs)
	if len(seqs) > 0 {
		l.nextSeq = seqs[len(seqs)-1] + 1
	} else {
		l.nextSeq = 1
	}

	last := -1
	for k := len(seqs) - 1; k >= 0; k-- {
		s, err := l.openSegment(seqs[k])
		if err != nil {
			return err
		}
		r := segmentReader{s: s}
		typ, _, _, bad, err := r.read(0)
		if err == nil && bad == "" && typ != recCheckpoint {
			err = fmt.Errorf("seglog: %s: valid record of record type %d at offset 0, not a checkpoint", s.path, typ)
		}
		if err != nil || bad == "" {
			l.segs[s.seq] = s
			if err != nil {
				return err
			}
			last = k
			break
		}
		_ = s.r.Close()
		if k != len(seqs)-1 {
			return fmt.Errorf("seglog: %s: no checkpoint at offset 0 (%s), and it is not the last segment", s.path, bad)
		}
		// The newest file, started but never given its checkpoint.
		l.keepOrRemove(s.path, s.seq, s.size)
	}
	if last < 0 {
		return l.rotate(0)
	}

	lastSeg := l.segs[seqs[last]]
	ends, err := checkpointSegments(lastSeg)
	if err != nil {
		return err
	}
	for seq := range ends {
		if !slices.Contains(seqs[:last], seq) {
			return fmt.Errorf("seglog: segment %s, which the checkpoint of %s lists, is missing",
				segmentName(seq), lastSeg.path)
		}
	}
	for _, seq := range seqs[:last] {
		s, err := l.openSegment(seq)
		if err != nil {
			return err
		}
		end, listed := ends[seq]
		if !listed {
			_ = s.r.Close()
			l.keepOrRemove(s.path, s.seq, s.size)
			continue
		}
		l.segs[seq] = s
		if _, err := l.replay(s, end); err != nil {
			return err
		}
		s.end = end
	}
	end, err := l.replay(lastSeg, -1)
	if err != nil {
		return err
	}
	lastSeg.end = end
	// The new segment's checkpoint will say the last one ends here, so
	// all of it must be durable first: after a crash (not a power loss)
	// its unsynced records are still in the page cache, and Open read
	// them.
	if err := lastSeg.r.Sync(); err != nil {
		return fmt.Errorf("seglog: sync %s: %w", lastSeg.path, err)
	}
	for len(l.spares) > maxSpares {
		sp := l.spares[len(l.spares)-1]
		l.spares = l.spares[:len(l.spares)-1]
		if err := l.fs.Remove(sp.path); err != nil {
			plog.Warningf("remove %s: %v", sp.path, err)
		}
	}
	return l.rotate(0)
}

// openSegment opens segment seq for reading.
func (l *LogDB) openSegment(seq uint64) (*segment, error) {
	path := l.fs.PathJoin(l.dir, segmentName(seq))
	f, err := l.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seglog: open %s: %w", path, err)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seglog: stat %s: %w", path, err)
	}
	return &segment{seq: seq, path: path, r: f, size: info.Size()}, nil
}

// checkpointSegments returns the segments listed by s's checkpoint and
// their ends.
func checkpointSegments(s *segment) (map[uint64]int64, error) {
	r := segmentReader{s: s}
	_, payload, _, _, err := r.read(0)
	if err != nil {
		return nil, err
	}
	ends := make(map[uint64]int64)
	or := opReader{payload: payload}
	var o op
	for {
		ok, err := or.next(&o)
		if err != nil {
			return nil, fmt.Errorf("seglog: %s: checkpoint: %w", s.path, err)
		}
		if !ok {
			break
		}
		if o.typ != opSegment {
			continue
		}
		end, err := o.posData()
		if err != nil {
			return nil, fmt.Errorf("seglog: %s: checkpoint: %w", s.path, err)
		}
		if o.index >= s.seq {
			return nil, fmt.Errorf("seglog: %s: checkpoint lists segment %d, not older than itself", s.path, o.index)
		}
		ends[o.index] = int64(end)
	}
	return ends, nil
}

// replay applies the records of s to the index, up to end, where the
// records must end exactly; or, with end < 0 (the last segment), up to the
// first invalid record. It returns where the records ended.
func (l *LogDB) replay(s *segment, end int64) (int64, error) {
	r := segmentReader{s: s}
	off := int64(0)
	for end < 0 || off < end {
		typ, payload, next, bad, err := r.read(off)
		if err != nil {
			return 0, err
		}
		if bad != "" {
			if end < 0 {
				return off, nil
			}
			return 0, fmt.Errorf("seglog: %s: invalid record at offset %d (%s), before the segment's end at %d",
				s.path, off, bad, end)
		}
		if end >= 0 && next > end {
			return 0, fmt.Errorf("seglog: %s: record at offset %d runs past the segment's end at %d", s.path, off, end)
		}
		if err := l.idx.apply(typ, payload, s.seq, off+headerSize, false); err != nil {
			return 0, fmt.Errorf("seglog: %s: record at offset %d: %w", s.path, off, err)
		}
		off = next
	}
	return off, nil
}
