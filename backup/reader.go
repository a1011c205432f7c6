package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Reader reads a backup file: NewReader reads the header, Next moves to
// each shard's frame in turn, and Read reads the current frame's part.
// Every frame's checksum is checked when its part has been read to its
// end, by the caller or by the next Next, so a file has been checked whole
// once Next has returned io.EOF. Errors are sticky.
type Reader struct {
	r      *bufio.Reader
	shards uint64
	next   uint64 // the shard of the next frame
	part   Part   // the current frame's
	left   uint64 // bytes of the current part not read yet
	crc    uint32 // of the current frame so far
	inPart bool   // between Next and the end of the part
	err    error
}

// NewReader reads the header of the backup file r.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [headerLen]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, readErr(err, "the header")
	}
	if string(hdr[:4]) != Magic {
		return nil, bad("not a baton backup")
	}
	if hdr[4] != Version {
		return nil, bad("format version %d; this baton reads version %d", hdr[4], Version)
	}
	shards := binary.LittleEndian.Uint32(hdr[5:])
	if shards == 0 {
		return nil, bad("a backup of 0 shards")
	}
	return &Reader{r: br, shards: uint64(shards), next: 1}, nil
}

// Shards is the number of shards the backup holds, one frame each.
func (r *Reader) Shards() int { return int(r.shards) }

// Next moves to the next shard's frame and returns it; Read then reads its
// part. What the caller left unread of the previous part is read and
// checked first. After the last frame, Next returns io.EOF if the file
// ends there.
func (r *Reader) Next() (Part, error) {
	if r.inPart {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return Part{}, err
		}
	}
	if r.err != nil {
		return Part{}, r.err
	}
	if r.next > r.shards {
		switch _, err := r.r.ReadByte(); {
		case err == nil:
			r.err = bad("data after the last shard")
		case errors.Is(err, io.EOF):
			r.err = io.EOF
		default:
			r.err = fmt.Errorf("backup: read: %w", err)
		}
		return Part{}, r.err
	}
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		r.err = readErr(err, fmt.Sprintf("shard %d of %d", r.next, r.shards))
		return Part{}, r.err
	}
	p := Part{
		Shard:  uint64(binary.LittleEndian.Uint32(hdr[:])),
		Locks:  binary.LittleEndian.Uint64(hdr[4:]),
		Length: binary.LittleEndian.Uint64(hdr[12:]),
	}
	if p.Shard != r.next {
		r.err = bad("frame %d is of shard %d", r.next, p.Shard)
		return Part{}, r.err
	}
	r.part, r.left, r.inPart = p, p.Length, true
	r.crc = crc32.Update(0, crcTable, hdr[:])
	r.next++
	return p, nil
}

// Read reads the current frame's part. At its end it returns io.EOF if the
// frame's checksum matches, else an error matching ErrBad; it returns
// io.EOF too before the first Next and between the end of a part and the
// next Next.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if !r.inPart {
		return 0, io.EOF
	}
	if r.left == 0 {
		return 0, r.endPart()
	}
	if uint64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.crc = crc32.Update(r.crc, crcTable, p[:n])
	r.left -= uint64(n)
	if err != nil && (n == 0 || !errors.Is(err, io.EOF)) {
		r.inPart = false
		r.err = readErr(err, fmt.Sprintf("shard %d", r.part.Shard))
		return n, r.err
	}
	return n, nil
}

// endPart reads and checks the current frame's checksum.
func (r *Reader) endPart() error {
	r.inPart = false
	var sum [crcLen]byte
	if _, err := io.ReadFull(r.r, sum[:]); err != nil {
		r.err = readErr(err, fmt.Sprintf("shard %d", r.part.Shard))
		return r.err
	}
	if binary.LittleEndian.Uint32(sum[:]) != r.crc {
		r.err = bad("shard %d: checksum mismatch", r.part.Shard)
		return r.err
	}
	return io.EOF
}

// readErr turns the end of the file where more was expected into a
// truncation error, and passes anything else on.
func readErr(err error, where string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bad("truncated in %s", where)
	}
	return fmt.Errorf("backup: read %s: %w", where, err)
}

// Check reads the backup file r to its end and checks its framing and
// every frame's checksum (not what the parts hold: batond --restore
// checks that). It returns the frames.
func Check(r io.Reader) ([]Part, error) {
	br, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	var parts []Part
	for {
		p, err := br.Next()
		if errors.Is(err, io.EOF) {
			return parts, nil
		}
		if err != nil {
			return parts, err
		}
		parts = append(parts, p)
	}
}
