package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// TestSealDirectory: a directory write is version 7, the proposer, the
// base in the seq field, count 0, then the blob's length and the blob;
// it decodes to a Header with Directory, Base and Blob (aliasing the
// entry, capped at its end) and Seq 0, which Seal encodes again to the
// same bytes.
func TestSealDirectory(t *testing.T) {
	tests := []struct {
		name           string
		proposer, base uint64
		blob           []byte
	}{
		{"first write", 1, 0, []byte("m")},
		{"on a later version", 3, 41, []byte("members 1,2,3")},
		{"extremes", math.MaxUint64, math.MaxUint64, bytes.Repeat([]byte{0}, MaxDirectory)},
		{"a blob of 128 bytes (two-byte length)", 2, 1, bytes.Repeat([]byte{0xff}, 128)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := SealDirectory(tc.proposer, tc.base, tc.blob)
			want := []byte{encVersionDirectory}
			want = binary.LittleEndian.AppendUint64(want, tc.proposer)
			want = binary.LittleEndian.AppendUint64(want, tc.base)
			want = binary.LittleEndian.AppendUint32(want, 0)
			want = binary.AppendUvarint(want, uint64(len(tc.blob)))
			want = append(want, tc.blob...)
			if !bytes.Equal(data, want) {
				t.Fatalf("sealed\n%x\nwant\n%x", data, want)
			}
			h, cmds, err := DecodeBatch(data, nil)
			if err != nil || len(cmds) != 0 {
				t.Fatalf("decode: %v, %d commands", err, len(cmds))
			}
			if !h.Directory || h.Proposer != tc.proposer || h.Base != tc.base || h.Seq != 0 || !bytes.Equal(h.Blob, tc.blob) || h.kinds() != 1 {
				t.Fatalf("decoded %+v", h)
			}
			if &h.Blob[0] != &data[len(data)-len(tc.blob)] || cap(h.Blob) != len(h.Blob) {
				t.Fatal("the blob does not alias the entry, or its capacity reaches past it")
			}
			if again := encode(h); !bytes.Equal(again, data) {
				t.Fatalf("re-encoding differs:\n%x\n%x", again, data)
			}
		})
	}

	// A batch sealed as a directory write and reused without Reset
	// builds a batch of commands, not commands after the blob.
	var b Batch
	b.Seal(Header{Proposer: 1, Directory: true, Blob: []byte("blob")})
	b.Append(grant("k", 1))
	if got, want := b.Seal(Header{Seq: 2}), encode(Header{Seq: 2}, grant("k", 1)); !bytes.Equal(got, want) {
		t.Fatalf("reused after a directory write:\n%x\nwant\n%x", got, want)
	}
	b.Reset()
	b.Seal(Header{Proposer: 1, Directory: true, Blob: []byte("a longer blob")})
	if got, want := b.Seal(Header{Proposer: 1, Directory: true, Blob: []byte("b")}), SealDirectory(1, 0, []byte("b")); !bytes.Equal(got, want) {
		t.Fatalf("sealed twice:\n%x\nwant\n%x", got, want)
	}

	for _, bad := range []struct {
		name     string
		proposer uint64
		blob     []byte
	}{
		{"replica 0", 0, []byte("m")},
		{"nil blob", 1, nil},
		{"empty blob", 1, []byte{}},
		{"blob too long", 1, make([]byte, MaxDirectory+1)},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("SealDirectory with %s did not panic", bad.name)
				}
			}()
			SealDirectory(bad.proposer, 0, bad.blob)
		}()
	}
}

// dirObserver records, for every Applied, the header's base and the
// directory the table has then: what the engine reads to learn whether
// its write took.
type dirObserver struct {
	table sync.Mutex
	t     Table
	seen  []dirSeen
}

type dirSeen struct {
	h       Header // Blob copied
	version uint64
	blob    string
}

func (o *dirObserver) Locker(uint64) sync.Locker   { return &o.table }
func (o *dirObserver) Reset(_ uint64, t Table)     { o.t = t }
func (o *dirObserver) last() dirSeen               { return o.seen[len(o.seen)-1] }
func (o *dirObserver) directory() (uint64, []byte) { return o.t.Directory() }
func (o *dirObserver) Applied(_, _ uint64, h Header, _ []Command, _ []Result) {
	h.Blob, h.Size = bytes.Clone(h.Blob), 0
	v, blob := o.t.Directory()
	o.seen = append(o.seen, dirSeen{h: h, version: v, blob: string(blob)})
}

// TestApplyDirectory: a directory write takes if and only if the table's
// cluster version is LevelMembership or more and its base is the
// directory's version; it changes no lock, no token counter and no fence,
// is not kept out by the fence, and reaches the observer, which reads the
// directory it left in Applied.
func TestApplyDirectory(t *testing.T) {
	type write struct {
		base uint64
		blob string
	}
	tests := []struct {
		name    string
		level   uint64 // raised to; 0: never raised
		writes  []write
		version uint64 // the directory's, after the writes
		blob    string
	}{
		{"never raised", 0, []write{{0, "a"}}, 0, ""},
		{"level 2", 2, []write{{0, "a"}, {1, "b"}}, 0, ""},
		{"first write", LevelMembership, []write{{0, "a"}}, 1, "a"},
		{"wrong base on a new directory", LevelMembership, []write{{1, "a"}}, 0, ""},
		{"a chain of writes", LevelMembership, []write{{0, "a"}, {1, "b"}, {2, "c"}}, 3, "c"},
		{"two writes on one base: the first takes", LevelMembership, []write{{0, "a"}, {0, "b"}}, 1, "a"},
		{"a stale base", LevelMembership, []write{{0, "a"}, {1, "b"}, {1, "c"}, {0, "d"}}, 2, "b"},
		{"a base ahead", LevelMembership, []write{{0, "a"}, {5, "b"}}, 1, "a"},
		{"the largest base", LevelMembership, []write{{math.MaxUint64, "a"}}, 0, ""},
		{"above this build", FeatureLevel + 1, []write{{0, "a"}}, 1, "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := &dirObserver{}
			s, _ := openSM(t, newTestDB(t), obs, 1)
			ents := []sm.Entry{fenceEntry(1, 7), entry(2, grantBy("a", 100, "o"))}
			if tc.level != 0 {
				ents = append(ents, raiseEntry(3, tc.level))
			}
			update(t, s, ents...)
			before, seq := locks(s), s.t.seq
			for i, w := range tc.writes {
				e := dirEntry(s.applied+1, w.base, w.blob)
				if got := update(t, s, e); got[0] != 0 {
					t.Fatalf("write %d: entry value %d, want 0 commands", i, got[0])
				}
				// The table has its own copy of the blob.
				clear(e.Cmd)
				last := obs.last()
				if !last.h.Directory || last.h.Proposer != 2 || last.h.Base != w.base || string(last.h.Blob) != w.blob {
					t.Fatalf("write %d: observer got %+v", i, last.h)
				}
				if v, blob := obs.directory(); last.version != v || last.blob != string(blob) {
					t.Fatalf("write %d: Applied read directory %d %q, the table has %d %q after it", i, last.version, last.blob, v, blob)
				}
			}
			v, blob := obs.directory()
			if v != tc.version || string(blob) != tc.blob || (blob == nil) != (v == 0) {
				t.Fatalf("directory %d %q, want %d %q", v, blob, tc.version, tc.blob)
			}
			if !maps.Equal(locks(s), before) || s.t.seq != seq || s.t.fence != 7 {
				t.Fatalf("locks %v, seq %d, fence %d changed", locks(s), s.t.seq, s.t.fence)
			}
			if s.t.dirChanged != (v != 0) {
				t.Fatalf("dirChanged %v with directory version %d before a checkpoint", s.t.dirChanged, v)
			}
			// The fence still holds against batches of others.
			update(t, s, entryBy(s.applied+1, 2, grant("b", 1)))
			if _, held := locks(s)["b"]; held {
				t.Fatal("a batch of the directory's writer got past the fence")
			}
		})
	}
	if v, blob := (Table{}).Directory(); v != 0 || blob != nil {
		t.Fatalf("the zero Table's directory: %d %q", v, blob)
	}
}

// dirValue is the stored directory of shard in db, nil if none.
func dirValue(t *testing.T, db *pebble.DB, shard uint64) []byte {
	t.Helper()
	k := shardKey(dirPrefix, shard)
	v, closer, err := db.Get(k[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return bytes.Clone(v)
}

// storedDir is the value of a stored directory.
func storedDir(version uint64, blob string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, version), blob...)
}

// putRaw writes key=value into db, bypassing the state machine.
func putRaw(t *testing.T, db *pebble.DB, key [prefixLen]byte, value []byte) {
	t.Helper()
	if err := db.Set(key[:], value, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// TestDirectoryPersists: a checkpoint writes the directory, under its own
// key and only when it changed since the last one; Open reads it back,
// and the observer's Reset table has it; a table that never had one
// writes no key; a shard without a meta drops a directory it finds.
func TestDirectoryPersists(t *testing.T) {
	db := newTestDB(t)
	obs := &dirObserver{}
	s, _ := openSM(t, db, obs, 5)
	update(t, s, raiseEntry(1, LevelMembership), entry(2, grant("a", 1)))
	syncSM(t, s)
	if v := dirValue(t, db, 5); v != nil {
		t.Fatalf("a table without a directory stored %x", v)
	}
	update(t, s, dirEntry(3, 0, "members v1"))
	checkMirror(t, s)
	if v, want := dirValue(t, db, 5), storedDir(1, "members v1"); !bytes.Equal(v, want) {
		t.Fatalf("stored %x, want %x", v, want)
	}
	if n := metaBytes(t, db, 5); n != metaLenVersioned {
		t.Fatalf("the meta is %d bytes", n)
	}

	// A checkpoint after no change leaves the stored directory alone.
	marker := storedDir(1, "marker")
	putRaw(t, db, shardKey(dirPrefix, 5), marker)
	update(t, s, entry(4, grant("b", 1)), dirEntry(5, 0, "lost the race"))
	syncSM(t, s)
	if v := dirValue(t, db, 5); !bytes.Equal(v, marker) {
		t.Fatalf("a checkpoint without a directory change wrote %x", v)
	}
	update(t, s, dirEntry(6, 1, "members v2"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v, want := dirValue(t, db, 5), storedDir(2, "members v2"); !bytes.Equal(v, want) {
		t.Fatalf("stored %x after Close, want %x", v, want)
	}
	s, applied := openSM(t, db, obs, 5)
	if v, blob := obs.directory(); applied != 6 || v != 2 || string(blob) != "members v2" || s.t.dirChanged {
		t.Fatalf("reopened at %d with directory %d %q (changed %v)", applied, v, blob, s.t.dirChanged)
	}
	// The next write goes on from the version read back.
	update(t, s, dirEntry(7, 2, "members v3"))
	checkMirror(t, s)

	// Shards keep their own directories.
	other, _ := openSM(t, db, nil, 6)
	update(t, other, raiseEntry(1, LevelMembership), dirEntry(2, 0, "six"))
	checkMirror(t, other)
	checkMirror(t, s)

	// A directory in a shard without a meta is the remains of something
	// else: Open drops it with the rows.
	putRaw(t, db, shardKey(dirPrefix, 9), storedDir(1, "orphan"))
	putRaw(t, db, shardKey(tablePrefix, 9), make([]byte, rowLen))
	orphan, _ := openSM(t, db, nil, 9)
	if v, _ := (Table{orphan.t}).Directory(); v != 0 || dirValue(t, db, 9) != nil {
		t.Fatalf("a shard without a meta opened with directory %d, stored %x", v, dirValue(t, db, 9))
	}
	if rows := scanShard(t, db, 9); len(rows) != 0 {
		t.Fatalf("rows left: %v", rows)
	}
}

// TestOpenRejectsBadDirectory: a stored directory this code could not
// have written (a bad length, version 0, one in a table below
// LevelMembership) is an error naming the shard, not a directory.
func TestOpenRejectsBadDirectory(t *testing.T) {
	tests := []struct {
		name  string
		level uint64
		value []byte
	}{
		{"no blob", LevelMembership, storedDir(1, "")},
		{"shorter than a version", LevelMembership, []byte{1, 0, 0}},
		{"blob too long", LevelMembership, storedDir(1, string(make([]byte, MaxDirectory+1)))},
		{"version 0", LevelMembership, storedDir(0, "m")},
		{"in a table of level 2", 2, storedDir(1, "m")},
		{"in a table never raised", 0, storedDir(1, "m")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := newTestDB(t)
			s, _ := openSM(t, db, nil, 4)
			if tc.level != 0 {
				update(t, s, raiseEntry(1, tc.level))
			} else {
				update(t, s, entry(1, grant("a", 1)))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			putRaw(t, db, shardKey(dirPrefix, 4), tc.value)
			if _, err := Factory(db, nil)(4, 1).Open(nil); err == nil || !strings.Contains(err.Error(), "shard 4: corrupt directory") {
				t.Fatalf("Open: %v", err)
			}
		})
	}
}

// TestSnapshotDirectory: a table of cluster version LevelMembership or
// more streams version 5, with its directory (0 and 0 if it has none),
// whatever its fence and owners; a table of version 2 still streams
// version 4 (a build of level 2 can recover from it); recovering takes
// the stream's directory, in memory and in pebble, replacing the one the
// table had; the stream has the directory of its PrepareSnapshot.
func TestSnapshotDirectory(t *testing.T) {
	tests := []struct {
		name    string
		level   uint64
		fence   bool
		dirs    []string // written in order, each on the last
		version byte
	}{
		{"level 2: version 4, no directory", 2, false, []string{"ignored"}, snapVersionVersioned},
		{"level 2 with a fence", 2, true, nil, snapVersionVersioned},
		{"level 3 without a directory", LevelMembership, false, nil, snapVersionDirectory},
		{"level 3 with a directory", LevelMembership, false, []string{"a", "members"}, snapVersionDirectory},
		{"level 3, fence and the largest directory", LevelMembership, true, []string{string(bytes.Repeat([]byte{0xee}, MaxDirectory))}, snapVersionDirectory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openSM(t, newTestDB(t), nil, 4)
			ents := []sm.Entry{raiseEntry(1, tc.level)}
			if tc.fence {
				ents = append(ents, fenceEntry(2, 7))
			}
			ents = append(ents, entry(uint64(len(ents)+1), grantBy("a", 1, "x"), grant("b", 2)))
			for i, d := range tc.dirs {
				ents = append(ents, dirEntry(uint64(len(ents)+1), uint64(i), d))
			}
			update(t, s, ents...)
			var held []Lock
			s.t.each(func(l Lock) { held = append(held, l) })
			data := saveSnapshot(t, s)
			if data[4] != tc.version {
				t.Fatalf("saved version %d, want %d", data[4], tc.version)
			}
			if want := encodeStream(tc.version, 4, s.t.meta(s.applied), held); !bytes.Equal(data, want) {
				t.Fatalf("saved\n%.200x\nwant\n%.200x", data, want)
			}
			// The destination had a directory of its own, and locks.
			dstDB := newTestDB(t)
			dst, _ := openSM(t, dstDB, nil, 4)
			update(t, dst, raiseEntry(1, LevelMembership), dirEntry(2, 0, "old"), entry(3, grant("old", 1)))
			syncSM(t, dst)
			obs := &dirObserver{}
			dst, _ = openSM(t, dstDB, obs, 4)
			if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(locks(dst), locks(s)) || dst.t.meta(dst.applied) != s.t.meta(s.applied) {
				t.Fatalf("recovered %v, %+v; want %v, %+v", locks(dst), dst.t.meta(dst.applied), locks(s), s.t.meta(s.applied))
			}
			if v, blob := obs.directory(); v != s.t.dirVersion || !bytes.Equal(blob, s.t.dir) {
				t.Fatalf("the observer's table has directory %d %.20q, want %d", v, blob, s.t.dirVersion)
			}
			if got := dirValue(t, dstDB, 4); (got == nil) != (s.t.dirVersion == 0) ||
				got != nil && !bytes.Equal(got, storedDir(s.t.dirVersion, string(s.t.dir))) {
				t.Fatalf("stored directory %.40x after recovery", got)
			}
			checkMirror(t, dst)
		})
	}

	// Point in time: a write after PrepareSnapshot is not in the stream.
	s, _ := openSM(t, newTestDB(t), nil, 4)
	update(t, s, raiseEntry(1, LevelMembership), dirEntry(2, 0, "before"))
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	want := encodeStream(snapVersionDirectory, 4, s.t.meta(s.applied), nil)
	update(t, s, dirEntry(3, 1, "after"))
	var buf bytes.Buffer
	if err := s.SaveSnapshot(ctx, &buf, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("saved\n%x\nwant the directory of PrepareSnapshot\n%x", buf.Bytes(), want)
	}
}

// rawStream is a version 5 stream without records whose directory is
// given as bytes (length and blob), so that it can be what no writer
// writes; its checksum is right.
func rawStream(level, dirVersion uint64, dir []byte) []byte {
	buf := append([]byte(snapMagic), snapVersionDirectory)
	buf = binary.LittleEndian.AppendUint32(buf, 4)
	buf = binary.LittleEndian.AppendUint64(buf, 9) // applied
	buf = binary.LittleEndian.AppendUint64(buf, 0) // seq
	buf = binary.LittleEndian.AppendUint64(buf, 0) // fence
	buf = binary.LittleEndian.AppendUint64(buf, level)
	buf = binary.LittleEndian.AppendUint64(buf, dirVersion)
	buf = append(buf, dir...)
	buf = append(buf, 0)
	buf = binary.LittleEndian.AppendUint64(buf, 0)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, crcTable))
}

// TestSnapshotDirectoryRejected: one encoding per table (version 5 only
// from LevelMembership on, version 4 only below it; a directory of
// version 0 and length 0 or neither), a directory of at most MaxDirectory
// bytes, covered by the checksum; a stream of a cluster version above
// this build's is ErrTooOld. A refused stream changes nothing.
func TestSnapshotDirectoryRejected(t *testing.T) {
	m := meta{applied: 9, level: LevelMembership, dirVersion: 2, dir: "members"}
	good := encodeStream(snapVersionDirectory, 4, m, nil)
	flipped := bytes.Clone(good)
	flipped[bytes.Index(flipped, []byte("members"))] ^= 1
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"version 5 of level 2", encodeStream(snapVersionDirectory, 4, meta{applied: 9, level: 2}, nil), ErrBadSnapshot},
		{"version 5 of level 1", encodeStream(snapVersionDirectory, 4, meta{applied: 9, level: 1}, nil), ErrBadSnapshot},
		{"version 4 of level 3", encodeStream(snapVersionVersioned, 4, meta{applied: 9, level: LevelMembership}, nil), ErrBadSnapshot},
		{"version 5 above this build", encodeStream(snapVersionDirectory, 4, meta{applied: 9, level: FeatureLevel + 1}, nil), ErrTooOld},
		{"a directory of version 0", rawStream(LevelMembership, 0, []byte{1, 'm'}), ErrBadSnapshot},
		{"a version without a directory", rawStream(LevelMembership, 1, []byte{0}), ErrBadSnapshot},
		{"a directory too long", rawStream(LevelMembership, 1, append(binary.AppendUvarint(nil, MaxDirectory+1), make([]byte, MaxDirectory+1)...)), ErrBadSnapshot},
		{"a huge directory length", rawStream(LevelMembership, 1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), ErrBadSnapshot},
		{"a non-minimal directory length", rawStream(LevelMembership, 1, []byte{0x81, 0x00, 'm'}), ErrBadSnapshot},
		{"cut in the directory", good[:bytes.Index(good, []byte("members"))+3], ErrBadSnapshot},
		{"cut before the directory's length", good[:snapHeaderLen+snapFenceLen+snapLevelLen+snapDirVersionLen], ErrBadSnapshot},
		{"a flipped byte in the directory", flipped, ErrBadSnapshot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst, _ := openSM(t, newTestDB(t), nil, 4)
			update(t, dst, raiseEntry(1, LevelMembership), dirEntry(2, 0, "keep"), entry(3, grant("keep", 1)))
			err := dst.RecoverFromSnapshot(bytesReader(tc.data), nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("recover: %v, want %v", err, tc.want)
			}
			if _, ok := locks(dst)["keep"]; !ok || dst.t.dirVersion != 1 || string(dst.t.dir) != "keep" {
				t.Fatalf("a refused stream changed the table: %v, directory %d %q", locks(dst), dst.t.dirVersion, dst.t.dir)
			}
		})
	}
	// The good one is good.
	dst, _ := openSM(t, newTestDB(t), nil, 4)
	if err := dst.RecoverFromSnapshot(bytesReader(good), nil); err != nil || dst.t.dirVersion != 2 || string(dst.t.dir) != "members" {
		t.Fatalf("recover: %v, directory %d %q", err, dst.t.dirVersion, dst.t.dir)
	}
}

// TestBackupDirectory: a backup carries each shard's directory (its parts
// are the shards' streams, version 5 from LevelMembership on), and shows
// shard 1's in BackupInfo from WriteBackup, CheckBackup and RestoreBackup;
// a restore drops every directory (a restored cluster has new members),
// as it drops the cluster version, even one the lock table had left
// without a meta.
func TestBackupDirectory(t *testing.T) {
	s1, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, s1, raiseEntry(1, LevelMembership), dirEntry(2, 0, "members v1"), entry(3, grantBy("a", 1, "o")), dirEntry(4, 1, "members v2"))
	s2, _ := openSM(t, newTestDB(t), nil, 2)
	update(t, s2, raiseEntry(1, LevelMembership), dirEntry(2, 0, "two"), fenceEntry(3, 5), entryBy(4, 5, grant("b", 1)))
	s3, _ := openSM(t, newTestDB(t), nil, 3)
	update(t, s3, raiseEntry(1, 2), entry(2, grant("c", 1)))
	src := []*onDisk{s1, s2, s3}

	var buf bytes.Buffer
	winfo, err := WriteBackup(&buf, len(src), captureOf(src...))
	if err != nil || string(winfo.Directory) != "members v2" {
		t.Fatalf("WriteBackup: %+v, %v", winfo, err)
	}
	data := buf.Bytes()
	for i, s := range src {
		if part := saveSnapshot(t, s); !bytes.Contains(data, part) {
			t.Fatalf("shard %d: the backup does not hold its snapshot stream (version %d)", i+1, part[4])
		}
	}
	cinfo, err := CheckBackup(bytes.NewReader(data))
	if err != nil || string(cinfo.Directory) != "members v2" {
		t.Fatalf("CheckBackup: %+v, %v", cinfo, err)
	}
	db := newTestDB(t)
	putRaw(t, db, shardKey(dirPrefix, 1), storedDir(7, "left over"))
	rinfo, err := RestoreBackup(db, bytes.NewReader(data))
	if err != nil || string(rinfo.Directory) != "members v2" || rinfo.Locks != 3 {
		t.Fatalf("RestoreBackup: %+v, %v", rinfo, err)
	}
	for i, s := range src {
		id := uint64(i + 1)
		obs := &dirObserver{}
		dst, _ := openSM(t, db, obs, id)
		if v, blob := obs.directory(); v != 0 || blob != nil || dst.t.level != levelNone || dirValue(t, db, id) != nil {
			t.Fatalf("shard %d restored with directory %d %q, level %d", id, v, blob, dst.t.level)
		}
		if !maps.Equal(locks(dst), locks(s)) {
			t.Fatalf("shard %d: restored %v, want %v", id, locks(dst), locks(s))
		}
	}

	// A backup whose shard 1 has no directory shows none, even if
	// another shard has one.
	old, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, old, entry(1, grant("a", 1)))
	info, err := WriteBackup(&bytes.Buffer{}, 2, captureOf(old, s2))
	if err != nil || info.Directory != nil {
		t.Fatalf("WriteBackup of a shard 1 without a directory: %+v, %v", info, err)
	}
	// The info's directory is the caller's: changing it changes no table.
	winfo.Directory[0] = 'X'
	if string(s1.t.dir) != "members v2" {
		t.Fatalf("the table's directory is %q", s1.t.dir)
	}
}
