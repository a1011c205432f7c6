package statemachine

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
)

const (
	// encVersion is the entry format; a replica must reject formats it does
	// not know rather than guess, and every replica rejects them alike.
	encVersion = 1
	// headerLen is fixed so that Seal can patch it after the commands.
	headerLen = 1 + 8 + 8 + 4
	// minCmdLen is the smallest encoded command (op, keylen, one key byte,
	// one varint byte): it bounds the count a header may claim, so that a
	// hostile header cannot make DecodeBatch allocate more than its input
	// can justify.
	minCmdLen = 4
)

// ErrMalformed is what DecodeBatch's errors match (errors.Is) when an entry is
// not a well-formed batch.
var ErrMalformed = errors.New("statemachine: malformed batch")

// decodeError is a static error so that rejecting an entry allocates nothing.
type decodeError string

func (e decodeError) Error() string        { return "statemachine: malformed batch: " + string(e) }
func (e decodeError) Is(target error) bool { return target == ErrMalformed }

// Boxed once here, so that returning them allocates nothing.
var (
	errShort    error = decodeError("shorter than its header")
	errVersion  error = decodeError("unknown version")
	errCount    error = decodeError("command count larger than the entry can hold")
	errTrunc    error = decodeError("truncated command")
	errOp       error = decodeError("unknown op")
	errKeyLen   error = decodeError("key length out of range")
	errVarint   error = decodeError("bad varint")
	errLease    error = decodeError("lease_ms does not fit in 32 bits")
	errTrailing error = decodeError("bytes after the last command")
)

// Batch builds one Raft entry from many commands. The zero value is ready.
// A Batch is not safe for concurrent use.
type Batch struct {
	buf []byte // header placeholder, then the encoded commands
	n   uint32
}

// Append adds c to the batch, copying its key. It panics if c.Op is not one
// of the four ops or the key is not 1..MaxKeyLen bytes long: such a command
// would make every replica reject the whole entry, so it is a bug in the
// caller, which must validate keys before they get here.
func (b *Batch) Append(c Command) {
	if c.Op < OpGrant || c.Op > OpExpire {
		panic("statemachine: Batch.Append: unknown op")
	}
	if len(c.Key) == 0 || len(c.Key) > MaxKeyLen {
		panic("statemachine: Batch.Append: key length out of range")
	}
	if len(b.buf) < headerLen {
		b.buf = append(b.buf[:0], make([]byte, headerLen)...)
	}
	buf := append(b.buf, byte(c.Op))
	buf = binary.AppendUvarint(buf, uint64(len(c.Key)))
	buf = append(buf, c.Key...)
	switch c.Op {
	case OpGrant:
		buf = binary.AppendUvarint(buf, uint64(c.LeaseMs))
	case OpRelease, OpExpire:
		buf = binary.AppendUvarint(buf, c.Token)
	case OpExtend:
		buf = binary.AppendUvarint(buf, c.Token)
		buf = binary.AppendUvarint(buf, uint64(c.LeaseMs))
	}
	b.buf = buf
	b.n++
}

// Len is the number of commands in the batch.
func (b *Batch) Len() int { return int(b.n) }

// Size is the encoded size of the entry Seal would return, in bytes. The
// engine can use it to cap an entry below dragonboat's MaxProposalPayloadSize.
func (b *Batch) Size() int { return max(len(b.buf), headerLen) }

// Seal writes h into the batch and returns the encoded entry. The bytes stay
// valid until the next Reset.
func (b *Batch) Seal(h Header) []byte {
	if len(b.buf) < headerLen {
		b.buf = append(b.buf[:0], make([]byte, headerLen)...)
	}
	b.buf[0] = encVersion
	binary.LittleEndian.PutUint64(b.buf[1:], h.Proposer)
	binary.LittleEndian.PutUint64(b.buf[9:], h.Seq)
	binary.LittleEndian.PutUint32(b.buf[17:], b.n)
	return b.buf
}

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.buf = b.buf[:0]
	b.n = 0
}

// DecodeBatch decodes an entry into its header and commands, appending the
// commands to cmds (keys alias data). A malformed entry is an error.
//
// Every field is checked (version, ops, key lengths 1..MaxKeyLen, minimal
// varints, lease_ms within 32 bits, the count, no trailing bytes), so that
// a valid entry re-encodes to exactly the same bytes. On error cmds is
// returned at its original length and the error matches ErrMalformed.
// DecodeBatch never panics and allocates only to grow cmds.
func DecodeBatch(data []byte, cmds []Command) (Header, []Command, error) {
	base := len(cmds)
	h, cmds, err := decode(data, cmds)
	if err != nil {
		// Keep the grown capacity for the caller's next try.
		return Header{}, cmds[:base], err
	}
	return h, cmds, nil
}

func decode(data []byte, cmds []Command) (Header, []Command, error) {
	fail := func(err error) (Header, []Command, error) { return Header{}, cmds, err }
	if len(data) < headerLen {
		return fail(errShort)
	}
	if data[0] != encVersion {
		return fail(errVersion)
	}
	h := Header{
		Proposer: binary.LittleEndian.Uint64(data[1:]),
		Seq:      binary.LittleEndian.Uint64(data[9:]),
	}
	n := binary.LittleEndian.Uint32(data[17:])
	p := data[headerLen:]
	if uint64(n) > uint64(len(p)/minCmdLen) {
		return fail(errCount)
	}
	cmds = slices.Grow(cmds, int(n))
	for range n {
		if len(p) == 0 {
			return fail(errTrunc)
		}
		c := Command{Op: Op(p[0])}
		if c.Op < OpGrant || c.Op > OpExpire {
			return fail(errOp)
		}
		p = p[1:]
		kl, m := uvarint(p)
		if m <= 0 {
			return fail(errVarint)
		}
		p = p[m:]
		if kl == 0 || kl > MaxKeyLen {
			return fail(errKeyLen)
		}
		if kl > uint64(len(p)) {
			return fail(errTrunc)
		}
		// The cap limit keeps a consumer's append to a key from
		// overwriting the next command in the entry.
		c.Key, p = p[:kl:kl], p[kl:]
		if c.Op != OpGrant {
			if c.Token, m = uvarint(p); m <= 0 {
				return fail(errVarint)
			}
			p = p[m:]
		}
		if c.Op == OpGrant || c.Op == OpExtend {
			v, m := uvarint(p)
			if m <= 0 {
				return fail(errVarint)
			}
			if v > math.MaxUint32 {
				return fail(errLease)
			}
			c.LeaseMs, p = uint32(v), p[m:]
		}
		cmds = append(cmds, c)
	}
	if len(p) != 0 {
		return fail(errTrailing)
	}
	return h, cmds, nil
}

// uvarint is binary.Uvarint that also rejects non-minimal encodings, so that
// each value has exactly one encoding. It returns m <= 0 on any error.
func uvarint(p []byte) (v uint64, m int) {
	if len(p) > 0 && p[0] < 0x80 {
		return uint64(p[0]), 1
	}
	v, m = binary.Uvarint(p)
	if m > 1 && p[m-1] == 0 {
		return 0, -1
	}
	return v, m
}
