package backup

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Writer writes a backup file: NewWriter writes the header, Part the frame
// of each shard in order, and Close checks that none is missing. A Writer
// that failed stays failed: each later call returns the first error.
type Writer struct {
	w      io.Writer
	shards uint64
	next   uint64 // the shard whose frame comes next
	err    error
}

// NewWriter writes the header of a backup of shards shards to w.
func NewWriter(w io.Writer, shards int) (*Writer, error) {
	if shards < 1 || shards > math.MaxUint32 {
		return nil, fmt.Errorf("backup: %d shards", shards)
	}
	hdr := append([]byte(Magic), Version)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(shards))
	if _, err := w.Write(hdr); err != nil {
		return nil, err
	}
	return &Writer{w: w, shards: uint64(shards), next: 1}, nil
}

// Part writes the next shard's frame. p.Shard must be that shard, and
// write must write exactly p.Length bytes, the part, to the writer it is
// given (which checksums them on their way to the file).
func (w *Writer) Part(p Part, write func(io.Writer) error) error {
	if w.err != nil {
		return w.err
	}
	if w.next > w.shards || p.Shard != w.next {
		return fmt.Errorf("backup: part of shard %d where shard %d of %d is due", p.Shard, w.next, w.shards)
	}
	hdr := binary.LittleEndian.AppendUint32(make([]byte, 0, frameHeaderLen), uint32(p.Shard))
	hdr = binary.LittleEndian.AppendUint64(hdr, p.Locks)
	hdr = binary.LittleEndian.AppendUint64(hdr, p.Length)
	if _, err := w.w.Write(hdr); err != nil {
		return w.fail(err)
	}
	cw := &checksumWriter{w: w.w, crc: crc32.Update(0, crcTable, hdr)}
	if err := write(cw); err != nil {
		return w.fail(err)
	}
	if cw.n != p.Length {
		return w.fail(fmt.Errorf("backup: shard %d: the part is %d bytes, not the %d its frame says", p.Shard, cw.n, p.Length))
	}
	if _, err := w.w.Write(binary.LittleEndian.AppendUint32(nil, cw.crc)); err != nil {
		return w.fail(err)
	}
	w.next++
	return nil
}

// Close reports an error unless every shard's frame was written. It does
// not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next <= w.shards {
		return fmt.Errorf("backup: %d of %d shards written", w.next-1, w.shards)
	}
	return nil
}

func (w *Writer) fail(err error) error {
	w.err = err
	return err
}

// checksumWriter passes writes on, counting and checksumming them.
type checksumWriter struct {
	w   io.Writer
	n   uint64
	crc uint32
}

func (c *checksumWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, crcTable, p[:n])
	c.n += uint64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}
