package logdbtest

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

func testBootstrapInfoAndListNodeInfo(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	if _, err := db.GetBootstrapInfo(1, 1); !errors.Is(err, raftio.ErrNoBootstrapInfo) {
		t.Fatalf("GetBootstrapInfo before save: %v", err)
	}
	nis, err := db.ListNodeInfo()
	if err != nil || nis == nil || len(nis) != 0 {
		t.Fatalf("ListNodeInfo of an empty store = %#v, %v", nis, err)
	}
	want := map[raftio.NodeInfo]pb.Bootstrap{
		{ShardID: 2, ReplicaID: 1}:                           {Addresses: map[uint64]string{1: "a:1", 2: "b:2"}, Type: pb.OnDiskStateMachine},
		{ShardID: 1, ReplicaID: 3}:                           {Join: true, Type: pb.RegularStateMachine},
		{ShardID: 1, ReplicaID: 2}:                           {}, // marshals to no bytes, yet is saved
		{ShardID: math.MaxUint64, ReplicaID: math.MaxUint64}: {Join: true},
	}
	for ni, bs := range want {
		if err := db.SaveBootstrapInfo(ni.ShardID, ni.ReplicaID, bs); err != nil {
			t.Fatal(err)
		}
	}
	// Entries and states must not show up as replicas.
	save(t, db, pb.Update{ShardID: 9, ReplicaID: 9, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, 1, 3)})
	for ni, bs := range want {
		got, err := db.GetBootstrapInfo(ni.ShardID, ni.ReplicaID)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs.Addresses) == 0 {
			bs.Addresses = got.Addresses // nil and empty maps are the same record
		}
		equal(t, "bootstrap", got, bs)
	}
	nis, err = db.ListNodeInfo()
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "ListNodeInfo", nis, []raftio.NodeInfo{
		{ShardID: 1, ReplicaID: 2}, {ShardID: 1, ReplicaID: 3}, {ShardID: 2, ReplicaID: 1},
		{ShardID: math.MaxUint64, ReplicaID: math.MaxUint64},
	})
}

func testSaveRaftStateAndReadBack(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	ents := makeEntries(2, 1, 10)
	st := pb.State{Term: 2, Vote: 3, Commit: 7}
	save(t, db,
		pb.Update{ShardID: 1, ReplicaID: 1, State: st, EntriesToSave: ents},
		pb.Update{ShardID: 1, ReplicaID: 2, State: pb.State{Term: 5}, EntriesToSave: makeEntries(5, 3, 4)},
	)
	equal(t, "entries", h.all(t, db, 1, 1), ents)
	equal(t, "entries 3..5", iterate(t, db, 1, 1, 3, 6, math.MaxUint64), ents[2:5])
	equal(t, "raft state", readState(t, db, 1, 1, 0), raftio.RaftState{State: st, FirstIndex: 1, EntryCount: 10})
	equal(t, "other replica", indexes(h.all(t, db, 1, 2)), []uint64{3, 4})
	equal(t, "other replica's state", readState(t, db, 1, 2, 0).State, pb.State{Term: 5})

	// A replica with nothing saved has no log and no state.
	if _, err := db.ReadRaftState(7, 7, 0); !errors.Is(err, raftio.ErrNoSavedLog) {
		t.Fatalf("ReadRaftState of an unknown replica: %v", err)
	}
	equal(t, "unknown replica's entries", indexes(iterate(t, db, 7, 7, 1, 10, math.MaxUint64)), []uint64{})

	// Appending to what was passed in, and adding to its size.
	prefix := []pb.Entry{{Index: 99}}
	got, size, err := db.IterateEntries(prefix, 5, 1, 1, 1, 3, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	wantSize := 5 + uint64(ents[0].SizeUpperLimit()+ents[1].SizeUpperLimit())
	if !equalIndexes(got, 99, 1, 2) || size != wantSize {
		t.Fatalf("IterateEntries with a prefix = %v, size %d, want [99 1 2], %d", indexes(got), size, wantSize)
	}
}

func equalIndexes(ents []pb.Entry, want ...uint64) bool {
	got := indexes(ents)
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// Entries saved later at lower indexes make the higher ones stale, even
// though they are still stored.
func testOverwrittenSuffixIsGone(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Commit: 5}, EntriesToSave: makeEntries(1, 1, 10)})
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Commit: 5}, EntriesToSave: makeEntries(2, 6, 7)})

	check := func(t *testing.T, db raftio.ILogDB) {
		t.Helper()
		want := append(makeEntries(1, 1, 5), makeEntries(2, 6, 7)...)
		equal(t, "entries", h.all(t, db, 1, 1), want)
		equal(t, "entries 5..", iterate(t, db, 1, 1, 5, 11, math.MaxUint64), want[4:])
		equal(t, "entries 8..", indexes(iterate(t, db, 1, 1, 8, 11, math.MaxUint64)), []uint64{})
		equal(t, "entry 9", indexes(iterate(t, db, 1, 1, 9, 10, math.MaxUint64)), []uint64{})
		rs := readState(t, db, 1, 1, 0)
		if rs.FirstIndex != 1 || rs.EntryCount != 7 {
			t.Fatalf("ReadRaftState range = %d+%d, want 1+7", rs.FirstIndex, rs.EntryCount)
		}
	}
	check(t, db)
	t.Run("forgotten", func(t *testing.T) {
		// The max index is persisted, not just cached.
		db = h.Forget(t, db)
		check(t, db)
	})

	// Saving index 8 again makes it live, with its new content.
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(2, 8, 8)})
	equal(t, "entries 6..", h.all(t, db, 1, 1)[5:], makeEntries(2, 6, 8))
}

func testIterateEntriesMaxSize(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	ents := makeEntries(1, 1, 5)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: ents})
	s := uint64(ents[0].SizeUpperLimit()) // all five have the same size
	tests := []struct {
		name      string
		startSize uint64
		maxSize   uint64
		want      []uint64
	}{
		// The entry that takes the size past maxSize is included, so the
		// first entry comes back even when it alone is too big.
		{"zero", 0, 0, []uint64{1}},
		{"below one entry", 0, s - 1, []uint64{1}},
		{"exactly one entry", 0, s, []uint64{1, 2}},
		{"one and a half", 0, s + s/2, []uint64{1, 2}},
		{"exactly two", 0, 2 * s, []uint64{1, 2, 3}},
		{"unlimited", 0, math.MaxUint64, []uint64{1, 2, 3, 4, 5}},
		// A size passed in counts against maxSize.
		{"start size at the limit", s, s, []uint64{1}},
		{"start size below", s, 2 * s, []uint64{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, size, err := db.IterateEntries(nil, tt.startSize, 1, 1, 1, 6, tt.maxSize)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "indexes", indexes(got), tt.want)
			if want := tt.startSize + s*uint64(len(tt.want)); size != want {
				t.Fatalf("size = %d, want %d", size, want)
			}
		})
	}
}

func testIterateEntriesStopsAtGaps(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(1, 1, 2)})
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(1, 4, 5)})
	tests := []struct {
		low, high uint64
		want      []uint64
	}{
		{1, 6, []uint64{1, 2}},
		{2, 6, []uint64{2}},
		{3, 6, []uint64{}},
		{3, 4, []uint64{}}, // a single missing entry: none, not a zero entry
		{4, 6, []uint64{4, 5}},
		{4, 100, []uint64{4, 5}},
		{5, 5, []uint64{}},
		{6, 5, []uint64{}},
		{0, math.MaxUint64, []uint64{}}, // there is no entry 0
	}
	for _, tt := range tests {
		equal(t, "indexes", indexes(iterate(t, db, 1, 1, tt.low, tt.high, math.MaxUint64)), tt.want)
	}
}

func testReadRaftStateRange(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	st := pb.State{Term: 1, Vote: 3, Commit: 100}
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: st, EntriesToSave: makeEntries(1, 1, 100)})
	save(t, db, pb.Update{ShardID: 2, ReplicaID: 1, State: st}) // a state but no entries
	tests := []struct {
		name          string
		shardID       uint64
		snapshotIndex uint64
		first, count  uint64
	}{
		{"no snapshot", 1, 0, 1, 100},
		{"snapshot inside the log", 1, 16, 16, 85},
		{"snapshot at the last entry", 1, 100, 100, 0},
		{"snapshot past the log", 1, 150, 150, 0},
		{"no entries", 2, 0, 0, 0},
		{"no entries, with a snapshot", 2, 40, 40, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			equal(t, "ReadRaftState", readState(t, db, tt.shardID, 1, tt.snapshotIndex),
				raftio.RaftState{State: st, FirstIndex: tt.first, EntryCount: tt.count})
		})
	}

	// Entries without a state: dragonboat's store reports no saved log.
	save(t, db, pb.Update{ShardID: 3, ReplicaID: 1, EntriesToSave: makeEntries(1, 1, 3)})
	if _, err := db.ReadRaftState(3, 1, 0); !errors.Is(err, raftio.ErrNoSavedLog) {
		t.Fatalf("ReadRaftState without a state: %v", err)
	}
}

func testRemoveEntriesTo(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	st := pb.State{Term: 1, Vote: 1, Commit: 100}
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: st, EntriesToSave: makeEntries(1, 1, 100)})
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 2, State: st, EntriesToSave: makeEntries(1, 1, 100)})
	if err := db.SaveSnapshots([]pb.Update{{ShardID: 1, ReplicaID: 1, Snapshot: pb.Snapshot{Index: 50, Term: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveEntriesTo(1, 1, 50); err != nil {
		t.Fatal(err)
	}
	// Up to and including 50.
	equal(t, "entries 1..", indexes(iterate(t, db, 1, 1, 1, 101, math.MaxUint64)), []uint64{})
	equal(t, "entry 50", indexes(iterate(t, db, 1, 1, 50, 51, math.MaxUint64)), []uint64{})
	equal(t, "entries 51..", indexes(iterate(t, db, 1, 1, 51, 101, math.MaxUint64)), span(51, 100))
	equal(t, "ReadRaftState(50)", readState(t, db, 1, 1, 50),
		raftio.RaftState{State: st, FirstIndex: 51, EntryCount: 50})
	equal(t, "other replica", indexes(h.all(t, db, 1, 2)), span(1, 100))

	// Compacting the removed range: the channel is closed when it is done.
	done, err := db.CompactEntriesTo(1, 1, 50)
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, done)

	// A snapshot at the log's end and everything removed: no entries.
	if err := db.RemoveEntriesTo(1, 2, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	equal(t, "other replica after removing all", indexes(h.all(t, db, 1, 2)), []uint64{})
	equal(t, "ReadRaftState(100)", readState(t, db, 1, 2, 100),
		raftio.RaftState{State: st, FirstIndex: 100, EntryCount: 0})
	// Entries the max index claims but that are gone are an error, not an
	// empty log.
	if _, err := db.ReadRaftState(1, 2, 10); err == nil {
		t.Fatal("ReadRaftState below removed entries: no error")
	}
}

func testCompactEntriesTo(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	var chans []<-chan struct{}
	for r := uint64(1); r <= 3; r++ {
		save(t, db, pb.Update{ShardID: 1, ReplicaID: r, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, 1, 200)})
		if err := db.RemoveEntriesTo(1, r, 150); err != nil {
			t.Fatal(err)
		}
		for _, index := range []uint64{100, 150, math.MaxUint64} {
			ch, err := db.CompactEntriesTo(1, r, index)
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
	}
	for _, ch := range chans {
		waitClosed(t, ch)
	}
	for r := uint64(1); r <= 3; r++ {
		// Compaction reclaims space; what is live stays as it was.
		equal(t, "entries 1..", indexes(iterate(t, db, 1, r, 1, 201, math.MaxUint64)), []uint64{})
		equal(t, "entries left", indexes(h.all(t, db, 1, r)), span(151, 200))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompactEntriesTo(1, 1, 1); err == nil {
		t.Fatal("CompactEntriesTo after Close: no error")
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func testSnapshots(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	ss, err := db.GetSnapshot(1, 1)
	if err != nil || !pb.IsEmptySnapshot(ss) {
		t.Fatalf("GetSnapshot with none saved = %+v, %v", ss, err)
	}
	snap := func(index uint64) pb.Snapshot {
		return pb.Snapshot{
			Index: index, Term: 2, ShardID: 1, Filepath: "/snap/x", FileSize: index * 10,
			Membership: pb.Membership{Addresses: map[uint64]string{1: "a:1"}},
			Type:       pb.OnDiskStateMachine, OnDiskIndex: index,
		}
	}
	saveSnapshot := func(index uint64) {
		t.Helper()
		if err := db.SaveSnapshots([]pb.Update{{ShardID: 1, ReplicaID: 1, Snapshot: snap(index)}}); err != nil {
			t.Fatal(err)
		}
	}
	newest := func(want uint64) {
		t.Helper()
		ss, err := db.GetSnapshot(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "snapshot", ss, snap(want))
	}
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2}, EntriesToSave: makeEntries(2, 1, 40)})
	saveSnapshot(10)
	newest(10)
	saveSnapshot(5) // older: ignored
	newest(10)
	saveSnapshot(20)
	newest(20)
	// SaveSnapshots does not move the max index.
	equal(t, "entries", indexes(h.all(t, db, 1, 1)), span(1, 40))

	// An older snapshot is ignored even when the store has just been
	// opened (or has forgotten) and must read the newest from its files.
	db = h.Forget(t, db)
	saveSnapshot(15)
	newest(20)

	// Through SaveRaftState a newer snapshot sets the max index to its own
	// index, and the update's entries then to theirs.
	ss30 := snap(30)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, Snapshot: ss30, EntriesToSave: makeEntries(3, 30, 35)})
	newest(30)
	equal(t, "entries 30..", indexes(iterate(t, db, 1, 1, 30, 100, math.MaxUint64)), span(30, 35))
	// A snapshot alone cuts the log at its index.
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, Snapshot: snap(33)})
	newest(33)
	equal(t, "entries 30..", indexes(iterate(t, db, 1, 1, 30, 100, math.MaxUint64)), span(30, 33))
	equal(t, "ReadRaftState(33) range", readState(t, db, 1, 1, 33).EntryCount, uint64(0))
	// An older snapshot through SaveRaftState changes nothing.
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, Snapshot: snap(31)})
	newest(33)
	equal(t, "entries 30..", indexes(iterate(t, db, 1, 1, 30, 100, math.MaxUint64)), span(30, 33))

	// A snapshot newer than the entries saved with it is refused, and
	// nothing of the call is saved.
	err = db.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 9},
		Snapshot: snap(50), EntriesToSave: makeEntries(3, 34, 40)}}, 1)
	if err == nil {
		t.Fatal("snapshot past its entries: no error")
	}
	newest(33)
	equal(t, "state", readState(t, db, 1, 1, 33).State, pb.State{Term: 2})

	// Only the newest record is kept.
	if n := h.Records(t, db, Snapshots); n != 1 {
		t.Fatalf("%d snapshot records, want 1", n)
	}
}

func testImportSnapshot(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	const shardID, replicaID = 2, 4
	save(t, db, pb.Update{
		ShardID: shardID, ReplicaID: replicaID,
		State:         pb.State{Term: 1, Vote: 3, Commit: 100},
		Snapshot:      pb.Snapshot{Index: 120, Term: 1, Filepath: "f2"},
		EntriesToSave: makeEntries(1, 1, 145),
	})
	imported := pb.Snapshot{Type: pb.OnDiskStateMachine, ShardID: shardID, Index: 110, Term: 2, Imported: true}
	if err := db.ImportSnapshot(imported, replicaID); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, db raftio.ILogDB) {
		t.Helper()
		ss, err := db.GetSnapshot(shardID, replicaID)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "snapshot", ss, imported)
		bs, err := db.GetBootstrapInfo(shardID, replicaID)
		if err != nil {
			t.Fatal(err)
		}
		if !bs.Join || bs.Type != pb.OnDiskStateMachine || len(bs.Addresses) != 0 {
			t.Fatalf("bootstrap = %+v", bs)
		}
		equal(t, "ReadRaftState(110)", readState(t, db, shardID, replicaID, 110),
			raftio.RaftState{State: pb.State{Term: 2, Commit: 110}, FirstIndex: 110, EntryCount: 0})
		// The max index is the snapshot's: entries above it are gone,
		// those below are left for RemoveEntriesTo.
		equal(t, "ReadRaftState(1) range", readState(t, db, shardID, replicaID, 1).EntryCount, uint64(110))
		equal(t, "entries 100..", indexes(iterate(t, db, shardID, replicaID, 100, 200, math.MaxUint64)), span(100, 110))
		if n := h.Records(t, db, Snapshots); n != 1 {
			t.Fatalf("%d snapshot records, want 1 (the older one is removed)", n)
		}
	}
	check(t, db)
	t.Run("forgotten", func(t *testing.T) {
		db = h.Forget(t, db)
		check(t, db)
	})
	// The replica continues from the snapshot.
	save(t, db, pb.Update{ShardID: shardID, ReplicaID: replicaID, State: pb.State{Term: 2, Commit: 112},
		EntriesToSave: makeEntries(2, 111, 112)})
	equal(t, "entries 109..", indexes(iterate(t, db, shardID, replicaID, 109, 200, math.MaxUint64)), span(109, 112))

	if err := db.ImportSnapshot(pb.Snapshot{ShardID: 1, Index: 5}, 1); err == nil {
		t.Fatal("import of an unknown state machine type: no error")
	}
}

func testRemoveNodeData(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	st := pb.State{Term: 1, Vote: 3, Commit: 100}
	for r := uint64(1); r <= 2; r++ {
		if err := db.SaveBootstrapInfo(1, r, pb.Bootstrap{Join: true}); err != nil {
			t.Fatal(err)
		}
		save(t, db, pb.Update{ShardID: 1, ReplicaID: r, State: st, EntriesToSave: makeEntries(1, 1, 100),
			Snapshot: pb.Snapshot{Index: 1, Term: 1}})
	}
	before := h.viewOf(t, db, 1, 2, 1)
	if err := db.RemoveNodeData(1, 1); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, db raftio.ILogDB) {
		t.Helper()
		if _, err := db.ReadRaftState(1, 1, 1); !errors.Is(err, raftio.ErrNoSavedLog) {
			t.Fatalf("ReadRaftState after removal: %v", err)
		}
		if ss, err := db.GetSnapshot(1, 1); err != nil || !pb.IsEmptySnapshot(ss) {
			t.Fatalf("GetSnapshot after removal = %+v, %v", ss, err)
		}
		if _, err := db.GetBootstrapInfo(1, 1); !errors.Is(err, raftio.ErrNoBootstrapInfo) {
			t.Fatalf("GetBootstrapInfo after removal: %v", err)
		}
		got, size, err := db.IterateEntries(nil, 0, 1, 1, 0, math.MaxUint64, math.MaxUint64)
		if err != nil || len(got) != 0 || size != 0 {
			t.Fatalf("IterateEntries after removal = %d entries, size %d, %v", len(got), size, err)
		}
		nis, err := db.ListNodeInfo()
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ListNodeInfo", nis, []raftio.NodeInfo{{ShardID: 1, ReplicaID: 2}})
		equal(t, "the other replica", h.viewOf(t, db, 1, 2, 1), before)
		// Only the other replica's records are left.
		if n := h.Records(t, db, Entries); n != 100 {
			t.Fatalf("%d entry records left, want 100", n)
		}
		if n := h.Records(t, db, Snapshots); n != 1 {
			t.Fatalf("%d snapshot records left, want 1", n)
		}
	}
	check(t, db)
	t.Run("forgotten", func(t *testing.T) {
		db = h.Forget(t, db)
		check(t, db)
	})

	// The replica can start over: its first state is saved even though
	// it equals the one it had before.
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: st, EntriesToSave: makeEntries(1, 1, 2)})
	equal(t, "new start", readState(t, db, 1, 1, 0), raftio.RaftState{State: st, FirstIndex: 1, EntryCount: 2})
}

// A State equal to the last one saved is not written again, and a call that
// changes nothing commits nothing.
func testUnchangedStateIsNotWritten(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	st := pb.State{Term: 1, Vote: 1, Commit: 1}
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: st})
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: st})
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1}) // empty
	if err := db.SaveRaftState(nil, 1); err != nil {
		t.Fatal(err)
	}
	if s, u := h.Saves(db); s != 1 || u != 0 {
		t.Fatalf("%d synced and %d unsynced commits, want 1 and 0", s, u)
	}
}

// Two updates of one replica in one call behave as two calls would.
func testSameReplicaTwiceInOneCall(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	save(t, db,
		pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Commit: 1}, EntriesToSave: makeEntries(1, 1, 5),
			Snapshot: pb.Snapshot{Index: 3, Term: 1}},
		pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Commit: 4}, EntriesToSave: makeEntries(1, 6, 8),
			Snapshot: pb.Snapshot{Index: 2, Term: 1}},
	)
	equal(t, "state", readState(t, db, 1, 1, 0), raftio.RaftState{State: pb.State{Term: 1, Commit: 4}, FirstIndex: 1, EntryCount: 8})
	ss, err := db.GetSnapshot(1, 1)
	if err != nil || ss.Index != 3 {
		t.Fatalf("GetSnapshot = %d, %v; want 3", ss.Index, err)
	}
}

func testCloseAndReopenKeepsEverything(t *testing.T, h *Harness) {
	fs := vfs.NewMem()
	db := h.Open(t, fs)
	type replica struct{ shardID, replicaID, snapshotIndex uint64 }
	replicas := []replica{{1, 1, 20}, {1, 2, 0}, {3, 1, 0}, {4, 1, 110}}
	for _, r := range replicas[:3] {
		if err := db.SaveBootstrapInfo(r.shardID, r.replicaID, pb.Bootstrap{Addresses: map[uint64]string{r.replicaID: "x:1"}}); err != nil {
			t.Fatal(err)
		}
	}
	save(t, db,
		pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: 30}, EntriesToSave: makeEntries(2, 1, 40)},
		pb.Update{ShardID: 1, ReplicaID: 2, State: pb.State{Term: 2, Vote: 1, Commit: 3}, EntriesToSave: makeEntries(2, 1, 5)},
	)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 3, Vote: 2, Commit: 30}, EntriesToSave: makeEntries(3, 35, 36)})
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 3, Vote: 2, Commit: 36}})
	if err := db.SaveSnapshots([]pb.Update{{ShardID: 1, ReplicaID: 1, Snapshot: pb.Snapshot{Index: 20, Term: 2, Filepath: "s"}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveEntriesTo(1, 1, 15); err != nil {
		t.Fatal(err)
	}
	if err := db.ImportSnapshot(pb.Snapshot{ShardID: 4, Index: 110, Term: 5, Type: pb.RegularStateMachine}, 1); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveBootstrapInfo(9, 9, pb.Bootstrap{}); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveNodeData(9, 9); err != nil {
		t.Fatal(err)
	}
	views := map[replica]view{}
	for _, r := range replicas {
		views[r] = h.viewOf(t, db, r.shardID, r.replicaID, r.snapshotIndex)
	}
	nis, err := db.ListNodeInfo()
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "replica 1:1 entries", indexes(views[replicas[0]].Entries), span(16, 36))

	db = h.reopen(t, fs, db)
	for _, r := range replicas {
		equal(t, "view after reopen", h.viewOf(t, db, r.shardID, r.replicaID, r.snapshotIndex), views[r])
	}
	got, err := db.ListNodeInfo()
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "ListNodeInfo after reopen", got, nis)
	// And it keeps working: a new save after reopen.
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 2, State: pb.State{Term: 2, Vote: 1, Commit: 6}, EntriesToSave: makeEntries(2, 6, 6)})
	equal(t, "1:2 after a new save", indexes(h.all(t, db, 1, 2)), span(1, 6))
}

// Step workers save and readers read at the same time (run with -race).
func testConcurrentWorkersAndReaders(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	const workers, rounds = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for w := uint64(1); w <= workers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= rounds; i++ {
				// Worker w owns shard w (and one beyond the configured
				// worker count, through the spare pool).
				uds := []pb.Update{
					{ShardID: w, ReplicaID: 1, State: pb.State{Term: 1, Commit: i}, EntriesToSave: makeEntries(1, i, i)},
					{ShardID: w + 100, ReplicaID: 1, State: pb.State{Term: 1, Commit: i}},
				}
				if err := db.SaveRaftState(uds, w); err != nil {
					errs <- err
					return
				}
				if err := db.SaveRaftState(uds[1:], 1000+w); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				ents, _, err := db.IterateEntries(nil, 0, w, 1, 1, rounds+1, math.MaxUint64)
				if err != nil {
					errs <- err
					return
				}
				for j, e := range ents {
					if e.Index != uint64(j+1) {
						errs <- errors.New("entries out of order")
						return
					}
				}
				if _, err := db.ReadRaftState(w, 1, 0); err != nil && !errors.Is(err, raftio.ErrNoSavedLog) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := uint64(1); w <= workers; w++ {
		equal(t, "entries", indexes(h.all(t, db, w, 1)), span(1, rounds))
		equal(t, "state", readState(t, db, w, 1, 0).State, pb.State{Term: 1, Commit: rounds})
	}
}

// SaveRaftState's steady state reuses its batch and marshals in place.
func testSaveRaftStateAllocations(t *testing.T, h *Harness) {
	if h.SkipAllocations {
		t.Skip("this configuration allocates on purpose")
	}
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts differ under coverage and -race")
	}
	db := h.Open(t, vfs.NewMem())
	ents := makeEntries(1, 1, 1)
	withEntries := []pb.Update{{ShardID: 1, ReplicaID: 1, EntriesToSave: ents}, {ShardID: 2, ReplicaID: 1, EntriesToSave: ents}}
	commitOnly := []pb.Update{{ShardID: 1, ReplicaID: 1}, {ShardID: 2, ReplicaID: 1}}
	i := uint64(0)
	// A save of entries (synced), then one of commit indexes (not synced).
	allocs := testing.AllocsPerRun(200, func() {
		i++
		ents[0].Index = i
		for j := range withEntries {
			withEntries[j].State = pb.State{Term: 1, Commit: i - 1}
			commitOnly[j].State = pb.State{Term: 1, Commit: i}
		}
		if err := db.SaveRaftState(withEntries, 1); err != nil {
			t.Fatal(err)
		}
		if err := db.SaveRaftState(commitOnly, 1); err != nil {
			t.Fatal(err)
		}
	})
	if s, u := h.Saves(db); u < 200 || s < 200 {
		t.Fatalf("%d synced and %d unsynced saves", s, u)
	}
	t.Logf("%.1f allocations per pair of SaveRaftState calls", allocs)
	if allocs > 2 {
		t.Fatalf("%.1f allocations per pair of SaveRaftState calls, want at most 2", allocs)
	}
}

// The step worker (SaveRaftState) and the snapshot worker (SaveSnapshots)
// may save snapshots of one replica at the same time; the newest wins.
func testConcurrentSnapshotSaves(t *testing.T, h *Harness) {
	db := h.Open(t, vfs.NewMem())
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, 1, 1000)})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := uint64(1); i <= 100; i++ {
			ud := pb.Update{ShardID: 1, ReplicaID: 1, Snapshot: pb.Snapshot{Index: 10 * i, Term: 1},
				EntriesToSave: makeEntries(1, 10*i, 10*i)}
			if err := db.SaveRaftState([]pb.Update{ud}, 1); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := uint64(1); i <= 100; i++ {
			ud := pb.Update{ShardID: 1, ReplicaID: 1, Snapshot: pb.Snapshot{Index: 10*i - 5, Term: 1}}
			if err := db.SaveSnapshots([]pb.Update{ud}); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		ss, err := db.GetSnapshot(1, 1)
		if err != nil || ss.Index != 1000 {
			t.Fatalf("GetSnapshot = %d, %v; want 1000", ss.Index, err)
		}
	}
	check()
	db = h.Forget(t, db)
	check()
}
