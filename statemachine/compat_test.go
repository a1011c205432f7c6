package statemachine

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble"
)

// The fixtures in testdata/ were written by the code before owners
// existed (commit fc912d3, run from a copy made with git archive), so that
// these tests show what an upgraded node finds of what it wrote then:
//
//	v1-batch.bin     an entry of encoding version 1 (TestDecodeBatchVersion1)
//	v1-snapshot.bin  a snapshot stream of version 1 of shard 3
//	v1-table/        a pebble data dir with shards 2 and 7, closed cleanly
//	                 after checkpoints (one key released since the first)
//
// They are from before the fence too: the entry and the stream have no
// fence, and the data dir's metas are the 16 bytes without one.
//
// Each test below lists the locks that code held when it wrote them.

// v1SnapshotLocks is what v1-snapshot.bin holds: shard 3 at applied index
// 3, seq 6.
var v1SnapshotLocks = map[string]lockState{
	"alpha":            {1<<ShardBits | 3, 1000, ""},
	"delta":            {4<<ShardBits | 3, 5, ""},
	"gamma/with/slash": {3<<ShardBits | 3, 7777, ""},
	"\xff\x00bin":      {5<<ShardBits | 3, 4294967295, ""},
}

func TestReadsVersion1Snapshot(t *testing.T) {
	data, err := os.ReadFile("testdata/v1-snapshot.bin")
	if err != nil {
		t.Fatal(err)
	}
	if data[4] != snapVersionNoOwners {
		t.Fatalf("fixture is version %d", data[4])
	}
	obs := newRecorder()
	s, _ := openSM(t, newTestDB(t), obs, 3)
	if err := s.RecoverFromSnapshot(bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
	if got := locks(s); !maps.Equal(got, v1SnapshotLocks) || s.applied != 3 || s.t.seq != 6 {
		t.Fatalf("recovered %v at %d, seq %d", got, s.applied, s.t.seq)
	}
	checkOwners(t, s.t)
	for k, l := range obs.lastReset(3) {
		if l.Owner != nil {
			t.Errorf("Reset told %q with owner %q", k, l.Owner)
		}
	}
	// The test's own writer of the format agrees with the old code.
	var held []Lock
	s.t.each(func(l Lock) { held = append(held, l) })
	if again := encodeSnapshot(snapVersionNoOwners, 3, 3, 6, held); !bytes.Equal(again, data) {
		t.Fatalf("encodeSnapshot(1) differs from the fixture:\n%x\n%x", again, data)
	}
	// No lock has an owner, so what this node sends on is version 1, the
	// very stream the old code wrote: a node not yet upgraded can recover
	// from it.
	if again := saveSnapshot(t, s); !bytes.Equal(again, data) {
		t.Fatalf("re-saved differs from the fixture:\n%x\n%x", again, data)
	}
	// Once a lock has an owner it is version 2, and reads back to the
	// same table; when that lock is gone it is version 1 again.
	update(t, s, entry(4, grantBy("owned", 9, "me")))
	want := maps.Clone(v1SnapshotLocks)
	want["owned"] = lockState{7<<ShardBits | 3, 9, "me"}
	v2 := saveSnapshot(t, s)
	if v2[4] != snapVersion {
		t.Fatalf("with an owner, saved as version %d", v2[4])
	}
	dst, _ := openSM(t, newTestDB(t), nil, 3)
	if err := dst.RecoverFromSnapshot(bytes.NewReader(v2), nil); err != nil {
		t.Fatal(err)
	}
	if got := locks(dst); !maps.Equal(got, want) || dst.applied != 4 || dst.t.seq != 7 {
		t.Fatalf("version 2 recovered %v at %d, seq %d", got, dst.applied, dst.t.seq)
	}
	update(t, s, entry(5, release("owned", 0)))
	if again := saveSnapshot(t, s); again[4] != snapVersionNoOwners ||
		!bytes.Equal(again, encodeSnapshot(snapVersionNoOwners, 3, 5, 7, held)) {
		t.Fatalf("without owners again, saved as\n%x", again)
	}
}

func TestOpensVersion1DataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	// A copy: opening a pebble dir writes to it.
	if err := os.CopyFS(dir, os.DirFS("testdata/v1-table")); err != nil {
		t.Fatal(err)
	}
	db := openTestDB(t, dir)
	defer db.Close()
	tests := []struct {
		shard, applied, seq uint64
		locks               map[string]lockState
	}{
		{2, 3, 5, map[string]lockState{
			"orders/1": {1<<ShardBits | 2, 10000, ""},
			"orders/3": {3<<ShardBits | 2, 45000, ""},
			"orders/4": {4<<ShardBits | 2, 40000, ""},
		}},
		{7, 2, 2, map[string]lockState{
			"jobs/nightly": {2<<ShardBits | 7, 3600000, ""},
			"orders/1":     {1<<ShardBits | 7, 500, ""},
		}},
	}
	for _, tc := range tests {
		if n := metaBytes(t, db, tc.shard); n != metaLenBeforeFence {
			t.Fatalf("shard %d: the fixture's meta is %d bytes", tc.shard, n)
		}
		obs := newRecorder()
		s, applied := openSM(t, db, obs, tc.shard)
		if s.t.fence != 0 {
			t.Fatalf("shard %d: opened with fence %x", tc.shard, s.t.fence)
		}
		if got := locks(s); applied != tc.applied || s.t.seq != tc.seq || !maps.Equal(got, tc.locks) {
			t.Fatalf("shard %d: opened at %d, seq %d, with %v; want %d, %d, %v",
				tc.shard, applied, s.t.seq, got, tc.applied, tc.seq, tc.locks)
		}
		checkOwners(t, s.t)
		reset := obs.lastReset(tc.shard)
		for k, l := range tc.locks {
			want := Lock{Key: []byte(k), Token: l.token, LeaseMs: l.leaseMs}
			if !reflect.DeepEqual(reset[k], want) {
				t.Errorf("shard %d: Reset told %+v, want %+v", tc.shard, reset[k], want)
			}
		}
	}

	// The upgraded node goes on from there: with no fence every batch
	// applies, tokens continue, an old lock without owner is no owner's
	// to regrant, a new one has its owner, and both kinds of row survive
	// a checkpoint and a reopen, as does the first fence, in the meta's
	// new layout.
	s, _ := openSM(t, db, nil, 2)
	update(t, s, entryBy(4, 0xb,
		grantBy("orders/1", 1, "someone"),
		grantBy("orders/5", 50000, "owner-5"),
		grantBy("orders/5", 1, "owner-5"),
	), fenceEntry(5, 0xf))
	want := maps.Clone(tests[0].locks)
	want["orders/5"] = lockState{6<<ShardBits | 2, 50000, "owner-5"}
	if got := locks(s); !maps.Equal(got, want) || s.t.seq != 6 {
		t.Fatalf("after new grants: %v, seq %d; want %v, seq 6", got, s.t.seq, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := metaBytes(t, db, 2); n != metaLen {
		t.Fatalf("the upgraded node wrote a %d-byte meta", n)
	}
	again, applied := openSM(t, db, nil, 2)
	if got := locks(again); applied != 5 || !maps.Equal(got, want) || again.t.fence != 0xf {
		t.Fatalf("reopened at %d with %v, fence %x; want %v, fence f", applied, got, again.t.fence, want)
	}
	checkOwners(t, again.t)
}

// metaBytes is the length of shard's stored meta.
func metaBytes(t *testing.T, db *pebble.DB, shard uint64) int {
	t.Helper()
	k := shardKey(metaPrefix, shard)
	v, closer, err := db.Get(k[:])
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return len(v)
}
