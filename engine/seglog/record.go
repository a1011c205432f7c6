package seglog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/lni/dragonboat/v4/raftio"
)

// A record is a header and a payload:
//
//	crc32c  uint32  Castagnoli CRC of everything after it (header and payload)
//	length  uint32  payload length, never 0
//	seq     uint64  the sequence number of the segment the record was written in
//	type    uint8   recBatch or recCheckpoint
//	payload [length]byte
//
// All integers are little-endian. The sequence number is what tells a
// record of this segment from the leftovers of a recycled file (whose
// records carry an older segment's number) and from zeros; the CRC catches
// torn writes.
const headerSize = 17

// Record types.
const (
	// recBatch is one write of the store: the ops of a SaveRaftState
	// call, a bootstrap record, a compaction, and so on, applied in order.
	recBatch byte = 1
	// recCheckpoint starts every segment: every replica's metadata
	// (bootstrap, state, snapshot, max index, removal points) and the
	// segments before it that still hold live entries, with their ends.
	recCheckpoint byte = 2
)

// maxPayload bounds a record's payload, so that a segment sized to fit one
// record still has 32-bit offsets (entry locations are 32-bit).
const maxPayload = 1<<31 - 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sealRecord fills in the header of rec, whose first headerSize bytes are
// reserved for it and the rest is the payload.
func sealRecord(rec []byte, seq uint64, typ byte) {
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)-headerSize))
	binary.LittleEndian.PutUint64(rec[8:], seq)
	rec[16] = typ
	binary.LittleEndian.PutUint32(rec[0:], crc32.Checksum(rec[4:], castagnoli))
}

// Ops are the payload of both record types, one after the other:
//
//	type    uint8
//	shard   uint64
//	replica uint64
//	index   uint64  an entry's or snapshot's index, the max index, ... (see opType)
//	length  uint32
//	data    [length]byte  a pb type's own encoding, or an 8-byte position
//
// An entry's data is its pb.Entry encoding alone, so IterateEntries reads
// it back with one pread and one Unmarshal.
const opHeaderSize = 29

type opType byte

const (
	opBootstrap   opType = iota + 1 // data: pb.Bootstrap
	opState                         // data: pb.State
	opSnapshot                      // index, data pb.Snapshot: kept if newer than the replica's
	opSnapshotSet                   // index, data pb.Snapshot: replaces the replica's (ImportSnapshot, checkpoints)
	opMaxIndex                      // index: the replica's max index
	opEntry                         // index, data pb.Entry
	opCompact                       // index: entries up to it saved before this op are removed
	opRemove                        // the replica's data is removed
	opFloor                         // checkpoint: index and data (8 bytes) are a replica's last opCompact and its position
	opReset                         // checkpoint: data (8 bytes) is the position of the replica's last opRemove
	opSegment                       // checkpoint: index is a segment's sequence number, data (8 bytes) its end offset
	opStart                         // first op of a checkpoint, so that its payload is never empty: index is the segment's sequence number
)

// op is one parsed op; data aliases the record's payload.
type op struct {
	typ   opType
	ni    raftio.NodeInfo
	index uint64
	data  []byte
	// off is where data starts in the payload.
	off int
}

// appendOp appends an op header for n bytes of data to buf and returns the
// extended buffer and the n bytes of data to fill in.
func appendOp(buf []byte, typ opType, ni raftio.NodeInfo, index uint64, n int) ([]byte, []byte) {
	start := len(buf)
	buf = grow(buf, opHeaderSize+n)
	h := buf[start:]
	h[0] = byte(typ)
	binary.LittleEndian.PutUint64(h[1:], ni.ShardID)
	binary.LittleEndian.PutUint64(h[9:], ni.ReplicaID)
	binary.LittleEndian.PutUint64(h[17:], index)
	binary.LittleEndian.PutUint32(h[25:], uint32(n))
	return buf, h[opHeaderSize:]
}

// appendPosOp appends an op whose data is an 8-byte position or offset.
func appendPosOp(buf []byte, typ opType, ni raftio.NodeInfo, index, pos uint64) []byte {
	buf, d := appendOp(buf, typ, ni, index, 8)
	binary.LittleEndian.PutUint64(d, pos)
	return buf
}

// marshaler is what the pb types that ops carry have in common.
type marshaler interface {
	Size() int
	MarshalTo([]byte) (int, error)
}

// appendMarshalOp appends an op whose data is m's encoding, marshalled in
// place.
func appendMarshalOp(buf []byte, typ opType, ni raftio.NodeInfo, index uint64, m marshaler) ([]byte, error) {
	size := m.Size()
	buf, d := appendOp(buf, typ, ni, index, size)
	if n, err := m.MarshalTo(d); err != nil || n != size {
		return nil, fmt.Errorf("seglog: marshal op %d: %d of %d bytes: %v", typ, n, size, err)
	}
	return buf, nil
}

// grow extends buf by n bytes, reallocating (with room to spare) only when
// its capacity is short.
func grow(buf []byte, n int) []byte {
	if len(buf)+n <= cap(buf) {
		return buf[:len(buf)+n]
	}
	nb := make([]byte, len(buf)+n, 2*cap(buf)+n)
	copy(nb, buf)
	return nb
}

// posData reads the 8-byte position of an opFloor, opReset or opSegment.
func (o *op) posData() (uint64, error) {
	if len(o.data) != 8 {
		return 0, fmt.Errorf("seglog: op %d with %d bytes of data, want 8", o.typ, len(o.data))
	}
	return binary.LittleEndian.Uint64(o.data), nil
}

// opReader reads the ops of a payload in order. A payload whose CRC is
// right but whose ops do not parse is an error: the store does not
// understand it, so it must not go on as if it did.
type opReader struct {
	payload []byte
	off     int
}

// next reads the next op into o; ok is false at the end of the payload.
func (r *opReader) next(o *op) (ok bool, err error) {
	if r.off == len(r.payload) {
		return false, nil
	}
	if len(r.payload)-r.off < opHeaderSize {
		return false, fmt.Errorf("seglog: op header cut at payload offset %d", r.off)
	}
	h := r.payload[r.off:]
	n := int(binary.LittleEndian.Uint32(h[25:]))
	if n > len(h)-opHeaderSize {
		return false, fmt.Errorf("seglog: op of %d bytes at payload offset %d overruns its record", n, r.off)
	}
	*o = op{
		typ: opType(h[0]),
		ni: raftio.NodeInfo{
			ShardID:   binary.LittleEndian.Uint64(h[1:]),
			ReplicaID: binary.LittleEndian.Uint64(h[9:]),
		},
		index: binary.LittleEndian.Uint64(h[17:]),
		data:  h[opHeaderSize : opHeaderSize+n],
		off:   r.off + opHeaderSize,
	}
	r.off += opHeaderSize + n
	return true, nil
}

// position orders everything written to the log: a segment's sequence
// number, then an offset in it (segments are below 4 GiB).
func position(seq uint64, off int64) uint64 { return seq<<32 | uint64(off) }
