package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func saveSnapshot(t testing.TB, s *onDisk) []byte {
	t.Helper()
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.SaveSnapshot(ctx, &buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// filled returns a shard holding n locks after some churn; every third
// lock has an owner (filledOwner).
func filled(t *testing.T, shard uint64, n int) *onDisk {
	t.Helper()
	s, _ := openSM(t, newTestDB(t), nil, shard)
	var idx uint64
	for i := 0; i < n; i += 100 {
		var cmds []Command
		for j := i; j < min(i+100, n); j++ {
			cmds = append(cmds, grantBy(fmt.Sprintf("key/%06d", j), uint32(j), filledOwner(j)))
			cmds = append(cmds, grantBy(fmt.Sprintf("gone/%d", j), 1, filledOwner(j+1)))
			cmds = append(cmds, release(fmt.Sprintf("gone/%d", j), 0))
		}
		idx++
		update(t, s, entry(idx, cmds...))
	}
	return s
}

// filledOwner is the owner filled gives its j-th lock: "" (none) for two
// in three.
func filledOwner(j int) string {
	if j%3 != 0 {
		return ""
	}
	return fmt.Sprintf("owner-%d", j)
}

func TestSnapshotRoundTrip(t *testing.T) {
	src := filled(t, 3, 10000)
	data := saveSnapshot(t, src)
	if again := saveSnapshot(t, src); !bytes.Equal(data, again) {
		t.Fatal("two snapshots of the same state differ")
	}

	obs := newRecorder()
	dst, _ := openSM(t, newTestDB(t), obs, 3)
	if err := dst.RecoverFromSnapshot(bytesReader(data), make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if a, b := scanShard(t, src.db, 3), scanShard(t, dst.db, 3); !slices.Equal(a, b) {
		t.Fatalf("tables differ after recovery (%d vs %d rows)", len(a), len(b))
	}
	if !reflect.DeepEqual(locks(src), locks(dst)) {
		t.Fatal("in-memory tables differ")
	}
	if dst.applied != src.applied || dst.t.seq != src.t.seq {
		t.Fatalf("applied/seq %d/%d, want %d/%d", dst.applied, dst.t.seq, src.applied, src.t.seq)
	}
	got := obs.lastReset(3)
	if len(got) != 10000 || got["key/000042"].LeaseMs != 42 {
		t.Fatalf("Reset told %d locks", len(got))
	}
	if o, none := got["key/000042"].Owner, got["key/000043"].Owner; string(o) != "owner-42" || none != nil {
		t.Fatalf("Reset told owners %q and %q", o, none)
	}
	if data[4] != snapVersion {
		t.Fatalf("SaveSnapshot wrote version %d", data[4])
	}
	// The retry of an owner's grant finds it in the recovered table.
	update(t, dst, entry(src.applied+1, grantBy("key/000042", 7, "owner-42"), grantBy("key/000045", 7, "owner-42")))
	if r := obs.calls()[0].results; r[0] != (Result{Code: Regranted, Token: locks(src)["key/000042"].token}) || r[1].Code != GrantRejected {
		t.Fatalf("retries after recovery: %+v", r)
	}
	checkMirror(t, dst)
	// Tokens continue above every token of the source.
	update(t, dst, entry(src.applied+2, grant("next", 1)))
	if tok := locks(dst)["next"].token; tok != (src.t.seq+1)<<ShardBits|3 {
		t.Fatalf("next token %d", tok)
	}
	// The applied index survives a checkpoint and a reopen too.
	syncSM(t, dst)
	if _, applied := openSM(t, dst.db, nil, 3); applied != src.applied+2 {
		t.Fatalf("reopened at %d", applied)
	}
}

// TestSnapshotVersion checks that SaveSnapshot writes version 3 if the
// table has a fence, whatever its owners, and otherwise as before the
// fence existed: version 1, the stream from before owners, unless a lock
// has an owner; that each stream is the one encodeStream writes of the
// table; and that recovering from it gives the table back, fence included
// (in memory and in the meta).
func TestSnapshotVersion(t *testing.T) {
	const proposer, other = 7, 8 // entry's proposer, and another
	tests := []struct {
		name    string
		fence   bool // a fence of proposer comes first
		cmds    []Command
		version byte
	}{
		{"empty table", false, nil, snapVersionNoOwners},
		{"no owners", false, []Command{grant("a", 1), grant("b", 2), {Op: OpGrant, Key: []byte("c"), LeaseMs: 3, Owner: []byte{}}}, snapVersionNoOwners},
		{"owner released", false, []Command{grant("a", 1), grantBy("b", 2, "me"), release("b", 0)}, snapVersionNoOwners},
		{"owner expired", false, []Command{grantBy("a", 1, "me"), expire("a", 1<<ShardBits|4)}, snapVersionNoOwners},
		{"one owner", false, []Command{grant("a", 1), grantBy("b", 2, "me"), grant("c", 3)}, snapVersion},
		{"owners only", false, []Command{grantBy("a", 1, "x"), grantBy("b", 2, strings.Repeat("o", MaxOwnerLen))}, snapVersion},
		{"owner regranted", false, []Command{grantBy("a", 1, "me"), grantBy("a", 1, "me")}, snapVersion},
		{"fence, empty table", true, nil, snapVersionFence},
		{"fence, no owners", true, []Command{grant("a", 1), grant("b", 2)}, snapVersionFence},
		{"fence, owner released", true, []Command{grant("a", 1), grantBy("b", 2, "me"), release("b", 0)}, snapVersionFence},
		{"fence and owners", true, []Command{grantBy("a", 1, "x"), grant("b", 2), grantBy("c", 3, strings.Repeat("o", MaxOwnerLen))}, snapVersionFence},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openSM(t, newTestDB(t), nil, 4)
			var ents []sm.Entry
			if tc.fence {
				ents = append(ents, fenceEntry(1, proposer))
			}
			ents = append(ents, entry(uint64(len(ents)+1), tc.cmds...))
			update(t, s, ents...)
			var held []Lock
			s.t.each(func(l Lock) { held = append(held, l) })
			data := saveSnapshot(t, s)
			// encodeStream drops the fence from versions 1 and 2, so
			// this also checks that a fence is not dropped.
			if want := encodeStream(tc.version, 4, s.t.meta(s.applied), held); !bytes.Equal(data, want) {
				t.Fatalf("saved\n%x\nwant version %d\n%x", data, tc.version, want)
			}
			obs := newRecorder()
			dst, _ := openSM(t, newTestDB(t), obs, 4)
			if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(locks(dst), locks(s)) || dst.t.meta(dst.applied) != s.t.meta(s.applied) {
				t.Fatalf("recovered %v, %+v; want %v, %+v", locks(dst), dst.t.meta(dst.applied), locks(s), s.t.meta(s.applied))
			}
			checkOwners(t, dst.t)
			checkMirror(t, dst) // the meta has the fence
			// The recovered fence keeps another proposer out.
			update(t, dst, entryBy(dst.applied+1, other, grant("new", 1)))
			if got := obs.calls()[0].results[0].Code; (got == Fenced) != tc.fence {
				t.Fatalf("another proposer's grant after recovery: %d", got)
			}
		})
	}
}

// TestSaveSnapshotChecksVersion: the version comes from the table, which
// must agree with the checkpoint it was prepared from; if it did not,
// SaveSnapshot fails rather than drop an owner or write a version 2 stream
// without one.
func TestSaveSnapshotChecksVersion(t *testing.T) {
	for _, owner := range []string{"", "me"} {
		s, _ := openSM(t, newTestDB(t), nil, 1)
		update(t, s, entry(1, grantBy("a", 1, owner)))
		ctx, err := s.PrepareSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		c := ctx.(*snapCtx)
		if c.owned != (owner != "") {
			t.Fatalf("owner %q: prepared with owned %v", owner, c.owned)
		}
		c.owned = !c.owned
		if err := s.SaveSnapshot(ctx, io.Discard, nil); err == nil {
			t.Errorf("owner %q: SaveSnapshot with the wrong version succeeded", owner)
		}
	}
}

func TestSnapshotIsPointInTime(t *testing.T) {
	s, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, s, entry(1, grant("a", 1)))
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, entry(2, release("a", 0), grant("b", 1)), fenceEntry(3, 9))
	var buf bytes.Buffer
	if err := s.SaveSnapshot(ctx, &buf, nil); err != nil {
		t.Fatal(err)
	}
	if v := buf.Bytes()[4]; v != snapVersionNoOwners {
		t.Fatalf("a snapshot prepared before the fence is version %d", v)
	}
	dst, _ := openSM(t, newTestDB(t), nil, 1)
	if err := dst.RecoverFromSnapshot(&buf, nil); err != nil {
		t.Fatal(err)
	}
	if got := locks(dst); len(got) != 1 || got["a"].token == 0 || dst.applied != 1 || dst.t.seq != 1 || dst.t.fence != 0 {
		t.Fatalf("recovered %v at %d, seq %d, fence %x", got, dst.applied, dst.t.seq, dst.t.fence)
	}
}

func TestRecoverReplacesShardOnly(t *testing.T) {
	src := filled(t, 2, 50)
	data := saveSnapshot(t, src)

	db := newTestDB(t)
	dst, _ := openSM(t, db, nil, 2)
	update(t, dst, entry(1, grant("stale", 1), grant("key/000001", 999)))
	neighbours := map[uint64]*onDisk{}
	for _, id := range []uint64{1, 3} {
		n, _ := openSM(t, db, nil, id)
		update(t, n, entry(1, grant("key/000001", 5), grant("stale", 5)))
		neighbours[id] = n
	}
	before1, before3 := scanShard(t, db, 1), scanShard(t, db, 3)

	if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
		t.Fatal(err)
	}
	if a, b := scanShard(t, src.db, 2), scanShard(t, db, 2); !slices.Equal(a, b) {
		t.Fatalf("shard 2 is not the snapshot's:\n%v\n%v", a, b)
	}
	if _, held := locks(dst)["stale"]; held {
		t.Error("a key the snapshot does not have survived in memory")
	}
	if !slices.Equal(before1, scanShard(t, db, 1)) || !slices.Equal(before3, scanShard(t, db, 3)) {
		t.Error("recovery touched another shard")
	}
}

func TestRecoverRejectsBadStreams(t *testing.T) {
	src := filled(t, 1, 300)
	data := saveSnapshot(t, src)
	// The same table with a fence: version 3.
	update(t, src, fenceEntry(src.applied+1, 0x0102030405060708))
	fenced := saveSnapshot(t, src)
	if data[4] != snapVersion || fenced[4] != snapVersionFence {
		t.Fatalf("streams of version %d and %d", data[4], fenced[4])
	}
	flipIn := func(d []byte, i int) []byte {
		d = bytes.Clone(d)
		d[i] ^= 0x40
		return d
	}
	flip := func(i int) []byte { return flipIn(data, i) }
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"header only", data[:snapHeaderLen]},
		{"cut in a record", data[:len(data)/2]},
		{"cut before the trailer", data[:len(data)-13]},
		{"cut in the count", data[:len(data)-6]},
		{"cut in the checksum", data[:len(data)-1]},
		{"bad magic", flip(0)},
		{"bad version", flip(4)},
		{"other shard", flip(5)},
		{"flipped seq", flip(17)},
		{"flipped key byte", flip(snapHeaderLen + 3)},
		{"flipped record in the middle", flip(len(data) / 2)},
		{"flipped count", flip(len(data) - 6)},
		{"flipped checksum", flip(len(data) - 1)},
		{"version 3: cut in the fence", fenced[:snapHeaderLen+3]},
		{"version 3: header only", fenced[:snapHeaderLen+snapFenceLen]},
		{"version 3: cut in a record", fenced[:len(fenced)/2]},
		{"version 3: flipped seq", flipIn(fenced, 17)},
		{"version 3: flipped fence", flipIn(fenced, snapHeaderLen+2)},
		{"version 3: flipped last fence byte", flipIn(fenced, snapHeaderLen+snapFenceLen-1)},
		{"version 3: flipped first record", flipIn(fenced, snapHeaderLen+snapFenceLen)},
		{"version 3: flipped checksum", flipIn(fenced, len(fenced)-1)},
	}
	tok := uint64(1<<ShardBits | 1)
	lock := func(owner string) []Lock {
		return []Lock{{Key: []byte("k"), Token: tok, LeaseMs: 1, Owner: []byte(owner)}}
	}
	// patch rewrites one byte of a stream and fixes its checksum, so that
	// the record, not the checksum, is what is wrong.
	patch := func(d []byte, i int, b byte) []byte {
		d = bytes.Clone(d)
		d[i] = b
		binary.LittleEndian.PutUint32(d[len(d)-4:], crc32.Checksum(d[:len(d)-4], crcTable))
		return d
	}
	ownerLenAt := snapHeaderLen + 1 + 1 + 2 + 1 // keylen, key, token (2 bytes), lease
	tests = append(tests, []struct {
		name string
		data []byte
	}{
		{"owner length 65", encodeSnapshot(snapVersion, 1, 1, 1, lock(strings.Repeat("o", MaxOwnerLen+1)))},
		{"owner longer than the stream", patch(encodeSnapshot(snapVersion, 1, 1, 1, lock("o")), ownerLenAt, 60)},
		{"non-minimal owner length", patch(encodeSnapshot(snapVersion, 1, 1, 1, lock("")), ownerLenAt, 0x80)},
		// Read as version 1, the owner length is where the next keylen
		// should be.
		{"version 1 record with an owner", patch(encodeSnapshot(snapVersion, 1, 1, 1, lock("o")), 4, snapVersionNoOwners)},
		{"version 4", patch(encodeSnapshot(snapVersion, 1, 1, 1, lock("o")), 4, 4)},
		{"version 0", patch(encodeSnapshot(snapVersion, 1, 1, 1, lock("o")), 4, 0)},
		// The fence's 8 bytes make the difference between version 3 and
		// the others: each read as the other goes wrong.
		{"version 2 read as 3", patch(encodeSnapshot(snapVersion, 1, 1, 1, lock("o")), 4, snapVersionFence)},
		{"version 1 read as 3", patch(encodeSnapshot(snapVersionNoOwners, 1, 1, 1, lock("")), 4, snapVersionFence)},
		{"version 3 read as 2", patch(fenced, 4, snapVersion)},
		{"version 3 read as 1", patch(fenced, 4, snapVersionNoOwners)},
		// One encoding per table: version 3 only if the table has a fence.
		{"version 3 without a fence", encodeSnapshotV3(1, 1, 1, 0, lock("o"))},
		{"version 3 without a fence or records", encodeSnapshotV3(1, 1, 0, 0, nil)},
		// One encoding per table: version 2 only if a lock has an owner.
		{"version 2 without an owner", encodeSnapshot(snapVersion, 1, 1, 1, lock(""))},
		{"version 2 without records", encodeSnapshot(snapVersion, 1, 1, 0, nil)},
		{"version 2 of the version 1 fixture", func() []byte {
			var held []Lock
			for k, l := range v1SnapshotLocks {
				held = append(held, Lock{Key: []byte(k), Token: l.token, LeaseMs: l.leaseMs})
			}
			// Shard 1's tokens, so that only the version is wrong.
			for i := range held {
				held[i].Token = held[i].Token&^MaxShards | 1
			}
			return encodeSnapshot(snapVersion, 1, 3, 6, held)
		}()},
	}...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := newRecorder()
			dst, _ := openSM(t, newTestDB(t), obs, 1)
			update(t, dst, entry(1, grant("mine", 1)))
			before := scanShard(t, dst.db, 1)
			err := dst.RecoverFromSnapshot(bytesReader(tc.data), nil)
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("err = %v, want ErrBadSnapshot", err)
			}
			if after := scanShard(t, dst.db, 1); !slices.Equal(before, after) {
				t.Error("a rejected snapshot changed the table")
			}
			if got := locks(dst); len(got) != 1 {
				t.Errorf("a rejected snapshot changed memory: %v", got)
			}
		})
	}
	// Every truncation is caught, not just the ones above.
	dst, _ := openSM(t, newTestDB(t), nil, 1)
	for _, d := range [][]byte{data, fenced} {
		for n := 0; n < len(d); n += 7 {
			if err := dst.RecoverFromSnapshot(bytesReader(d[:n]), nil); !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("version %d truncated to %d of %d bytes: %v", d[4], n, len(d), err)
			}
		}
	}
}

func TestSnapshotStop(t *testing.T) {
	s := filled(t, 1, 10)
	stopped := make(chan struct{})
	close(stopped)
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSnapshot(ctx, io.Discard, stopped); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Errorf("SaveSnapshot: %v", err)
	}
	if len(s.snaps) != 0 {
		t.Error("SaveSnapshot kept its pebble snapshot")
	}
	data := saveSnapshot(t, s)
	if err := s.RecoverFromSnapshot(bytesReader(data), stopped); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Errorf("RecoverFromSnapshot: %v", err)
	}
}

func TestSaveSnapshotReportsWriteErrors(t *testing.T) {
	s := filled(t, 1, 5000)
	ctx, _ := s.PrepareSnapshot()
	err := s.SaveSnapshot(ctx, failingWriter{}, nil)
	if !errors.Is(err, sm.ErrSnapshotStreaming) {
		t.Fatalf("err = %v", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, sm.ErrSnapshotStreaming }

func TestCloseReleasesPreparedSnapshot(t *testing.T) {
	s := filled(t, 1, 10)
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(s.snaps) != 0 || ctx.(*snapCtx).snap != nil {
		t.Fatal("Close kept the pebble snapshot")
	}
	if err := s.SaveSnapshot(ctx, io.Discard, nil); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Fatalf("SaveSnapshot after Close: %v", err)
	}
}

// FuzzReadSnapshot checks that reading a stream never panics, that every
// stream it refuses is ErrBadSnapshot, and that every stream it accepts
// begins with the one encoding of the table it read (so nothing in the
// stream is ignored): version 3 exactly when the table has a fence, else
// version 2 exactly when a lock has an owner, with the owner index
// consistent. What follows the trailer is not read (and never was): the
// stream ends there.
func FuzzReadSnapshot(f *testing.F) {
	const shard = 3
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	v1, err := os.ReadFile("testdata/v1-snapshot.bin")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v1)
	f.Add(encodeSnapshot(snapVersionNoOwners, shard, 9, 0, nil))
	f.Add(encodeSnapshot(snapVersion, shard, 9, 0, nil)) // no owner: rejected
	f.Add(encodeSnapshot(snapVersion, shard, 1, 2, []Lock{{Key: []byte("x"), Token: tok(2), LeaseMs: 7}}))
	f.Add(encodeSnapshot(snapVersion, shard, 9, 4, []Lock{
		{Key: []byte("a"), Token: tok(1), LeaseMs: 1000, Owner: []byte("owner-a")},
		{Key: []byte("b"), Token: tok(3), LeaseMs: 5},
		{Key: []byte(strings.Repeat("k", MaxKeyLen)), Token: tok(4), LeaseMs: 1 << 31, Owner: bytes.Repeat([]byte{0xff}, MaxOwnerLen)},
	}))
	f.Add(encodeSnapshot(snapVersionNoOwners, shard, 1, 2, []Lock{{Key: []byte("x"), Token: tok(2), LeaseMs: 7}}))
	f.Add(encodeSnapshotV3(shard, 9, 0, 5, nil))
	f.Add(encodeSnapshotV3(shard, 9, 0, 0, nil)) // no fence: rejected
	f.Add(encodeSnapshotV3(shard, 1, 2, 1<<63, []Lock{{Key: []byte("x"), Token: tok(2), LeaseMs: 7}}))
	f.Add(encodeSnapshotV3(shard, 9, 4, 0xb, []Lock{
		{Key: []byte("a"), Token: tok(1), LeaseMs: 1000, Owner: []byte("owner-a")},
		{Key: []byte("b"), Token: tok(3), LeaseMs: 5},
	}))
	// Versions 4 and 5, with and without a directory, and what they must
	// not be.
	lock := []Lock{{Key: []byte("x"), Token: tok(2), LeaseMs: 7, Owner: []byte("o")}}
	f.Add(encodeStream(snapVersionVersioned, shard, meta{applied: 9, seq: 2, fence: 5, level: 2}, lock))
	f.Add(encodeStream(snapVersionVersioned, shard, meta{applied: 9, seq: 2, level: LevelMembership}, lock))
	f.Add(encodeStream(snapVersionDirectory, shard, meta{applied: 9, seq: 2, fence: 5, level: LevelMembership}, lock))
	f.Add(encodeStream(snapVersionDirectory, shard, meta{applied: 9, seq: 2, level: LevelMembership, dirVersion: 3, dir: "members"}, lock))
	f.Add(encodeStream(snapVersionDirectory, shard, meta{applied: 9, seq: 2, level: 2, dirVersion: 3, dir: "members"}, nil))
	f.Add(encodeStream(snapVersionDirectory, shard, meta{applied: 9, seq: 2, level: LevelMembership, dirVersion: 3}, nil))
	f.Add(encodeStream(snapVersionDirectory, shard, meta{applied: 9, seq: 2, level: LevelMembership, dir: "m"}, nil))
	// Version 6, with shared grants and without, and what it must not be.
	shared := []Lock{
		{Key: []byte("a"), Token: tok(1), LeaseMs: 7, Permits: 3},
		{Key: []byte("a"), Token: tok(2), LeaseMs: 8, Owner: []byte("r"), Permits: 3},
		{Key: []byte("b"), Token: tok(3), LeaseMs: 9, Owner: []byte("w")},
		{Key: []byte("c"), Token: tok(4), LeaseMs: 1, Permits: MaxPermits},
	}
	f.Add(encodeStream(snapVersionShared, shard, meta{applied: 9, seq: 4, fence: 5, level: LevelShared, dirVersion: 1, dir: "m"}, shared))
	f.Add(encodeStream(snapVersionShared, shard, meta{applied: 9, seq: 2, level: LevelShared}, lock))
	f.Add(encodeStream(snapVersionShared, shard, meta{applied: 9, seq: 4, level: LevelMembership}, shared))
	f.Add(encodeStream(snapVersionDirectory, shard, meta{applied: 9, seq: 2, level: LevelShared}, lock))
	f.Add(encodeStream(snapVersionShared, shard, meta{applied: 9, seq: 4, level: LevelShared}, append(slices.Clone(shared),
		Lock{Key: []byte("a"), Token: tok(3), Permits: 2})))
	s := newOnDisk(nil, nil, shard) // readSnapshot does not touch the DB
	f.Fuzz(func(t *testing.T, data []byte) {
		applied, tb, err := s.readSnapshot(bytes.NewReader(data), nil)
		if err != nil {
			// A table of a cluster version above this build's is
			// refused as such (ErrTooOld), anything else as bad.
			if !errors.Is(err, ErrBadSnapshot) && !errors.Is(err, ErrTooOld) {
				t.Fatalf("error %v is neither ErrBadSnapshot nor ErrTooOld", err)
			}
			return
		}
		checkOwners(t, tb)
		// One encoding per table: versions 1 and 2 without a fence, 3
		// with one; 1 and 2 tell owners apart; 4 and 5 tell cluster
		// versions apart, and only 5 has a directory.
		v := data[4]
		if v == snapVersionFence && tb.fence == 0 || v < snapVersionFence && tb.fence != 0 {
			t.Fatalf("version %d stream, fence %x", v, tb.fence)
		}
		if v < snapVersionFence && (v == snapVersion) != (len(tb.owners) > 0) {
			t.Fatalf("version %d stream, %d owners", v, len(tb.owners))
		}
		if want := streamVersion(tb.meta(applied), len(tb.owners) > 0); v != want {
			t.Fatalf("version %d stream of a table streamed in version %d", v, want)
		}
		if (len(tb.shared) > 0) != (v == snapVersionShared && len(tb.shared) > 0) || v == snapVersionShared && tb.level < LevelShared {
			t.Fatalf("version %d stream of level %d, %d shared keys", v, tb.level, len(tb.shared))
		}
		if (tb.dirVersion == 0) != (tb.dir == nil) || len(tb.dir) > MaxDirectory || v < snapVersionDirectory && tb.dirVersion != 0 {
			t.Fatalf("version %d stream, directory %d of %d bytes", v, tb.dirVersion, len(tb.dir))
		}
		var held []Lock
		tb.each(func(l Lock) { held = append(held, l) })
		if again := encodeStream(data[4], shard, tb.meta(applied), held); !bytes.HasPrefix(data, again) {
			t.Fatalf("re-encoding is not what the stream begins with:\n%x\n%x", again, data)
		}
	})
}
