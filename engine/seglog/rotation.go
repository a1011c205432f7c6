package seglog

import (
	"fmt"
	"slices"

	"github.com/baton-dev/baton/engine/internal/durable"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/raftio"
)

// switchNow is rotate's need for a switch that is not for want of room.
const switchNow = -1

// rotate starts a new active segment with room for a record of need bytes
// after its checkpoint (unless the record fits after all, or need is
// switchNow), then retires the segments no live entry points into.
// Callers hold mu.
//
// Order matters for power loss: the old segment is synced before the new
// one's checkpoint names its end (so reading it up to there never meets a
// torn record), the new file and its name are durable before anything is
// written in it, and the checkpoint is synced before any older segment is
// retired (so the metadata an old segment held is never only there).
func (l *LogDB) rotate(need int64) error {
	// Waiting releases mu: another goroutine may switch segments
	// meanwhile, and then the record may fit after all.
	for l.syncing || (l.preparing && len(l.spares) == 0) {
		l.synced.Wait()
	}
	if l.w != nil && need != switchNow && l.off+need <= l.active.size {
		return nil
	}
	if l.w != nil {
		if err := l.w.Sync(); err != nil {
			return fmt.Errorf("seglog: sync %s: %w", l.active.path, err)
		}
		l.durable = l.written
		l.active.end = l.off
	}
	ckpt, liveSegs, err := l.checkpoint()
	if err != nil {
		return err
	}
	reloc, err := l.relocation()
	if err != nil {
		return err
	}
	size := max(l.segmentSize, int64(len(ckpt)+len(reloc))+max(need, 0))
	if size > maxSegmentSize {
		return fmt.Errorf("seglog: a segment of %d bytes is needed, at most %d", size, int64(maxSegmentSize))
	}
	seg, w, err := l.createSegment(l.nextSeq, size)
	if err != nil {
		return err
	}
	l.nextSeq++
	sealRecord(ckpt, seg.seq, recCheckpoint)
	_, err = w.Write(ckpt)
	if err == nil && reloc != nil {
		// reloc is applied below: Write gets a copy (see appendLocked).
		sealRecord(reloc, seg.seq, recBatch)
		l.wbuf = append(l.wbuf[:0], reloc...)
		_, err = w.Write(l.wbuf)
	}
	if err == nil {
		err = w.Sync()
	}
	if err != nil {
		_ = w.Close()
		_ = seg.r.Close()
		return fmt.Errorf("seglog: write checkpoint %s: %w", seg.path, err)
	}
	if l.w != nil {
		if err := l.w.Close(); err != nil {
			return fmt.Errorf("seglog: close %s: %w", l.active.path, err)
		}
	}
	l.active, l.w, l.off = seg, w, int64(len(ckpt)+len(reloc))
	l.written += uint64(len(ckpt) + len(reloc))
	l.durable = l.written

	l.files.Lock()
	l.segs[seg.seq] = seg
	var dead []*segment
	for seq, s := range l.segs {
		if s != seg && !liveSegs[seq] {
			dead = append(dead, s)
			delete(l.segs, seq)
		}
	}
	l.files.Unlock()
	if reloc != nil {
		// Only now, with the new segment open to readers. The segments
		// copied from are left for the next switch to retire: until a
		// checkpoint that does not list them is durable, Open needs them.
		l.idx.mu.Lock()
		err := l.idx.apply(recBatch, reloc[headerSize:], seg.seq, int64(len(ckpt))+headerSize, false)
		l.idx.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, s := range dead {
		l.retire(s)
	}
	return nil
}

// prepareSpare starts zero-filling a spare segment file in the background
// when there is none, so that the next segment switch recycles it instead
// of zero-filling a new file while holding mu (64 MiB, that would stall
// every save of the node). appendLocked calls it once the active segment
// is half full: a node that writes little never needs the spare. Callers
// hold mu.
func (l *LogDB) prepareSpare() {
	if len(l.spares) > 0 || l.preparing || l.err != nil {
		return
	}
	l.preparing = true
	size := l.segmentSize
	// A name no other spare has: spare names of retired segments carry
	// their (lower) sequence numbers.
	path := l.fs.PathJoin(l.dir, fmt.Sprintf("%snext-%020d", sparePrefix, l.nextSeq))
	l.background.Add(1)
	go func() {
		defer l.background.Done()
		// Under a temporary name until complete, so that a spare is
		// always full size.
		tmp := l.fs.PathJoin(l.dir, prepareName)
		f, err := durable.CreateZeroed(l.fs, tmp, size)
		if err == nil {
			err = f.Close()
		}
		if err == nil {
			err = l.fs.Rename(tmp, path)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.preparing = false
		l.synced.Broadcast()
		if err != nil {
			plog.Warningf("prepare a spare segment: %v", err)
			return
		}
		l.spares = append(l.spares, spare{path: path, size: size})
		l.created++
	}()
}

// deadSegments counts the segments other than the active one that hold no
// live entry. Callers hold mu.
func (l *LogDB) deadSegments() int {
	l.idx.mu.RLock()
	defer l.idx.mu.RUnlock()
	n := 0
	for seq := range l.segs {
		if _, live := l.idx.live[seq]; seq != l.active.seq && !live {
			n++
		}
	}
	return n
}

// checkpoint returns the payload of the next segment's checkpoint record
// (after headerSize reserved bytes): every replica's metadata, then each
// segment still holding live entries with its end. It also returns those
// segments. Callers hold mu, so no record is applied meanwhile.
func (l *LogDB) checkpoint() ([]byte, map[uint64]bool, error) {
	l.idx.mu.RLock()
	ckpt, _ := appendOp(make([]byte, headerSize, 4096), opStart, raftio.NodeInfo{}, l.nextSeq, 0)
	ckpt, err := l.idx.appendCheckpoint(ckpt)
	liveSegs := make(map[uint64]bool, len(l.idx.live))
	for seq := range l.idx.live {
		liveSegs[seq] = true
	}
	l.idx.mu.RUnlock()
	if err != nil {
		return nil, nil, err
	}
	seqs := make([]uint64, 0, len(liveSegs))
	for seq := range liveSegs {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		s := l.segs[seq]
		if s == nil {
			return nil, nil, fmt.Errorf("seglog: live entries in segment %d, which is not open", seq)
		}
		ckpt = appendPosOp(ckpt, opSegment, raftio.NodeInfo{}, seq, uint64(s.end))
	}
	return ckpt, liveSegs, nil
}

// createSegment creates segment seq of at least size bytes, recycling a
// spare when one is large enough and zero-filling a new file otherwise, and
// syncs the directory so that its name survives a power loss.
func (l *LogDB) createSegment(seq uint64, size int64) (*segment, vfs.File, error) {
	path := l.fs.PathJoin(l.dir, segmentName(seq))
	var w vfs.File
	for w == nil && len(l.spares) > 0 {
		sp := l.spares[len(l.spares)-1]
		l.spares = l.spares[:len(l.spares)-1]
		if sp.size < size {
			if err := l.fs.Remove(sp.path); err != nil {
				plog.Warningf("remove spare %s: %v", sp.path, err)
			}
			continue
		}
		f, err := l.fs.ReuseForWrite(sp.path, path)
		if err != nil {
			plog.Warningf("recycle %s as %s: %v", sp.path, path, err)
			continue
		}
		w, size = f, sp.size
		l.recycled++
	}
	if w == nil {
		f, err := durable.CreateZeroed(l.fs, path, size)
		if err != nil {
			return nil, nil, fmt.Errorf("seglog: %w", err)
		}
		w = f
		l.created++
	}
	// Syncs through pebble's syncing file are fdatasyncs (on Linux): the
	// file's size never changes, so there is no metadata to flush. It
	// never syncs by itself (BytesPerSync 0) nor on close (rotate syncs).
	w = vfs.NewSyncingFile(w, vfs.SyncingFileOptions{NoSyncOnClose: true})
	err := durable.SyncDir(l.fs, l.dir)
	var s *segment
	if err == nil {
		s = &segment{seq: seq, path: path, size: size}
		s.r, err = l.fs.Open(path)
	}
	if err != nil {
		_ = w.Close()
		return nil, nil, fmt.Errorf("seglog: create segment %s: %w", path, err)
	}
	return s, w, nil
}

// retire closes a segment that holds nothing live and keeps its file as a
// spare (renamed, so Open does not take it for a segment, though it would
// know it is retired: no checkpoint lists it), or removes it when there are
// spares enough or it is larger than a segment. A failure here costs disk
// space only, so it is logged, not returned; the directory is synced with
// the next segment's creation.
func (l *LogDB) retire(s *segment) {
	if err := s.r.Close(); err != nil {
		plog.Warningf("close %s: %v", s.path, err)
	}
	l.keepOrRemove(s.path, s.seq, s.size)
}

// keepOrRemove makes the file at path, of segment seq, a spare or removes
// it.
func (l *LogDB) keepOrRemove(path string, seq uint64, size int64) {
	if len(l.spares) < maxSpares && size == l.segmentSize {
		sp := l.fs.PathJoin(l.dir, fmt.Sprintf("%s%020d", sparePrefix, seq))
		if err := l.fs.Rename(path, sp); err == nil {
			l.spares = append(l.spares, spare{path: sp, size: size})
			return
		}
	}
	if err := l.fs.Remove(path); err != nil {
		plog.Warningf("remove %s: %v", path, err)
	}
}
