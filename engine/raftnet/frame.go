package raftnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Frame kinds (see the package doc, Wire).
const (
	frameBatch  byte = 1 // a raftpb.MessageBatch
	frameChunk  byte = 2 // a raftpb.Chunk of a snapshot
	frameEnd    byte = 3 // the sender of a snapshot is done; no payload
	frameEndAck byte = 4 // the receiver handled everything before frameEnd; no payload
)

const (
	// headerSize is a frame's kind, size and checksum.
	headerSize = 1 + 4 + 4
	// maxFrame bounds a payload, so that a corrupt size cannot make a
	// reader allocate gigabytes. dragonboat's batches stop growing at 64
	// MiB (one message may pass it alone) and its snapshot chunks are 2
	// MiB.
	maxFrame = 512 << 20
)

// preamble opens every connection, from the dialling side.
var preamble = [8]byte{'b', 'a', 't', 'o', 'n', 'r', 'n', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBadFrame reports a frame that does not check; its connection ends.
var errBadFrame = errors.New("raftnet: bad frame")

// putHeader writes the header of a frame of kind whose payload is
// payload into h, which must be headerSize bytes.
func putHeader(h []byte, kind byte, payload []byte) {
	h[0] = kind
	binary.LittleEndian.PutUint32(h[1:5], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[5:9], crc32.Checksum(payload, castagnoli))
}

// readFrame reads one frame from r into buf (grown when it is too small)
// and returns its kind and payload, which aliases buf until the next call.
func readFrame(r io.Reader, hdr []byte, buf []byte) (kind byte, payload []byte, newBuf []byte, err error) {
	if _, err := io.ReadFull(r, hdr[:headerSize]); err != nil {
		return 0, nil, buf, err
	}
	kind = hdr[0]
	size := binary.LittleEndian.Uint32(hdr[1:5])
	sum := binary.LittleEndian.Uint32(hdr[5:9])
	switch kind {
	case frameBatch, frameChunk:
	case frameEnd, frameEndAck:
		if size != 0 {
			return 0, nil, buf, fmt.Errorf("%w: kind %d with %d bytes of payload", errBadFrame, kind, size)
		}
	default:
		return 0, nil, buf, fmt.Errorf("%w: unknown kind %d", errBadFrame, kind)
	}
	if size > maxFrame {
		return 0, nil, buf, fmt.Errorf("%w: %d bytes, more than %d", errBadFrame, size, maxFrame)
	}
	if int(size) > cap(buf) {
		buf = make([]byte, size)
	}
	payload = buf[:size]
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, buf, err
	}
	if crc32.Checksum(payload, castagnoli) != sum {
		return 0, nil, buf, fmt.Errorf("%w: checksum mismatch", errBadFrame)
	}
	return kind, payload, buf, nil
}
