package seglog

import "fmt"

// write appends rec (headerSize reserved bytes, then a recBatch payload),
// applies it to the index, and, if mustSync, returns only once it is
// synced. The index changes as soon as the record is in the file, before
// the sync, so that the index always follows the log's order; a failed
// sync fails this call and every later write, as does a failed write.
func (l *LogDB) write(rec []byte, mustSync bool) error {
	end, err := l.appendRecord(rec)
	if err != nil || !mustSync {
		return err
	}
	return l.syncTo(end)
}

// appendRecord is write without the sync: it returns the log's size once
// rec is in the file, which syncTo takes to make rec durable.
func (l *LogDB) appendRecord(rec []byte) (end uint64, err error) {
	if len(rec)-headerSize > maxPayload {
		return 0, fmt.Errorf("seglog: record of %d bytes, at most %d", len(rec)-headerSize, maxPayload)
	}
	l.mu.Lock()
	seq, payloadOff, err := l.appendLocked(recBatch, rec)
	if err == nil {
		l.idx.mu.Lock()
		err = l.idx.apply(recBatch, rec[headerSize:], seq, payloadOff, true)
		l.idx.mu.Unlock()
		if err != nil {
			// The record is in the log and the index does not hold
			// it: stop writing rather than diverge further.
			l.err = err
		}
	}
	end = l.written
	l.mu.Unlock()
	return end, err
}

// appendLocked writes the record at the end of the active segment, first
// starting a new segment if it does not fit, and returns where its payload
// went. Callers hold mu.
func (l *LogDB) appendLocked(typ byte, rec []byte) (seq uint64, payloadOff int64, err error) {
	if l.err != nil {
		return 0, 0, l.err
	}
	if l.off+int64(len(rec)) > l.active.size {
		if err := l.rotate(int64(len(rec))); err != nil {
			l.err = err
			return 0, 0, err
		}
	}
	sealRecord(rec, l.active.seq, typ)
	// vfs.File.Write may modify what it is given (pebble's in-memory
	// file system does, under -race), and rec is applied after the write.
	l.wbuf = append(l.wbuf[:0], rec...)
	_, err = l.w.Write(l.wbuf)
	if cap(l.wbuf) > maxKeptBuffer {
		l.wbuf = nil
	}
	if err != nil {
		l.err = fmt.Errorf("seglog: write %s at %d: %w", l.active.path, l.off, err)
		return 0, 0, l.err
	}
	payloadOff = l.off + headerSize
	l.off += int64(len(rec))
	l.written += uint64(len(rec))
	if l.off > l.active.size/2 {
		l.prepareSpare()
	}
	return l.active.seq, payloadOff, nil
}

// syncTo returns once the first end bytes written since Open are synced.
// This is the group commit: one goroutine syncs at a time, outside mu, so
// that others keep appending meanwhile; those that need a sync wait for
// it, and the first of them to wake syncs everything written by then, for
// all of them at once.
func (l *LogDB) syncTo(end uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.durable < end {
		if l.err != nil {
			return l.err
		}
		if l.syncing {
			l.synced.Wait()
			continue
		}
		l.syncing = true
		w, target, path := l.w, l.written, l.active.path
		l.mu.Unlock()
		err := w.Sync()
		l.mu.Lock()
		l.syncing = false
		l.synced.Broadcast()
		if err != nil {
			if l.err == nil {
				l.err = fmt.Errorf("seglog: sync %s: %w", path, err)
			}
			return l.err
		}
		l.durable = max(l.durable, target)
	}
	return nil
}
