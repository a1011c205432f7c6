package seglog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/vfs"
)

const (
	// segmentSize is the size of a segment file. Every segment is written
	// full of zeros (or recycled) before use, so appends never grow a file
	// and each sync flushes data only.
	segmentSize = 64 << 20
	// maxSpares is how many retired segments are kept for recycling.
	maxSpares = 2
	// maxSegmentSize keeps offsets in 32 bits.
	maxSegmentSize = 1<<32 - 1

	segmentSuffix = ".seg"
	sparePrefix   = "spare-"
	// prepareName is the file a spare is zero-filled in, in the
	// background (prepareSpare); one left by a crash is replaced by the
	// next.
	prepareName = "spare.tmp"
)

// segmentName is the file name of segment seq: its sequence number, padded
// so that names sort in sequence order.
func segmentName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, segmentSuffix) }

// parseSegmentName returns the sequence number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, err == nil && seq > 0
}

// segment is one segment file of the log.
type segment struct {
	seq  uint64
	path string
	// r reads the file (ReadAt), for readers and for Open.
	r vfs.File
	// size is the file's size: how far records may go.
	size int64
	// end is where the segment's records end, once it is no longer the
	// one appended to; checkpoints list it.
	end int64
}

// spare is a retired segment file waiting to be recycled.
type spare struct {
	path string
	size int64
}

// segmentReader reads the records of a segment in order, through a window
// of the file, so that Open reads a segment in large preads.
type segmentReader struct {
	s      *segment
	buf    []byte
	bufOff int64
}

const readWindow = 1 << 20

// window returns the n bytes of the file at off.
func (r *segmentReader) window(off int64, n int) ([]byte, error) {
	if off >= r.bufOff && off+int64(n) <= r.bufOff+int64(len(r.buf)) {
		return r.buf[off-r.bufOff : off-r.bufOff+int64(n)], nil
	}
	size := min(max(int64(n), readWindow), r.s.size-off)
	if int64(cap(r.buf)) < size {
		r.buf = make([]byte, size)
	}
	r.buf = r.buf[:size]
	got, err := r.s.r.ReadAt(r.buf, off)
	if got < int(size) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		r.buf = r.buf[:0]
		return nil, fmt.Errorf("seglog: read %s at %d: %w", r.s.path, off, err)
	}
	r.bufOff = off
	return r.buf[:n], nil
}

// read reads the record at off. bad, when not empty, says why there is no
// valid record there (the end of the log, or corruption: the caller
// decides); err is an I/O error. The payload is valid until the next read.
func (r *segmentReader) read(off int64) (typ byte, payload []byte, next int64, bad string, err error) {
	if r.s.size-off < headerSize {
		return 0, nil, 0, "end of file", nil
	}
	h, err := r.window(off, headerSize)
	if err != nil {
		return 0, nil, 0, "", err
	}
	length := int64(binary.LittleEndian.Uint32(h[4:]))
	if seq := binary.LittleEndian.Uint64(h[8:]); seq != r.s.seq {
		return 0, nil, 0, fmt.Sprintf("segment number %d", seq), nil
	}
	if length == 0 || length > maxPayload || length > r.s.size-off-headerSize {
		return 0, nil, 0, fmt.Sprintf("length %d", length), nil
	}
	rec, err := r.window(off, headerSize+int(length))
	if err != nil {
		return 0, nil, 0, "", err
	}
	if crc32.Checksum(rec[4:], castagnoli) != binary.LittleEndian.Uint32(rec) {
		return 0, nil, 0, "checksum mismatch", nil
	}
	return rec[16], rec[headerSize:], off + headerSize + length, "", nil
}
