package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/baton-dev/baton/backup"
)

// TestReplicasAgreeShared is TestReplicasAgree with shared grants and
// raises to LevelShared in the workload: two replicas given the same
// entries tell their observers the same, and keep the same table, in
// memory and in pebble, which a reopen reads back (holder index and all).
// It runs long enough for every code to appear, NotEnabled (shared Grants
// before the raise) and the shared ones included.
func TestReplicasAgreeShared(t *testing.T) {
	obsA, obsB := newRecorder(), newRecorder()
	dbA, dbB := newTestDB(t), newTestDB(t)
	a, _ := openSM(t, dbA, obsA, 5)
	b, _ := openSM(t, dbB, obsB, 5)
	w := &workload{rng: rand.New(rand.NewPCG(3, 4)), shared: true}
	learned := 0
	for round := range 600 {
		ents := w.entries()
		va, vb := update(t, a, ents...), update(t, b, ents...)
		if !slices.Equal(va, vb) {
			t.Fatalf("results differ: %v vs %v", va, vb)
		}
		calls := obsA.calls()
		w.learn(calls[learned:])
		learned = len(calls)
		if round%100 == 99 {
			// Checkpoints at different times on the two replicas, and a
			// reopen that must read back the same table.
			syncSM(t, a)
			checkMirror(t, b)
		}
	}
	if !reflect.DeepEqual(obsA.calls(), obsB.calls()) {
		t.Fatal("observers were told different things")
	}
	syncSM(t, a)
	syncSM(t, b)
	if ta, tb := scan(t, dbA, nil, nil), scan(t, dbB, nil, nil); !slices.Equal(ta, tb) {
		t.Fatalf("tables differ:\n%v\n%v", ta, tb)
	}
	if !reflect.DeepEqual(locks(a), locks(b)) {
		t.Fatal("in-memory tables differ")
	}
	checkMirror(t, a)
	if a.t.level != LevelShared || len(a.t.shared) == 0 {
		t.Fatalf("the workload left level %d and %d shared keys", a.t.level, len(a.t.shared))
	}
	seen := map[Code]bool{}
	for _, c := range obsA.calls() {
		for _, r := range c.results {
			seen[r.Code] = true
		}
	}
	for c := Granted; c <= KindMismatch; c++ {
		if !seen[c] {
			t.Errorf("workload never produced code %d", c)
		}
	}
}

// sharedSM is a state machine of shard at LevelShared over a fresh DB,
// after its first entry (the raise).
func sharedSM(t *testing.T, shard uint64, obs Observer) *onDisk {
	t.Helper()
	s, _ := openSM(t, newTestDB(t), obs, shard)
	update(t, s, raiseEntry(1, LevelShared))
	return s
}

// TestSharedRowLayout checks a shared key's checkpoint byte for byte: the
// key's row is its header (token 0, permits where the lease is, no owner),
// and each grant has a row of its own under the grant prefix, by key
// length, key and token (big endian), its value as an exclusive lock's.
func TestSharedRowLayout(t *testing.T) {
	s := sharedSM(t, 1, nil)
	update(t, s, entry(2, grantShared("a", 0x0102, 0x0304, ""), grantShared("a", 0x0102, 5, "me"), grant("b", 6)))
	syncSM(t, s)
	want := []string{
		"740000000161=" + "0000000000000000" + "02010000",                                                 // 't' shard 1 "a" -> token 0, permits 0x0102
		"740000000162=" + "010c000000000000" + "06000000",                                                 // 't' shard 1 "b" -> token 3<<10|1, lease 6
		"67000000010161" + "0000000000000401=" + "0104000000000000" + "04030000",                          // 'g' shard 1, len 1, "a", token 1<<10|1 BE -> token, lease
		"67000000010161" + "0000000000000801=" + "0108000000000000" + "05000000" + "6d65",                 // and its owner
		"6d00000001=" + "0200000000000000" + "0300000000000000" + "0000000000000000" + "0400000000000000", // applied 2, seq 3, no fence, level 4
	}
	if got := scanShard(t, s.db, 1); !slices.Equal(got, want) {
		t.Fatalf("rows\n%v\nwant\n%v", got, want)
	}
	// Release one, then all: the rows go with the grants, the header with
	// the last.
	update(t, s, entry(3, release("a", 1<<ShardBits|1)))
	syncSM(t, s)
	if got := scanShard(t, s.db, 1); len(got) != 4 || got[2] != want[3] {
		t.Fatalf("after one release: %v", got)
	}
	update(t, s, entry(4, release("a", 0)))
	syncSM(t, s)
	if got := scanShard(t, s.db, 1); len(got) != 2 || got[0] != want[1] {
		t.Fatalf("after the release of all: %v", got)
	}
}

// TestSharedCheckpointReopen: shared keys through checkpoints and reopens,
// with each kind of row taking the other's place between checkpoints; the
// reopened table has the same grants and holder index, so that retries,
// releases by token and the release of all work on it as before.
func TestSharedCheckpointReopen(t *testing.T) {
	obs := newRecorder()
	s := sharedSM(t, 2, obs)
	tok := func(seq uint64) uint64 { return seq<<ShardBits | 2 }
	update(t, s, entry(2,
		grantShared("r", 5, 100, "reader-1"), grantShared("r", 5, 200, ""), grantShared("r", 5, 300, "reader-3"),
		grantShared("k", 1, 7, "only"), grant("x", 9),
		// Keys of other lengths whose grants sort among r's and k's.
		grantShared("rr", 2, 1, ""), grantShared("kk", 2, 1, "kk-1"),
	))
	checkMirror(t, s)
	// Each kind of row in the other's place, between checkpoints.
	update(t, s, entry(3, release("k", 0), grant("k", 8), release("x", 0), grantShared("x", 3, 4, "x-1")))
	checkMirror(t, s)
	update(t, s, entry(4, release("k", 0), grantShared("k", 2, 6, ""), release("k", 0), grantShared("k", 4, 6, "k-4")))
	checkMirror(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	obs = newRecorder()
	s, applied := openSM(t, s.db, obs, 2)
	if applied != 4 || s.t.level != LevelShared {
		t.Fatalf("reopened at %d, level %d", applied, s.t.level)
	}
	if got := locks(s); len(got) != 7 { // r's 3, rr, kk, x, k
		t.Fatalf("reopened with %v", got)
	}
	v := Table{s.t}
	h, _ := v.Find([]byte("r"))
	if n, p, ok := v.Shared(h); n != 3 || p != 5 || !ok {
		t.Fatalf("r: %d holders of %d, %v", n, p, ok)
	}
	update(t, s, entry(5,
		grantShared("r", 5, 1, "reader-3"), grantShared("r", 4, 1, ""), grant("r", 1), grantBy("r", 1, "reader-1"),
		release("r", tok(2)), extend("r", tok(3), 77), expire("r", tok(2)),
		release("k", 0), grantShared("x", 3, 1, "x-1"),
	))
	got := obs.calls()[0].results
	want := []Result{
		{Code: Regranted, Token: tok(3)}, {Code: PermitsMismatch}, {Code: GrantRejected}, {Code: KindMismatch},
		{Code: Released, Token: tok(2)}, {Code: Extended, Token: tok(3)}, {Code: Noop},
		{Code: Released}, {Code: Regranted, Token: tok(9)},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after reopen:\n%+v\nwant\n%+v", got, want)
	}
	checkMirror(t, s)
}

// TestOpenRejectsBadSharedRows: Open refuses shared rows that this code
// cannot have written, naming the shard, and opens the good table.
func TestOpenRejectsBadSharedRows(t *testing.T) {
	tok := func(seq uint64) uint64 { return seq<<ShardBits | 6 }
	hdr := func(permits uint32, extra ...byte) []byte {
		return append(binary.LittleEndian.AppendUint32(make([]byte, 8), permits), extra...)
	}
	gkey := func(key string, tk uint64) []byte {
		k := shardKey(grantPrefix, 6)
		b := append(k[:], byte(len(key)))
		b = append(b, key...)
		return binary.BigEndian.AppendUint64(b, tk)
	}
	gval := func(tk uint64, owner string) []byte {
		v := binary.LittleEndian.AppendUint64(nil, tk)
		return append(binary.LittleEndian.AppendUint32(v, 1), owner...)
	}
	tkey := func(key string) []byte { k := shardKey(tablePrefix, 6); return append(k[:], key...) }
	tests := []struct {
		name  string
		level uint64
		rows  [][2][]byte
		want  string
	}{
		{"a header below LevelShared", LevelMembership, [][2][]byte{{tkey("z"), hdr(2)}, {gkey("z", tok(1)), gval(tok(1), "")}}, "corrupt shared key"},
		{"a header of permits 0", LevelShared, [][2][]byte{{tkey("z"), hdr(0)}, {gkey("z", tok(1)), gval(tok(1), "")}}, "corrupt shared key"},
		{"a header of too many permits", LevelShared, [][2][]byte{{tkey("z"), hdr(MaxPermits + 1)}, {gkey("z", tok(1)), gval(tok(1), "")}}, "corrupt shared key"},
		{"a header with an owner", LevelShared, [][2][]byte{{tkey("z"), hdr(2, 'o')}, {gkey("z", tok(1)), gval(tok(1), "")}}, "corrupt shared key"},
		{"a header without a grant", LevelShared, [][2][]byte{{tkey("z"), hdr(2)}}, "has no grant"},
		{"a grant without a header", LevelShared, [][2][]byte{{gkey("z", tok(1)), gval(tok(1), "")}}, "not a shared key"},
		{"a grant of an exclusive lock", LevelShared, [][2][]byte{{gkey("x", tok(1)), gval(tok(1), "")}}, "not a shared key"},
		{"a grant whose key and value disagree", LevelShared, [][2][]byte{{tkey("z"), hdr(2)}, {gkey("z", tok(1)), gval(tok(2), "")}}, "not its key's"},
		{"a grant not issued", LevelShared, [][2][]byte{{tkey("z"), hdr(2)}, {gkey("z", tok(99)), gval(tok(99), "")}}, "not issued"},
		{"more grants than permits", LevelShared, [][2][]byte{{tkey("z"), hdr(1)}, {gkey("z", tok(1)), gval(tok(1), "")}, {gkey("z", tok(2)), gval(tok(2), "")}}, "more grants than"},
		{"an owner twice", LevelShared, [][2][]byte{{tkey("z"), hdr(3)}, {gkey("z", tok(1)), gval(tok(1), "o")}, {gkey("z", tok(2)), gval(tok(2), "o")}}, "two grants of owner"},
		{"a grant key of a bad length", LevelShared, [][2][]byte{{tkey("z"), hdr(2)}, {append(gkey("z", tok(1)), 0), gval(tok(1), "")}}, "corrupt shared grant"},
		{"a grant key too short", LevelShared, [][2][]byte{{tkey("z"), hdr(2)}, {gkey("", tok(1)), gval(tok(1), "")}}, "corrupt shared grant"},
		{"a grant value too short", LevelShared, [][2][]byte{{tkey("z"), hdr(2)}, {gkey("z", tok(1)), gval(tok(1), "")[:11]}}, "corrupt shared grant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := newTestDB(t)
			s, _ := openSM(t, db, nil, 6)
			update(t, s, raiseEntry(1, tc.level), entry(2, grant("x", 1), grant("y", 1), grant("w", 1), release("w", 0)))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for _, r := range tc.rows {
				if err := db.Set(r[0], r[1], nil); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Factory(db, nil)(6, 1).Open(nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "shard 6") {
				t.Fatalf("Open: %v, want an error with %q naming shard 6", err, tc.want)
			}
		})
	}
}

// TestSnapshotShared: a table of cluster version LevelShared or more
// streams version 6, whether or not a key is shared, each grant a record
// with its permits (0: exclusive), a shared key's in token order; the
// stream is what encodeStream writes of the table, recovering it gives
// the table back (rows and holder index: retries work), replacing shared
// and exclusive rows the destination had.
func TestSnapshotShared(t *testing.T) {
	tests := []struct {
		name  string
		fence bool
		dir   string
		cmds  []Command
	}{
		{"empty table", false, "", nil},
		{"exclusive only", false, "", []Command{grant("a", 1), grantBy("b", 2, "o")}},
		{"shared", false, "", []Command{grantShared("a", 3, 1, ""), grantShared("a", 3, 2, "o2"), grant("b", 2)}},
		{"shared keys of every length, prefixes of each other", true, "members", []Command{
			grantShared("a", 9, 1, ""), grantShared("ab", 2, 2, "x"), grantShared("abc", 1, 3, ""), grant("b", 4),
			grantShared("a", 9, 5, "y"), grantShared(strings.Repeat("z", MaxKeyLen), MaxPermits, 6, strings.Repeat("o", MaxOwnerLen)),
			grantShared("ab", 2, 7, ""), grantBy("a\xff", 8, "w"), grantShared("a\x00b", 2, 9, ""),
		}},
		{"churned", false, "", []Command{
			grantShared("a", 2, 1, ""), grantShared("a", 2, 1, ""), release("a", 1<<ShardBits|4), grant("x", 1),
			release("x", 0), grantShared("x", 1, 1, ""), grantShared("b", 3, 1, ""), release("b", 0),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := sharedSM(t, 4, nil)
			ents := []sm.Entry{}
			if tc.fence {
				ents = append(ents, fenceEntry(2, 7))
			}
			if tc.dir != "" {
				ents = append(ents, dirEntry(uint64(len(ents)+2), 0, tc.dir))
			}
			ents = append(ents, entry(uint64(len(ents)+2), tc.cmds...))
			update(t, s, ents...)
			var held []Lock
			s.t.each(func(l Lock) { held = append(held, l) })
			data := saveSnapshot(t, s)
			if want := encodeStream(snapVersionShared, 4, s.t.meta(s.applied), held); !bytes.Equal(data, want) {
				t.Fatalf("saved\n%x\nwant version 6\n%x", data, want)
			}
			// The destination had exclusive and shared rows of its own.
			dst := sharedSM(t, 4, nil)
			update(t, dst, entry(2, grantShared("a", 5, 1, ""), grantShared("old", 2, 1, ""), grant("b", 1), grant("gone", 1)))
			syncSM(t, dst)
			obs := newRecorder()
			dst, _ = openSM(t, dst.db, obs, 4)
			if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(locks(dst), locks(s)) || dst.t.meta(dst.applied) != s.t.meta(s.applied) {
				t.Fatalf("recovered %v, %+v; want %v, %+v", locks(dst), dst.t.meta(dst.applied), locks(s), s.t.meta(s.applied))
			}
			if a, b := scanShard(t, s.db, 4), scanShard(t, dst.db, 4); !slices.Equal(a, b) {
				t.Fatalf("pebble differs after recovery:\n%v\n%v", a, b)
			}
			checkMirror(t, dst)
			if again := saveSnapshot(t, dst); !bytes.Equal(again, data) {
				t.Fatal("the recovered table streams differently")
			}
		})
	}
}

// TestSnapshotSharedRejected: one encoding per table (version 6 only from
// LevelShared on, version 5 only below it; a shared key's records in
// token order, with its permits, at most permits of them, each owner
// once); a stream above this build is ErrTooOld. A refused stream changes
// nothing.
func TestSnapshotSharedRejected(t *testing.T) {
	const shard = 4
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	m := meta{applied: 9, seq: 9, level: LevelShared}
	sh := func(key string, seq uint64, permits uint32, owner string) Lock {
		return Lock{Key: []byte(key), Token: tok(seq), LeaseMs: 1, Permits: permits, Owner: []byte(owner)}
	}
	// raw writes records in the order given (encodeStream sorts them).
	raw := func(m meta, locks ...Lock) []byte {
		data := encodeStream(snapVersionShared, shard, m, nil)
		body := data[:len(data)-13]
		for _, l := range locks {
			body = binary.AppendUvarint(body, uint64(len(l.Key)))
			body = append(body, l.Key...)
			body = binary.AppendUvarint(body, l.Token)
			body = binary.AppendUvarint(body, uint64(l.LeaseMs))
			body = binary.AppendUvarint(body, uint64(len(l.Owner)))
			body = append(body, l.Owner...)
			body = binary.AppendUvarint(body, uint64(l.Permits))
		}
		body = append(body, 0)
		body = binary.LittleEndian.AppendUint64(body, uint64(len(locks)))
		return binary.LittleEndian.AppendUint32(body, crc32c(body))
	}
	version7 := encodeStream(snapVersionShared, shard, m, nil)
	version7[4] = 7
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"version 6 of level 3", encodeStream(snapVersionShared, shard, meta{applied: 9, level: LevelMembership}, nil), ErrBadSnapshot},
		{"version 6 of level 1", encodeStream(snapVersionShared, shard, meta{applied: 9, level: 1}, nil), ErrBadSnapshot},
		{"version 5 of level 4", encodeStream(snapVersionDirectory, shard, meta{applied: 9, level: LevelShared}, nil), ErrBadSnapshot},
		{"version 6 above this build", encodeStream(snapVersionShared, shard, meta{applied: 9, level: FeatureLevel + 1}, nil), ErrTooOld},
		{"version 7", version7, ErrBadSnapshot},
		{"permits too many", raw(m, sh("a", 1, MaxPermits+1, "")), ErrBadSnapshot},
		{"grants of other permits", raw(m, sh("a", 1, 2, ""), sh("a", 2, 3, "")), ErrBadSnapshot},
		{"more grants than permits", raw(m, sh("a", 1, 2, ""), sh("a", 2, 2, ""), sh("a", 3, 2, "")), ErrBadSnapshot},
		{"grants out of token order", raw(m, sh("a", 2, 2, ""), sh("a", 1, 2, "")), ErrBadSnapshot},
		{"a grant twice", raw(m, sh("a", 2, 2, ""), sh("a", 2, 2, "")), ErrBadSnapshot},
		{"an owner twice", raw(m, sh("a", 1, 3, "o"), sh("a", 2, 3, "o")), ErrBadSnapshot},
		{"an exclusive lock among shared grants", raw(m, sh("a", 1, 3, ""), sh("a", 2, 0, "")), ErrBadSnapshot},
		{"a shared grant after an exclusive lock", raw(m, sh("a", 1, 0, ""), sh("a", 2, 2, "")), ErrBadSnapshot},
		{"an exclusive lock twice", raw(m, sh("a", 1, 0, ""), sh("a", 2, 0, "")), ErrBadSnapshot},
		{"keys out of order", raw(m, sh("b", 1, 2, ""), sh("a", 2, 2, "")), ErrBadSnapshot},
		{"a token not issued", raw(m, sh("a", 10, 2, "")), ErrBadSnapshot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := sharedSM(t, shard, nil)
			update(t, dst, entry(2, grantShared("keep", 2, 1, "")))
			err := dst.RecoverFromSnapshot(bytesReader(tc.data), nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("recover: %v, want %v", err, tc.want)
			}
			if _, ok := locks(dst)[sharedName("keep", 2, 1<<ShardBits|shard)]; !ok || dst.t.level != LevelShared {
				t.Fatalf("a refused stream changed the table: %v", locks(dst))
			}
		})
	}
	// The well-formed ones are good.
	for _, data := range [][]byte{
		raw(m, sh("a", 1, 2, "o"), sh("a", 2, 2, ""), sh("b", 3, 0, "o"), sh("c", 4, 1, "o")),
		raw(m, sh("a", 1, 1, "")),
	} {
		dst, _ := openSM(t, newTestDB(t), nil, shard)
		if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
			t.Fatal(err)
		}
		checkMirror(t, dst)
	}
}

// TestSnapshotVersion5StillRead: a table of cluster version 3 streams
// version 5 as before (a build of level 3 recovers from it), and this
// build recovers a version 5 stream, as it reads every older one
// (TestSnapshotDirectory, TestReadsVersion1Snapshot); its table can then
// be raised to LevelShared and hold shared grants.
func TestSnapshotVersion5StillRead(t *testing.T) {
	s, _ := openSM(t, newTestDB(t), nil, 4)
	update(t, s, raiseEntry(1, LevelMembership), entry(2, grantBy("a", 1, "o")), entry(3, grantShared("s", 2, 1, "")))
	if r := s.t.shared; r != nil || len(locks(s)) != 1 {
		t.Fatalf("a shared grant took at level 3: %v", locks(s))
	}
	data := saveSnapshot(t, s)
	if data[4] != snapVersionDirectory {
		t.Fatalf("a table of level 3 streamed version %d", data[4])
	}
	dst, _ := openSM(t, newTestDB(t), nil, 4)
	if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(locks(dst), locks(s)) {
		t.Fatalf("recovered %v", locks(dst))
	}
	update(t, dst, raiseEntry(4, LevelShared), entry(5, grantShared("s", 2, 1, "")))
	if len(dst.t.shared) != 1 || saveSnapshot(t, dst)[4] != snapVersionShared {
		t.Fatal("raised to LevelShared: no shared grant, or not version 6")
	}
	checkMirror(t, dst)
}

// crc32c is the stream's checksum.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// TestBackupShared: a backup carries shared grants (its parts are the
// shards' streams, version 6 from LevelShared on) and counts them as
// locks; a restore keeps them with their tokens, in a shard of cluster
// version LevelShared (which a build of level 3 refuses), and a shard
// without shared grants gets version 1 as before; the restored shared keys
// work as they did.
func TestBackupShared(t *testing.T) {
	s1 := sharedSM(t, 1, nil)
	update(t, s1, entry(2, grantShared("r", 3, 100, "reader-1"), grantShared("r", 3, 200, ""), grant("w", 1), grantShared("q", 1, 5, "")))
	s2 := sharedSM(t, 2, nil)
	update(t, s2, entry(2, grant("a", 1), grantShared("gone", 2, 1, ""), release("gone", 0)))
	s3, _ := openSM(t, newTestDB(t), nil, 3)
	update(t, s3, entry(1, grantBy("c", 1, "o")))
	src := []*onDisk{s1, s2, s3}
	data := backupOf(t, src...)
	r, err := backup.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []byte{snapVersionShared, snapVersionShared, snapVersion} {
		p, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		part, _ := io.ReadAll(r)
		if part[4] != want || !bytes.Equal(part, saveSnapshot(t, src[i])) || p.Locks != uint64(len(locks(src[i]))) {
			t.Fatalf("shard %d: part of version %d, %d locks in its frame", i+1, part[4], p.Locks)
		}
	}
	want := BackupInfo{Shards: 3, Locks: 6, RestoreEpoch: 1}
	if info, err := CheckBackup(bytes.NewReader(data)); err != nil || !reflect.DeepEqual(info, want) {
		t.Fatalf("CheckBackup: %+v, %v; want %+v", info, err, want)
	}
	db := newTestDB(t)
	if info, err := RestoreBackup(db, bytes.NewReader(data)); err != nil || !reflect.DeepEqual(info, want) {
		t.Fatalf("RestoreBackup: %+v, %v; want %+v", info, err, want)
	}
	for i, s := range src {
		dst, _ := openSM(t, db, nil, uint64(i+1))
		if !maps.Equal(locks(dst), locks(s)) {
			t.Fatalf("shard %d: restored %v, want %v", i+1, locks(dst), locks(s))
		}
		wantLevel := uint64(levelNone)
		if i == 0 {
			wantLevel = LevelShared
		}
		if dst.t.level != wantLevel || dst.t.seq != 1<<epochShift {
			t.Fatalf("shard %d: restored at level %d, seq %d", i+1, dst.t.level, dst.t.seq)
		}
		checkMirror(t, dst)
	}
	if v, err := StoredClusterVersion(db); v != LevelShared || err != nil {
		t.Fatalf("StoredClusterVersion of the restored table: %d, %v", v, err)
	}
	// The restored shared key: a retry gets its grant back, a new holder
	// a token of the next epoch, the release of all frees them.
	obs := newRecorder()
	dst, _ := openSM(t, db, obs, 1)
	update(t, dst, entry(1, grantShared("r", 3, 1, "reader-1"), grantShared("r", 3, 1, ""), grantShared("r", 3, 1, ""), release("r", 0)))
	res := obs.calls()[0].results
	old := locks(s1)[sharedName("r", 3, 1<<ShardBits|1)]
	if res[0] != (Result{Code: Regranted, Token: old.token}) || res[1].Code != Granted || TokenEpoch(res[1].Token) != 1 ||
		res[2].Code != GrantRejected || res[3] != (Result{Code: Released}) {
		t.Fatalf("after restore: %+v", res)
	}
}

// TestSaveSnapshotRefusesSharedBelowVersion6: writeSnapshot does not drop
// a shared grant from a stream that cannot carry it.
func TestSaveSnapshotRefusesSharedBelowVersion6(t *testing.T) {
	rows := &lockRows{locks: []backupLock{{key: "a", token: 1<<ShardBits | 1, leaseMs: 1, permits: 2}}}
	err := writeSnapshot(1, rows, snapVersionDirectory, meta{seq: 1, level: LevelMembership}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "shared") {
		t.Fatalf("a shared grant in a version 5 stream: %v", err)
	}
}

// BenchmarkUpdateShared is BenchmarkUpdate for shared grants: per
// iteration one entry of 256 shared Grants of 16 keys (16 permits each)
// and one of their 256 Releases by token.
func BenchmarkUpdateShared(b *testing.B) {
	s, _ := openSM(b, newTestDB(b), nil, 1)
	if _, err := s.Update([]sm.Entry{raiseEntry(1, LevelShared)}); err != nil {
		b.Fatal(err)
	}
	var grants Batch
	for i := range 256 {
		grants.Append(grantShared(fmt.Sprintf("bench/sem/%02d", i%16), 16, 10000, ""))
	}
	g := []sm.Entry{{Cmd: grants.Seal(Header{Proposer: 1, Seq: 1})}}
	index := uint64(1)
	obs := Table{s.t}
	var releases Batch
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		index++
		g[0].Index = index
		if _, err := s.Update(g); err != nil {
			b.Fatal(err)
		}
		releases.Reset()
		obs.Each(func(slot uint32) {
			releases.Append(Command{Op: OpRelease, Key: obs.Key(slot), Token: obs.Token(slot)})
		})
		index++
		r := []sm.Entry{{Index: index, Cmd: releases.Seal(Header{Proposer: 1, Seq: index})}}
		if _, err := s.Update(r); err != nil {
			b.Fatal(err)
		}
		if g[0].Result.Value != 256 || r[0].Result.Value != 256 || s.t.len() != 0 {
			b.Fatal("commands not applied")
		}
	}
	b.ReportMetric(float64(b.N)*512/b.Elapsed().Seconds(), "cmds/s")
}

// TestConcurrentSharedReads: Lookup and backups read shared keys (their
// holder index) while Update changes them, checkpoints drop their ghosts
// and a snapshot recovery swaps the table: under -race, no read races a
// change.
func TestConcurrentSharedReads(t *testing.T) {
	s := sharedSM(t, 1, nil)
	src := sharedSM(t, 1, nil)
	update(t, src, entry(2, grantShared("s", 2, 1, "a"), grant("x", 1)))
	snap := saveSnapshot(t, src)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := s.Lookup(LookupKey("s"))
			if err != nil {
				t.Error(err)
				return
			}
			if l := r.(LookupResult); l.Held && (l.Permits != 3 && l.Permits != 2 || l.Holders == 0 || l.Token != 0) {
				t.Errorf("Lookup(s) = %+v", l)
				return
			}
			if _, err := s.Lookup(BackupQuery{}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := uint64(2); i <= 200; i++ {
		update(t, s, entry(i, grantShared("s", 3, 1, "a"), grantShared("s", 3, 1, ""), release("s", 0), grantShared("s", 3, 2, "b")))
		if i%50 == 0 {
			syncSM(t, s)
		}
	}
	if err := s.RecoverFromSnapshot(bytesReader(snap), nil); err != nil {
		t.Error(err)
	}
	close(stop)
	<-done
}
