package seglog

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// files lists the store's segment and spare files with their sizes.
func files(t *testing.T, fs vfs.FS) (segs, spares map[string]int64) {
	t.Helper()
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	segs, spares = map[string]int64{}, map[string]int64{}
	for _, n := range names {
		if n == prepareName {
			continue // a spare being zero-filled in the background
		}
		info, err := fs.Stat(fs.PathJoin(testDir, n))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(n, segmentSuffix):
			segs[n] = info.Size()
		case strings.HasPrefix(n, sparePrefix):
			spares[n] = info.Size()
		default:
			t.Fatalf("unexpected file %s", n)
		}
	}
	return segs, spares
}

// bigEntries returns entries first..last of term with size-byte commands.
func bigEntries(term, first, last uint64, size int) []pb.Entry {
	ents := makeEntries(term, first, last)
	for i := range ents {
		ents[i].Cmd = bytes.Repeat([]byte{byte(ents[i].Index)}, size)
	}
	return ents
}

// A replica that keeps saving entries and removing the old ones (as
// dragonboat does after each snapshot) switches segments, retires the ones
// left with nothing live, and recycles them: the files on disk stay few,
// every one full size from its creation, and everything live reads back,
// before and after a reopen.
func TestSegmentsRotateRetireAndRecycle(t *testing.T) {
	const size = 8 << 10
	fs := vfs.NewMem()
	db := openSized(t, fs, size)
	const entries, keep = 400, 20
	for i := uint64(1); i <= entries; i++ {
		save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: i - 1},
			EntriesToSave: bigEntries(1, i, i, 200)})
		// A second replica with a slow log: its entries pin nothing
		// for long either, since it removes them too.
		if i%10 == 0 {
			save(t, db, pb.Update{ShardID: 2, ReplicaID: 1, State: pb.State{Term: 1, Commit: i / 10},
				EntriesToSave: makeEntries(1, i/10, i/10)})
		}
		if i%50 == 0 {
			if err := db.RemoveEntriesTo(1, 1, i-keep); err != nil {
				t.Fatal(err)
			}
			if err := db.RemoveEntriesTo(2, 1, i/10-2); err != nil {
				t.Fatal(err)
			}
		}
		segs, spares := files(t, fs)
		for n, sz := range segs {
			if sz != size {
				t.Fatalf("after save %d: %s is %d bytes, want %d", i, n, sz, size)
			}
		}
		if len(spares) > maxSpares {
			t.Fatalf("after save %d: %d spares", i, len(spares))
		}
		if len(segs) > 12 {
			t.Fatalf("after save %d: %d segments: retirement does not keep up", i, len(segs))
		}
	}
	created, recycled := segmentFiles(db)
	if recycled <= created {
		t.Fatalf("%d segments created, %d recycled: want most recycled", created, recycled)
	}
	t.Logf("%d segments created, %d recycled", created, recycled)
	check := func(db *LogDB) {
		t.Helper()
		got := iterate(t, db, 1, 1, entries-keep+1, math.MaxUint64, math.MaxUint64)
		equal(t, "entries", indexes(got), span(entries-keep+1, entries))
		equal(t, "content", got, bigEntries(1, entries-keep+1, entries, 200))
		equal(t, "removed", indexes(iterate(t, db, 1, 1, 1, entries-keep+1, math.MaxUint64)), []uint64{})
		equal(t, "other replica", indexes(iterate(t, db, 2, 1, 1, math.MaxUint64, math.MaxUint64)), []uint64{})
		equal(t, "other replica", indexes(iterate(t, db, 2, 1, entries/10-1, math.MaxUint64, math.MaxUint64)),
			span(entries/10-1, entries/10))
		equal(t, "state", readState(t, db, 1, 1, entries-keep).State, pb.State{Term: 1, Vote: 1, Commit: entries - 1})
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openSized(t, fs, size)
	check(db)
}

// A record larger than a segment gets a segment of its own, sized to fit;
// the next record starts a normal one. Retired, the big file is removed,
// not kept as a spare.
func TestRecordLargerThanSegment(t *testing.T) {
	const size = 4 << 10
	fs := vfs.NewMem()
	db := openSized(t, fs, size)
	big := bigEntries(1, 1, 1, 5*size)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: big})
	bigSeg := db.active
	if bigSeg.size <= size || db.off != bigSeg.size {
		t.Fatalf("segment of the big record: %d bytes, %d used", bigSeg.size, db.off)
	}
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(1, 2, 2)})
	if db.active == bigSeg || db.active.size != size {
		t.Fatalf("the next record went to a segment of %d bytes", db.active.size)
	}
	equal(t, "big entry", iterate(t, db, 1, 1, 1, 2, math.MaxUint64), big)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openSized(t, fs, size)
	equal(t, "big entry after reopen", iterate(t, db, 1, 1, 1, 2, math.MaxUint64), big)

	if err := db.RemoveEntriesTo(1, 1, 1); err != nil {
		t.Fatal(err)
	}
	// Enough records to switch segments: the big one is retired.
	for i := uint64(3); i < 100; i++ {
		save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: bigEntries(1, i, i, 100)})
	}
	segs, spares := files(t, fs)
	for n, sz := range segs {
		if sz != size {
			t.Fatalf("%s is %d bytes", n, sz)
		}
	}
	for n, sz := range spares {
		if sz != size {
			t.Fatalf("spare %s is %d bytes", n, sz)
		}
	}
}

// A new segment is full size and its name durable before its first record,
// so that no sync on the save path grows a file or loses it.
func TestNewSegmentIsZeroFilledAndSynced(t *testing.T) {
	fs := vfs.NewStrictMem()
	db := openSized(t, fs, 32<<10)
	fs.SetIgnoreSyncs(true)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
	segs, _ := files(t, fs)
	if len(segs) != 1 {
		t.Fatalf("segments after a power loss: %v", segs)
	}
	for n, sz := range segs {
		if sz != 32<<10 {
			t.Fatalf("%s is %d bytes", n, sz)
		}
	}
}

// A node that writes little switches segments rarely: CompactEntriesTo
// retires the dead ones once there are more than spares to keep.
func TestCompactEntriesToRetiresDeadSegments(t *testing.T) {
	const size = 4 << 10
	fs := vfs.NewMem()
	db := openSized(t, fs, size)
	for i := uint64(1); i <= 60; i++ {
		save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: bigEntries(1, i, i, 300)})
	}
	segs, _ := files(t, fs)
	before := len(segs)
	if before < 4 {
		t.Fatalf("%d segments: the test needs more", before)
	}
	if err := db.RemoveEntriesTo(1, 1, 59); err != nil {
		t.Fatal(err)
	}
	// Nothing switched segments since: the dead ones are still there.
	if segs, _ := files(t, fs); len(segs) != before {
		t.Fatalf("%d segments after RemoveEntriesTo, want %d", len(segs), before)
	}
	ch, err := db.CompactEntriesTo(1, 1, 59)
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	segs, spares := files(t, fs)
	// The segment of entry 60, and the new active one.
	if len(segs) > 2 || len(spares) > maxSpares {
		t.Fatalf("%d segments and %d spares after CompactEntriesTo", len(segs), len(spares))
	}
	equal(t, "entries", indexes(iterate(t, db, 1, 1, 1, 100, math.MaxUint64)), []uint64{})
	equal(t, "entries", indexes(iterate(t, db, 1, 1, 60, 100, math.MaxUint64)), []uint64{60})
	// With nothing more to retire, it does not switch again.
	active := db.active
	if _, err := db.CompactEntriesTo(1, 1, 59); err != nil {
		t.Fatal(err)
	}
	if db.active != active {
		t.Fatal("CompactEntriesTo switched segments with nothing to retire")
	}
}

// A replica that writes little, and never removes its entries, puts one
// in many segments; segment switches copy those few live entries forward,
// so the segments they would keep are retired all the same, and the
// entries read back, before and after a reopen.
func TestLongLivedEntriesAreCopiedForward(t *testing.T) {
	const size = 8 << 10
	fs := vfs.NewMem()
	db := openSized(t, fs, size)
	idle := uint64(0)
	for i := uint64(1); i <= 600; i++ {
		save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: bigEntries(1, i, i, 300)})
		if i%10 == 0 {
			if err := db.RemoveEntriesTo(1, 1, i-2); err != nil {
				t.Fatal(err)
			}
		}
		if i%15 == 0 {
			idle++
			save(t, db, pb.Update{ShardID: 2, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, idle, idle)})
		}
		if segs, _ := files(t, fs); len(segs) > 6 {
			t.Fatalf("after save %d: %d segments, kept by the idle replica's entries", i, len(segs))
		}
	}
	if relocated(db) == 0 {
		t.Fatal("no entry copied forward")
	}
	check := func(db *LogDB) {
		t.Helper()
		equal(t, "idle replica's entries", iterate(t, db, 2, 1, 1, math.MaxUint64, math.MaxUint64), makeEntries(1, 1, idle))
		equal(t, "busy replica's entries", indexes(iterate(t, db, 1, 1, 599, math.MaxUint64, math.MaxUint64)), span(599, 600))
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openSized(t, fs, size)
	check(db)
}
