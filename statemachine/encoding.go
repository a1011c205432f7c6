package statemachine

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
)

const (
	// encVersion is the entry format of a batch with an owned Grant (wire
	// op opGrantOwned), encVersionNoOwners that of every other batch: the
	// format from before owners, so that a replica not yet upgraded reads
	// whatever an upgraded leader writes until a client names an owner. A
	// replica must reject formats it does not know rather than guess, and
	// every replica rejects them alike.
	encVersion         = 2
	encVersionNoOwners = 1
	// encVersionFence is the format of a fence: a header alone, count 0,
	// with the fence's proposer (never 0: the table's fence is 0 before
	// the first fence). It is a version of its own rather than a flag in
	// a version 1 header so that each entry keeps one encoding and an
	// empty version 1 entry stays what it always was, an entry without
	// commands that changes nothing.
	encVersionFence = 3
	// encVersionHandOff is the format of a hand-off request: a header
	// alone, count 0, with the Raft replica id of the node that asks (not
	// 0) as its proposer. It changes nothing in the table, so a replica
	// that does not know it and skips it stays in step with the others.
	encVersionHandOff = 4
	// encVersionReport is the format of a level report, encVersionRaise
	// that of a raise of the cluster version (see FeatureLevel): a header
	// alone, count 0, with the Raft replica id of the node that reports
	// or raises (not 0) as its proposer and the level (not 0) in the seq
	// field. Neither changes a lock, so a replica of level 1, which skips
	// both as entries it cannot decode, stays in step with the others.
	encVersionReport = 5
	encVersionRaise  = 6
	// encVersionDirectory is the format of a directory write (see
	// SealDirectory): a header, count 0, with the Raft replica id of the
	// node that proposes it (not 0) as its proposer and the directory
	// version it replaces in the seq field, then the blob. A build of
	// level 2 rejects version 7 as unknown and skips it; below
	// LevelMembership a directory write changes nothing, so that such a
	// replica stays in step with the others (see FeatureLevel).
	encVersionDirectory = 7
	// encVersionShared is the format of a batch with a shared Grant (wire
	// op opGrantShared): version 2 plus that op. A build of level 3
	// rejects it as unknown and skips it; below LevelShared such a batch
	// changes nothing (see FeatureLevel), so that the replicas stay in
	// step.
	encVersionShared = 8
	// opGrantOwned is the wire op of a Grant with an owner (versions 2 and
	// 8 only); it decodes to OpGrant with Owner set. A Grant without an
	// owner is wire op OpGrant, encoded alike in every version.
	opGrantOwned = 5
	// opGrantShared is the wire op of a shared Grant (version 8 only),
	// with or without an owner; it decodes to OpGrant with Permits set.
	opGrantShared = 6
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
	errOwnerLen error = decodeError("owner length out of range")
	errOwnerV1  error = decodeError("owned grant in a version 1 entry")
	errNoOwner  error = decodeError("version 2 entry without an owned grant")
	errPermits  error = decodeError("permits out of range")
	errNoShared error = decodeError("version 8 entry without a shared grant")
	errTrailing error = decodeError("bytes after the last command")
	// A fence is a header alone (count 0) with a proposer that is not 0.
	errFenceCmds     error = decodeError("fence with commands")
	errFenceProposer error = decodeError("fence of proposer 0")
	// A hand-off request, likewise, with the replica id that asks.
	errHandOffCmds     error = decodeError("hand-off request with commands")
	errHandOffProposer error = decodeError("hand-off request of replica 0")
	// A level report or raise, likewise, with a level that is not 0.
	errLevelCmds     error = decodeError("level report or raise with commands")
	errLevelProposer error = decodeError("level report or raise of replica 0")
	errLevelZero     error = decodeError("level report or raise of level 0")
	// A directory write, likewise, followed by its blob.
	errDirCmds     error = decodeError("directory write with commands")
	errDirProposer error = decodeError("directory write of replica 0")
	errDirLen      error = decodeError("directory length out of range")
)

// MaxDirectory is the largest directory blob (SealDirectory): the
// membership of a cluster is a few hundred bytes, and the bound keeps a
// directory write well below dragonboat's largest proposal, and the
// memory a snapshot stream may make a replica allocate for one small.
const MaxDirectory = 64 << 10

// Batch builds one Raft entry from many commands. The zero value is ready.
// A Batch is not safe for concurrent use.
type Batch struct {
	buf    []byte // header placeholder, then the encoded commands
	n      uint32
	owned  bool // a Grant with an owner was appended: Seal writes version 2
	shared bool // a shared Grant was appended: Seal writes version 8
}

// Append adds c to the batch, copying its key and (for a Grant) its owner.
// It panics if c.Op is not one of the four ops, the key is not
// 1..MaxKeyLen bytes long, a Grant's owner is longer than MaxOwnerLen or
// its Permits above MaxPermits: such a command would make every replica
// reject the whole entry, so it is a bug in the caller, which must
// validate keys, owners and permits before they get here. The owner and
// permits of any other op are ignored, as a Grant's token is.
func (b *Batch) Append(c Command) {
	if c.Op < OpGrant || c.Op > OpExpire {
		panic("statemachine: Batch.Append: unknown op")
	}
	if len(c.Key) == 0 || len(c.Key) > MaxKeyLen {
		panic("statemachine: Batch.Append: key length out of range")
	}
	if c.Op == OpGrant && len(c.Owner) > MaxOwnerLen {
		panic("statemachine: Batch.Append: owner length out of range")
	}
	if c.Op == OpGrant && c.Permits > MaxPermits {
		panic("statemachine: Batch.Append: permits out of range")
	}
	if len(b.buf) < headerLen {
		b.buf = append(b.buf[:0], make([]byte, headerLen)...)
	} else if b.n == 0 {
		// A directory write sealed from this batch left its blob after
		// the header: the first command goes in its place.
		b.buf = b.buf[:headerLen]
	}
	op := byte(c.Op)
	owned := c.Op == OpGrant && len(c.Owner) > 0
	shared := c.Op == OpGrant && c.Permits > 0
	switch {
	case shared:
		op = opGrantShared
		b.shared = true
	case owned:
		op = opGrantOwned
		b.owned = true
	}
	buf := append(b.buf, op)
	buf = binary.AppendUvarint(buf, uint64(len(c.Key)))
	buf = append(buf, c.Key...)
	switch c.Op {
	case OpGrant:
		if shared {
			buf = binary.AppendUvarint(buf, uint64(c.Permits))
		}
		buf = binary.AppendUvarint(buf, uint64(c.LeaseMs))
		if shared {
			// Owner or not: a shared Grant's owner length is always there.
			buf = binary.AppendUvarint(buf, uint64(len(c.Owner)))
			buf = append(buf, c.Owner...)
		} else if owned {
			buf = binary.AppendUvarint(buf, uint64(len(c.Owner)))
			buf = append(buf, c.Owner...)
		}
	case OpRelease, OpExpire:
		buf = binary.AppendUvarint(buf, c.Token)
	case OpExtend:
		buf = binary.AppendUvarint(buf, c.Token)
		buf = binary.AppendUvarint(buf, uint64(c.LeaseMs))
	}
	b.buf = buf
	b.n++
}

// Grow makes room for at least n more encoded bytes (header included
// while the batch is empty), so that a caller that knows about how large
// the batch will get (the last one's size, say) allocates once instead of
// doubling its way there.
func (b *Batch) Grow(n int) {
	if len(b.buf) < headerLen {
		n += headerLen - len(b.buf)
	}
	if cap(b.buf)-len(b.buf) < n {
		// Not slices.Grow: under -race it allocates twice.
		buf := make([]byte, len(b.buf), len(b.buf)+n)
		copy(buf, b.buf)
		b.buf = buf
	}
}

// Len is the number of commands in the batch.
func (b *Batch) Len() int { return int(b.n) }

// Size is the encoded size of the entry Seal would return, in bytes. The
// engine can use it to cap an entry below dragonboat's MaxProposalPayloadSize.
func (b *Batch) Size() int { return max(len(b.buf), headerLen) }

// Seal writes h into the batch and returns the encoded entry. The bytes
// stay valid until the next Reset.
//
// With h.Fence the entry is a fence, version 3 of the encoding, and with
// h.HandOff a hand-off request, version 4: Seal panics if the batch has
// commands, h.Proposer is 0 or both are set, because every replica would
// reject such an entry (a bug in the caller, as with Append's panics).
// Otherwise the entry is in version 1 of the encoding, the one from before
// owners, unless a Grant in the batch has an owner; then it is in version
// 2; and if a Grant in the batch is shared, it is in version 8, whatever
// the owners. The commands are encoded the same in all three (an owned
// Grant has a wire op of its own, which only versions 2 and 8 have, and a
// shared Grant one that only version 8 has), so Seal only picks the
// header's version byte, from h.Fence, h.HandOff and flags Append keeps,
// and each batch still has exactly one encoding. A replica of level 3
// skips version 8, and below LevelShared a version 8 batch changes
// nothing (see FeatureLevel).
//
// A replica from before owners rejects version 2 and, like every replica
// with an entry it cannot decode, skips it. So while a replica still runs
// the release before owners, no Grant with an owner may be proposed, or the
// tables would part; every other batch is version 1, which such a replica
// applies as it always did, so a rolling upgrade from that release is safe
// as long as no client names an owner before it is done. A replica from
// before the fence skips version 3 the same way, and then applies the
// batches the fence keeps out: no rolling upgrade crosses the fence (see
// the package doc). A replica from before hand-off requests skips version
// 4, which changes nothing in any table, so its table stays in step; as a
// leader, it just never hands a shard over on request. With h.Report or
// h.Raise the entry is a level report (version 5) or a raise (version 6),
// with h.Level in the seq field; Seal panics if the batch has commands, or
// h.Proposer or h.Level is 0, or h is of another kind too. A replica of
// level 1 skips both, and neither changes a lock (FeatureLevel). With
// h.Directory the entry is a directory write (version 7, see
// SealDirectory), with h.Base in the seq field and h.Blob after the
// header; Seal panics if the batch has commands, h.Proposer is 0, h.Blob
// is not 1..MaxDirectory bytes long or h is of another kind too.
func (b *Batch) Seal(h Header) []byte {
	if h.Fence && b.n > 0 {
		panic("statemachine: Batch.Seal: a fence with commands")
	}
	if h.Fence && h.Proposer == 0 {
		panic("statemachine: Batch.Seal: a fence of proposer 0")
	}
	if h.HandOff && (b.n > 0 || h.Proposer == 0 || h.kinds() > 1) {
		panic("statemachine: Batch.Seal: a hand-off request with commands, of replica 0, or of another kind too")
	}
	if (h.Report || h.Raise) && (b.n > 0 || h.Proposer == 0 || h.Level == 0 || h.kinds() > 1) {
		panic("statemachine: Batch.Seal: a level report or raise with commands, of replica 0, of level 0, or of another kind too")
	}
	if h.Directory && (b.n > 0 || h.Proposer == 0 || len(h.Blob) == 0 || len(h.Blob) > MaxDirectory || h.kinds() > 1) {
		panic("statemachine: Batch.Seal: a directory write with commands, of replica 0, with a blob out of range, or of another kind too")
	}
	if len(b.buf) < headerLen {
		b.buf = append(b.buf[:0], make([]byte, headerLen)...)
	}
	if b.n == 0 {
		// Only a directory write has bytes after a header without
		// commands: drop those of an earlier Seal of the same batch.
		b.buf = b.buf[:headerLen]
	}
	switch {
	case h.Directory:
		b.buf[0] = encVersionDirectory
	case h.Fence:
		b.buf[0] = encVersionFence
	case h.HandOff:
		b.buf[0] = encVersionHandOff
	case h.Report:
		b.buf[0] = encVersionReport
	case h.Raise:
		b.buf[0] = encVersionRaise
	case b.shared:
		b.buf[0] = encVersionShared
	case b.owned:
		b.buf[0] = encVersion
	default:
		b.buf[0] = encVersionNoOwners
	}
	binary.LittleEndian.PutUint64(b.buf[1:], h.Proposer)
	seq := h.Seq
	switch {
	case h.Report || h.Raise:
		seq = h.Level
	case h.Directory:
		seq = h.Base
	}
	binary.LittleEndian.PutUint64(b.buf[9:], seq)
	binary.LittleEndian.PutUint32(b.buf[17:], b.n)
	if h.Directory {
		b.buf = binary.AppendUvarint(b.buf, uint64(len(h.Blob)))
		b.buf = append(b.buf, h.Blob...)
	}
	return b.buf
}

// SealDirectory returns a new entry that writes blob as the shard's
// directory if the directory's version is still base when it applies: a
// compare-and-set, so that of two writes based on the same version only
// the first takes, and the proposer of the second, which reads
// Table.Directory after its Applied, sees that it did not. proposer is
// the Raft replica id of the node that proposes it. It takes effect only
// in a table of cluster version LevelMembership or more (see
// "Directory" in the package doc), so the engine proposes it only from
// that version on. It panics if proposer is 0 or blob is not
// 1..MaxDirectory bytes long: every replica would reject such an entry,
// so it is a bug in the caller, as with Seal's panics.
func SealDirectory(proposer, base uint64, blob []byte) []byte {
	var b Batch
	b.Grow(binary.MaxVarintLen64 + len(blob))
	return b.Seal(Header{Proposer: proposer, Directory: true, Base: base, Blob: blob})
}

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.buf = b.buf[:0]
	b.n = 0
	b.owned = false
	b.shared = false
}

// DecodeBatch decodes an entry of any version (see the package doc) into
// its header and commands, appending the commands to cmds (keys and owners
// alias data). A fence (version 3) decodes to a Header with Fence set and
// no commands, a hand-off request (version 4) to one with HandOff set and
// no commands, a level report (5) or raise (6) to one with Report or
// Raise set, its Level from the seq field and Seq 0; a directory write
// (7) to one with Directory set, its Base from the seq field (Seq 0) and
// its Blob aliasing data; versions 1, 2 and 8 to one with none of them. A
// malformed entry is an error.
//
// Every field is checked (version, ops, key lengths 1..MaxKeyLen, owner
// lengths 1..MaxOwnerLen, or 0..MaxOwnerLen in a shared Grant, permits
// 1..MaxPermits, minimal varints, lease_ms within 32 bits, the count, no
// trailing bytes, an owned Grant in a version 2 entry and none in a
// version 1 entry, a shared Grant in a version 8 entry and none in any
// other, no commands and a proposer other than 0 in a fence,
// a hand-off request, a level report, a raise and a directory write, a
// level other than 0 in the report and the raise, and a blob of
// 1..MaxDirectory bytes, with a minimal length, that ends the entry in a
// directory write),
// so that a valid entry re-encodes (Append, Seal) to exactly the same
// bytes. On error cmds is returned at its original length and the error
// matches ErrMalformed. DecodeBatch never panics and allocates only to
// grow cmds.
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
	version := data[0]
	if version < encVersionNoOwners || version > encVersionShared {
		return fail(errVersion)
	}
	h := Header{
		Proposer:  binary.LittleEndian.Uint64(data[1:]),
		Seq:       binary.LittleEndian.Uint64(data[9:]),
		Fence:     version == encVersionFence,
		HandOff:   version == encVersionHandOff,
		Report:    version == encVersionReport,
		Raise:     version == encVersionRaise,
		Directory: version == encVersionDirectory,
	}
	switch {
	case h.Report || h.Raise:
		h.Level, h.Seq = h.Seq, 0
	case h.Directory:
		h.Base, h.Seq = h.Seq, 0
	}
	n := binary.LittleEndian.Uint32(data[17:])
	switch {
	case (h.Report || h.Raise) && n != 0:
		return fail(errLevelCmds)
	case (h.Report || h.Raise) && h.Proposer == 0:
		return fail(errLevelProposer)
	case (h.Report || h.Raise) && h.Level == 0:
		return fail(errLevelZero)
	case h.Fence && n != 0:
		return fail(errFenceCmds)
	case h.Fence && h.Proposer == 0:
		return fail(errFenceProposer)
	case h.HandOff && n != 0:
		return fail(errHandOffCmds)
	case h.HandOff && h.Proposer == 0:
		return fail(errHandOffProposer)
	case h.Directory && n != 0:
		return fail(errDirCmds)
	case h.Directory && h.Proposer == 0:
		return fail(errDirProposer)
	}
	p := data[headerLen:]
	if h.Directory {
		bl, m := uvarint(p)
		if m <= 0 {
			return fail(errVarint)
		}
		p = p[m:]
		if bl == 0 || bl > MaxDirectory {
			return fail(errDirLen)
		}
		if bl > uint64(len(p)) {
			return fail(errTrunc)
		}
		// Capped, like a key: an append to it must not reach past it.
		h.Blob, p = p[:bl:bl], p[bl:]
	}
	if uint64(n) > uint64(len(p)/minCmdLen) {
		return fail(errCount)
	}
	cmds = slices.Grow(cmds, int(n))
	owned, shared := false, false
	for range n {
		if len(p) == 0 {
			return fail(errTrunc)
		}
		op := p[0]
		c := Command{Op: Op(op)}
		if op < byte(OpGrant) || op > byte(OpExpire) {
			// Not one of the four plain ops: a Grant with an owner or a
			// shared one, or a bad op.
			switch {
			case op == opGrantOwned && (version == encVersion || version == encVersionShared):
				c.Op, owned = OpGrant, true
			case op == opGrantOwned:
				return fail(errOwnerV1)
			case op == opGrantShared && version == encVersionShared:
				c.Op, shared = OpGrant, true
			default:
				return fail(errOp)
			}
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
		if op == opGrantShared {
			v, m := uvarint(p)
			if m <= 0 {
				return fail(errVarint)
			}
			if v == 0 || v > MaxPermits {
				return fail(errPermits)
			}
			c.Permits, p = uint32(v), p[m:]
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
		if op >= opGrantOwned { // 5 or 6: an owner length follows
			ol, m := uvarint(p)
			if m <= 0 {
				return fail(errVarint)
			}
			p = p[m:]
			// 0 is out of range too for op 5: a Grant without an owner
			// is OpGrant on the wire. A shared Grant has one op, owner
			// or not.
			if ol == 0 && op == opGrantOwned || ol > MaxOwnerLen {
				return fail(errOwnerLen)
			}
			if ol > uint64(len(p)) {
				return fail(errTrunc)
			}
			// Capped like the key. A Grant without an owner keeps a nil
			// Owner, so that a decoded Grant is the Command appended.
			if ol > 0 {
				c.Owner, p = p[:ol:ol], p[ol:]
			}
		}
		cmds = append(cmds, c)
	}
	if len(p) != 0 {
		return fail(errTrailing)
	}
	if version == encVersion && !owned {
		return fail(errNoOwner)
	}
	if version == encVersionShared && !shared {
		return fail(errNoShared)
	}
	h.shared = shared
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
