package statemachine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

const (
	snapMagic = "btsn"
	// snapVersion is the stream of a table without a fence in which a
	// lock has an owner, snapVersionNoOwners (records without owners, the
	// stream from before owners) that of every other table without a
	// fence: so a node of the release before owners could recover from a
	// snapshot of the next until a client named an owner, and a node reads
	// what an older one sent, or what dragonboat kept on disk across an
	// upgrade.
	snapVersion         = 2
	snapVersionNoOwners = 1
	// snapVersionFence is the stream of a table with a fence: the header
	// has the fence after seq, and every record has its owner length, as
	// in version 2, whether or not a lock has an owner. A table without a
	// fence is streamed as before the fence existed (1 or 2).
	snapVersionFence = 3
	// snapVersionVersioned is the stream of a table whose cluster version
	// is 2 or more, below LevelMembership: the header has the fence (0 if
	// none) and the version after seq, and every record has its owner
	// length. A table of version 1 is streamed as before versions existed
	// (1, 2 or 3), which a build of level 1 can recover from.
	snapVersionVersioned = 4
	// snapVersionDirectory is the stream of a table whose cluster version
	// is LevelMembership or more: version 4's header, then the directory
	// (its version u64 LE, its length uvarint, its blob; 0 and 0 while it
	// was never set). A table below LevelMembership is streamed in version
	// 4 or before, which a build of level 2 can recover from.
	snapVersionDirectory = 5
	// snapVersionShared is the stream of a table whose cluster version is
	// LevelShared or more: version 5's header and directory, and records
	// that end with their permits (0 for an exclusive lock), one record per
	// grant, a shared key's grants in token order. A table below
	// LevelShared is streamed in version 5 or before, which a build of
	// level 3 can recover from.
	snapVersionShared = 6
	// snapHeaderLen is the header of versions 1 and 2; version 3 has
	// snapFenceLen bytes more, version 4 snapFenceLen+snapLevelLen,
	// versions 5 and 6 snapDirVersionLen more than 4, then the
	// directory's length and blob.
	snapHeaderLen = 4 + 1 + 4 + 8 + 8
	snapFenceLen  = 8
	snapLevelLen  = 8
	// snapDirVersionLen is the directory's version in version 5, which
	// its length and blob follow.
	snapDirVersionLen = 8
	snapBufSize       = 64 << 10
	recoverBatchSz    = 1 << 20 // bytes per pebble batch while recovering
)

// maxRecordLen bounds what readSnapshot reads of one record before it checks
// the values (five varints of any size, key, owner), so that its buffer
// never grows; it is also enough for any record writeSnapshot writes.
const maxRecordLen = 5*binary.MaxVarintLen64 + MaxKeyLen + MaxOwnerLen

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrBadSnapshot is what RecoverFromSnapshot's errors match (errors.Is) when
// the stream is truncated, corrupt or not for this shard.
var ErrBadSnapshot = errors.New("statemachine: bad snapshot")

// snapCtx is the point in time PrepareSnapshot captured. The pebble snapshot
// pins that state while Update goes on; it is released exactly once, by
// SaveSnapshot or, if dragonboat never gets that far, by Close.
type snapCtx struct {
	mu    sync.Mutex
	snap  *pebble.Snapshot // nil once released
	meta  meta             // applied index, seq and fence
	owned bool             // a lock has an owner
}

// version is the stream version of the captured state: 6 if the table's
// cluster version is LevelShared or more, else 5 if it is LevelMembership
// or more, else 4 if it is 2 or more, else 3 if it has a fence, else 2 if
// a lock has an owner, else 1 (see the package doc).
func (c *snapCtx) version() byte { return streamVersion(c.meta, c.owned) }

// streamVersion is the stream version of a table with meta m, in which a
// lock has an owner if owned: one encoding per table (see the package doc).
func streamVersion(m meta, owned bool) byte {
	switch {
	case m.level >= LevelShared:
		return snapVersionShared
	case m.level >= LevelMembership:
		return snapVersionDirectory
	case m.versioned():
		return snapVersionVersioned
	case m.fence != 0:
		return snapVersionFence
	case owned:
		return snapVersion
	default:
		return snapVersionNoOwners
	}
}

// PrepareSnapshot implements sm.IOnDiskStateMachine. It runs mutually
// exclusive with Update; it writes a checkpoint first, so the pebble
// snapshot and the in-memory applied index, seq, fence, cluster version
// and directory (which the captured meta holds: the stream takes them from
// there, not from pebble) agree.
func (s *onDisk) PrepareSnapshot() (interface{}, error) {
	s.mu.RLock()
	t := s.t
	s.mu.RUnlock()
	if t == nil {
		return nil, ErrClosed
	}
	if err := s.checkpoint(pebble.NoSync); err != nil {
		return nil, err
	}
	// The checkpoint is the table, so the table tells whether a row of the
	// pebble snapshot has an owner, without a scan.
	c := &snapCtx{snap: s.db.NewSnapshot(), meta: t.meta(s.applied), owned: len(t.owners) > 0}
	s.snapMu.Lock()
	s.snaps[c] = struct{}{}
	s.snapMu.Unlock()
	return c, nil
}

func (s *onDisk) release(c *snapCtx) {
	c.mu.Lock()
	if c.snap != nil {
		_ = c.snap.Close()
		c.snap = nil
	}
	c.mu.Unlock()
	s.snapMu.Lock()
	delete(s.snaps, c)
	s.snapMu.Unlock()
}

// SaveSnapshot implements sm.IOnDiskStateMachine: it streams the state
// PrepareSnapshot captured in the format the package doc describes, in
// version 6 if the table's cluster version is LevelShared or more, else 5
// if it is LevelMembership or more, else 4 if it is 2 or more, else 3 if
// it has a fence, else 1 unless a lock has an owner. The output depends
// only on that state, as dragonboat requires.
func (s *onDisk) SaveSnapshot(ctx interface{}, w io.Writer, stopc <-chan struct{}) error {
	c, ok := ctx.(*snapCtx)
	if !ok {
		return fmt.Errorf("statemachine: SaveSnapshot takes its PrepareSnapshot's context, not %T", ctx)
	}
	defer s.release(c)
	c.mu.Lock()
	if c.snap == nil {
		c.mu.Unlock()
		return sm.ErrSnapshotStopped
	}
	it := c.snap.NewIter(&pebble.IterOptions{LowerBound: s.tableLo[:], UpperBound: s.tableHi[:]})
	git := c.snap.NewIter(&pebble.IterOptions{LowerBound: s.grantLo[:], UpperBound: s.grantHi[:]})
	c.mu.Unlock()
	err := writeSnapshot(s.shard, &pebbleRows{s: s, it: it, git: git}, c.version(), c.meta, w, stopc)
	for _, i := range []*pebble.Iterator{it, git} {
		if cerr := i.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("statemachine: shard %d: scan snapshot: %w", s.shard, cerr)
		}
	}
	return err
}

// rowSource is what writeSnapshot streams: a table's grants, in key order,
// a shared key's in token order.
type rowSource interface {
	// next returns the next grant; false at the end, or on an error that
	// err then returns. The slices are valid until the next call.
	next() (Lock, bool)
	err() error
}

// pebbleRows is the rowSource of a scan of a shard's table in pebble: the
// keys' rows (it), and for each shared key's header there, the key's
// grants (git, sought to the key's first).
type pebbleRows struct {
	s       *onDisk
	it, git *pebble.Iterator
	started bool
	bad     error // a corrupt row
	// In a shared key's grants: its key (a copy), its permits, and the
	// number of grants given so far; permits is 0 outside one.
	key     []byte
	permits uint32
	holders uint32
	seek    []byte // the key SeekGE takes, reused
}

func (p *pebbleRows) next() (Lock, bool) {
	if p.permits != 0 {
		if l, ok := p.nextGrant(); ok || p.bad != nil {
			return l, ok
		}
	}
	var ok bool
	if p.started {
		ok = p.it.Next()
	} else {
		ok, p.started = p.it.First(), true
	}
	if !ok {
		return Lock{}, false
	}
	k, v := p.it.Key()[prefixLen:], p.it.Value()
	if !rowShapeOK(k, v) {
		p.bad = fmt.Errorf("statemachine: shard %d: corrupt row %q", p.s.shard, k)
		return Lock{}, false
	}
	tok, leaseMs, owner := decodeRow(v)
	if tok != 0 {
		return Lock{Key: k, Token: tok, LeaseMs: leaseMs, Owner: owner}, true
	}
	// A shared key's header: its grants come next, at least one.
	if len(v) != rowLen || leaseMs == 0 || leaseMs > MaxPermits {
		p.bad = fmt.Errorf("statemachine: shard %d: corrupt shared key %q", p.s.shard, k)
		return Lock{}, false
	}
	p.key, p.permits, p.holders = append(p.key[:0], k...), leaseMs, 0
	p.seek = slices.Grow(p.seek[:0], prefixLen+grantKeyLen+len(k))[:prefixLen+grantKeyLen+len(k)]
	p.s.grantKey(p.seek, k, 0) // token 0: before the key's first grant
	p.git.SeekGE(p.seek)
	if l, ok := p.grant(); ok || p.bad != nil {
		return l, ok
	}
	p.bad = fmt.Errorf("statemachine: shard %d: shared key %q has no grant", p.s.shard, k)
	return Lock{}, false
}

// nextGrant moves to the current shared key's next grant.
func (p *pebbleRows) nextGrant() (Lock, bool) {
	p.git.Next()
	return p.grant()
}

// grant returns the grant git is at, if it is one of the current shared
// key's; else it ends the key (permits 0).
func (p *pebbleRows) grant() (Lock, bool) {
	if !p.git.Valid() {
		p.permits = 0
		return Lock{}, false
	}
	k := p.git.Key()[prefixLen:]
	if len(k) != grantKeyLen+len(p.key) || int(k[0]) != len(p.key) || !bytes.Equal(k[1:1+len(p.key)], p.key) {
		p.permits = 0
		return Lock{}, false
	}
	v := p.git.Value()
	tok, leaseMs, owner := decodeRow(v)
	p.holders++
	if !rowShapeOK(p.key, v) || binary.BigEndian.Uint64(k[len(k)-8:]) != tok || p.holders > p.permits {
		p.bad = fmt.Errorf("statemachine: shard %d: corrupt shared grant %q", p.s.shard, k)
		return Lock{}, false
	}
	return Lock{Key: p.key, Token: tok, LeaseMs: leaseMs, Owner: owner, Permits: p.permits}, true
}

func (p *pebbleRows) err() error {
	if p.bad != nil {
		return p.bad
	}
	for _, it := range []*pebble.Iterator{p.it, p.git} {
		if err := it.Error(); err != nil {
			return fmt.Errorf("statemachine: shard %d: scan snapshot: %w", p.s.shard, err)
		}
	}
	return nil
}

// writeSnapshot writes the stream of shard's rows and of m in the given
// version, which must be the one they call for: it fails rather than drop
// an owner from a version 1 stream, or a shared grant from a stream before
// version 6, or write a version 2 stream without an owner. (The fence,
// the cluster version and the directory are m's, which chose version 3,
// 4, 5 or 6 or none of them.)
func writeSnapshot(shard uint64, rows rowSource, version byte, m meta, w io.Writer, stopc <-chan struct{}) error {
	bw := bufio.NewWriterSize(w, snapBufSize)
	var crc uint32
	// Write errors are returned as they are: dragonboat's writer reports a
	// broken stream as sm.ErrSnapshotStreaming and expects it back.
	write := func(p []byte) error {
		crc = crc32.Update(crc, crcTable, p)
		_, err := bw.Write(p)
		return err
	}
	buf := make([]byte, 0, maxRecordLen)
	buf = append(buf, snapMagic...)
	buf = append(buf, version)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(shard))
	buf = binary.LittleEndian.AppendUint64(buf, m.applied)
	buf = binary.LittleEndian.AppendUint64(buf, m.seq)
	if version >= snapVersionFence {
		buf = binary.LittleEndian.AppendUint64(buf, m.fence)
	}
	if version >= snapVersionVersioned {
		buf = binary.LittleEndian.AppendUint64(buf, m.level)
	}
	if version >= snapVersionDirectory {
		buf = binary.LittleEndian.AppendUint64(buf, m.dirVersion)
		buf = binary.AppendUvarint(buf, uint64(len(m.dir)))
	}
	if err := write(buf); err != nil {
		return err
	}
	if version >= snapVersionDirectory {
		if err := write(aliasBytes(m.dir)); err != nil {
			return err
		}
	}
	var n, owned uint64
	for ; ; n++ {
		l, ok := rows.next()
		if !ok {
			break
		}
		if n%stopEvery == 0 && stopped(stopc) {
			return sm.ErrSnapshotStopped
		}
		if len(l.Owner) > 0 {
			if version == snapVersionNoOwners {
				return fmt.Errorf("statemachine: shard %d: row %q has an owner the table has not", shard, l.Key)
			}
			owned++
		}
		if l.Permits > 0 && version < snapVersionShared {
			return fmt.Errorf("statemachine: shard %d: %q is shared in a table of cluster version %d", shard, l.Key, m.level)
		}
		buf = binary.AppendUvarint(buf[:0], uint64(len(l.Key)))
		buf = append(buf, l.Key...)
		buf = binary.AppendUvarint(buf, l.Token)
		buf = binary.AppendUvarint(buf, uint64(l.LeaseMs))
		if recordsHaveOwners(version) {
			buf = binary.AppendUvarint(buf, uint64(len(l.Owner)))
			buf = append(buf, l.Owner...)
		}
		if version >= snapVersionShared {
			buf = binary.AppendUvarint(buf, uint64(l.Permits))
		}
		if err := write(buf); err != nil {
			return err
		}
	}
	if err := rows.err(); err != nil {
		return err
	}
	if version == snapVersion && owned == 0 {
		return fmt.Errorf("statemachine: shard %d: the table has an owner no row has", shard)
	}
	buf = append(buf[:0], 0)
	buf = binary.LittleEndian.AppendUint64(buf, n)
	if err := write(buf); err != nil {
		return err
	}
	buf = binary.LittleEndian.AppendUint32(buf[:0], crc)
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	return bw.Flush()
}

// RecoverFromSnapshot implements sm.IOnDiskStateMachine. It reads and checks
// the whole stream into a new in-memory table first, so that a bad stream
// changes nothing; then it replaces the shard's rows in pebble. The meta is
// deleted in the first batch and written in the last (with fsync): if the
// process dies in between, Open finds rows without meta and drops them.
func (s *onDisk) RecoverFromSnapshot(r io.Reader, stopc <-chan struct{}) error {
	applied, t, err := s.readSnapshot(r, stopc)
	if err != nil {
		return err
	}
	if err := s.writeTable(applied, t, stopc); err != nil {
		return err
	}
	s.install(t, applied)
	s.uncheckpointed = 0 // writeTable wrote the whole table: a checkpoint
	return nil
}

func (s *onDisk) badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: shard %d: "+format, append([]any{ErrBadSnapshot, s.shard}, args...)...)
}

// readErr turns the end of the stream where more was expected into a
// truncation error and passes anything else through.
func (s *onDisk) readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return s.badSnapshot("stream truncated")
	}
	return fmt.Errorf("statemachine: shard %d: read snapshot: %w", s.shard, err)
}

// recordsHaveOwners says whether a stream's records carry an owner length:
// in every version but the one from before owners.
func recordsHaveOwners(version byte) bool { return version != snapVersionNoOwners }

func (s *onDisk) readSnapshot(r io.Reader, stopc <-chan struct{}) (uint64, *table, error) {
	br := bufio.NewReaderSize(r, snapBufSize)
	var hdr [snapHeaderLen + snapFenceLen + snapLevelLen + snapDirVersionLen]byte
	if _, err := io.ReadFull(br, hdr[:snapHeaderLen]); err != nil {
		return 0, nil, s.readErr(err)
	}
	if string(hdr[:4]) != snapMagic {
		return 0, nil, s.badSnapshot("not a baton snapshot")
	}
	version := hdr[4]
	if version < snapVersionNoOwners || version > snapVersionShared {
		return 0, nil, s.badSnapshot("unknown version %d", version)
	}
	if shard := binary.LittleEndian.Uint32(hdr[5:]); uint64(shard) != s.shard {
		return 0, nil, s.badSnapshot("snapshot is of shard %d", shard)
	}
	hlen := snapHeaderLen
	switch version {
	case snapVersionFence:
		hlen += snapFenceLen
	case snapVersionVersioned:
		hlen += snapFenceLen + snapLevelLen
	case snapVersionDirectory, snapVersionShared:
		hlen += snapFenceLen + snapLevelLen + snapDirVersionLen
	}
	if _, err := io.ReadFull(br, hdr[snapHeaderLen:hlen]); err != nil {
		return 0, nil, s.readErr(err)
	}
	crc := crc32.Update(0, crcTable, hdr[:hlen])
	applied := binary.LittleEndian.Uint64(hdr[9:])
	t := newTable(s.shard, binary.LittleEndian.Uint64(hdr[17:]), 0)
	if version >= snapVersionFence {
		t.fence = binary.LittleEndian.Uint64(hdr[snapHeaderLen:])
	}
	if version >= snapVersionVersioned {
		t.level = binary.LittleEndian.Uint64(hdr[snapHeaderLen+snapFenceLen:])
	}
	// One encoding per table: version 3 only for a table with a fence,
	// version 4 only for one of cluster version 2 up to LevelMembership
	// (excluded), version 5 only from LevelMembership up to LevelShared
	// (excluded), version 6 only from LevelShared on. A version above
	// this build's is refused as such first, whatever the stream's
	// version: that is the reason to give.
	switch {
	case version == snapVersionFence && t.fence == 0:
		return 0, nil, s.badSnapshot("version 3 without a fence")
	case t.level > FeatureLevel:
		return 0, nil, TooOld(s.shard, t.level)
	case version == snapVersionVersioned && (t.level <= levelNone || t.level >= LevelMembership),
		version == snapVersionDirectory && (t.level < LevelMembership || t.level >= LevelShared),
		version == snapVersionShared && t.level < LevelShared:
		return 0, nil, s.badSnapshot("version %d of cluster version %d", version, t.level)
	}
	if version >= snapVersionDirectory {
		dv := binary.LittleEndian.Uint64(hdr[snapHeaderLen+snapFenceLen+snapLevelLen:])
		bl, dirLen, err := s.readUvarint(br, nil)
		if err != nil {
			return 0, nil, err
		}
		crc = crc32.Update(crc, crcTable, dirLen)
		// 0 and 0, or a version and a blob: one encoding per table.
		if bl > MaxDirectory || (dv == 0) != (bl == 0) {
			return 0, nil, s.badSnapshot("directory of version %d and %d bytes", dv, bl)
		}
		if bl > 0 {
			blob := make([]byte, bl)
			if _, err := io.ReadFull(br, blob); err != nil {
				return 0, nil, s.readErr(err)
			}
			crc = crc32.Update(crc, crcTable, blob)
			t.dirVersion, t.dir = dv, blob
		}
	}

	rec := make([]byte, 0, maxRecordLen)
	var prev []byte
	var n, kl, tok, lease, ol, owned, permits uint64
	// The shared key of the last record, if it was a shared grant: its
	// header's slot and its last grant's token.
	var shared *sharedKey
	var header uint32
	var prevTok uint64
	var err error
	for ; ; n++ {
		if n%stopEvery == 0 && stopped(stopc) {
			return 0, nil, sm.ErrSnapshotStopped
		}
		kl, rec, err = s.readUvarint(br, rec[:0])
		if err != nil {
			return 0, nil, err
		}
		if kl == 0 {
			crc = crc32.Update(crc, crcTable, rec)
			break // the trailer's marker
		}
		if kl > MaxKeyLen {
			return 0, nil, s.badSnapshot("record %d: key length %d", n, kl)
		}
		start := len(rec)
		rec = slices.Grow(rec, int(kl))[:start+int(kl)]
		if _, err := io.ReadFull(br, rec[start:]); err != nil {
			return 0, nil, s.readErr(err)
		}
		if tok, rec, err = s.readUvarint(br, rec); err != nil {
			return 0, nil, err
		}
		lease, rec, err = s.readUvarint(br, rec)
		if err != nil {
			return 0, nil, err
		}
		var owner []byte
		if recordsHaveOwners(version) {
			if ol, rec, err = s.readUvarint(br, rec); err != nil {
				return 0, nil, err
			}
			if ol > MaxOwnerLen {
				return 0, nil, s.badSnapshot("record %d: owner length %d", n, ol)
			}
			ostart := len(rec)
			rec = slices.Grow(rec, int(ol))[:ostart+int(ol)]
			if _, err := io.ReadFull(br, rec[ostart:]); err != nil {
				return 0, nil, s.readErr(err)
			}
			if ol > 0 {
				owner = rec[ostart:]
				owned++
			}
		}
		permits = 0
		if version >= snapVersionShared {
			if permits, rec, err = s.readUvarint(br, rec); err != nil {
				return 0, nil, err
			}
		}
		crc = crc32.Update(crc, crcTable, rec)
		key := rec[start : start+int(kl)]
		if lease > math.MaxUint32 || !t.validToken(tok) || permits > MaxPermits {
			return 0, nil, s.badSnapshot("record %d: bad token, lease or permits", n)
		}
		// Strictly increasing keys, but for the grants of a shared key,
		// in strictly increasing tokens, all with the key's permits and
		// no more than them, each owner once: what writeSnapshot writes,
		// and it rules out duplicates.
		if shared != nil && bytes.Equal(key, prev) {
			_, dup := shared.owners[string(owner)]
			switch {
			case uint64(shared.permits) != permits || tok <= prevTok:
				return 0, nil, s.badSnapshot("record %d: a grant of shared key %q out of order or of other permits", n, key)
			case uint32(len(shared.grants)) >= shared.permits || len(owner) > 0 && dup:
				return 0, nil, s.badSnapshot("record %d: shared key %q has more grants than permits, or an owner twice", n, key)
			}
			t.newGrant(header, tok, uint32(lease), owner, rowStored)
			prevTok = tok
			continue
		}
		if n > 0 && bytes.Compare(key, prev) <= 0 {
			return 0, nil, s.badSnapshot("record %d: keys out of order", n)
		}
		prev = append(prev[:0], key...)
		if permits == 0 {
			shared = nil
			t.insert(key, tok, uint32(lease), owner, rowStored)
			continue
		}
		header = t.insertRow(key, rowHeld|rowShared|rowStored)
		t.addShared(header, uint32(permits))
		shared, prevTok = t.shared[header], tok
		t.newGrant(header, tok, uint32(lease), owner, rowStored)
	}
	var tail [8 + 4]byte
	if _, err := io.ReadFull(br, tail[:]); err != nil {
		return 0, nil, s.readErr(err)
	}
	crc = crc32.Update(crc, crcTable, tail[:8])
	if got := binary.LittleEndian.Uint32(tail[8:]); got != crc {
		return 0, nil, s.badSnapshot("checksum mismatch")
	}
	if count := binary.LittleEndian.Uint64(tail[:8]); count != n {
		return 0, nil, s.badSnapshot("trailer counts %d records, stream had %d", count, n)
	}
	// One encoding per table: version 2 only for a table with an owner
	// (version 3 says nothing of owners: its records may have none).
	if version == snapVersion && owned == 0 {
		return 0, nil, s.badSnapshot("version 2 without an owner")
	}
	return applied, t, nil
}

// readUvarint reads one minimal uvarint, appending its bytes to rec for the
// checksum.
func (s *onDisk) readUvarint(br *bufio.Reader, rec []byte) (uint64, []byte, error) {
	start := len(rec)
	for range binary.MaxVarintLen64 {
		c, err := br.ReadByte()
		if err != nil {
			return 0, rec, s.readErr(err)
		}
		rec = append(rec, c)
		if c < 0x80 {
			v, m := uvarint(rec[start:])
			if m != len(rec)-start {
				return 0, rec, s.badSnapshot("bad varint")
			}
			return v, rec, nil
		}
	}
	return 0, rec, s.badSnapshot("bad varint")
}

// writeTable replaces the shard's rows, meta and directory in pebble by
// t's (its rows, and its seq, fence, cluster version and directory at
// applied), in batches of bounded size.
func (s *onDisk) writeTable(applied uint64, t *table, stopc <-chan struct{}) error {
	b, err := s.writeRows(t, stopc)
	if err != nil {
		return err
	}
	defer b.Close()
	if t.dirVersion != 0 {
		s.putDir(b, t.dirVersion, t.dir)
	}
	s.putMeta(b, t.meta(applied))
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("statemachine: shard %d: write snapshot meta: %w", s.shard, err)
	}
	return nil
}

// writeRows deletes the shard's meta and directory and replaces its rows
// in pebble by t's, in batches of bounded size, all committed but the
// last, which it returns for the caller to add the meta (and the
// directory, if any) to and commit. So the meta is absent until the
// caller's commit, and Open drops rows without one.
func (s *onDisk) writeRows(t *table, stopc <-chan struct{}) (*pebble.Batch, error) {
	b := s.db.NewBatch()
	fail := func(err error) (*pebble.Batch, error) {
		_ = b.Close()
		return nil, err
	}
	_ = b.Delete(s.metaKey[:], nil)
	_ = b.Delete(s.dirKey[:], nil)
	_ = b.DeleteRange(s.tableLo[:], s.tableHi[:], nil)
	_ = b.DeleteRange(s.grantLo[:], s.grantHi[:], nil)
	n := 0
	for i := range t.rows {
		if t.rows[i].tok&rowHeld == 0 {
			continue
		}
		if n%stopEvery == 0 && stopped(stopc) {
			return fail(sm.ErrSnapshotStopped)
		}
		n++
		s.writeRow(b, t, uint32(i))
		if b.Len() >= recoverBatchSz {
			if err := b.Commit(pebble.NoSync); err != nil {
				return fail(fmt.Errorf("statemachine: shard %d: write snapshot rows: %w", s.shard, err))
			}
			_ = b.Close()
			b = s.db.NewBatch()
		}
	}
	return b, nil
}
