package seglog

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// rewrite replaces the file at path with fn applied to its bytes (same
// size), as a torn write or a bad disk would leave it.
func rewrite(t *testing.T, fs vfs.FS, path string, fn func([]byte)) {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, info.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	fn(data)
	w, err := fs.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// damages are the ways a record can be torn or damaged, at the record's
// offset in data.
var damages = []struct {
	name string
	fn   func(data []byte, off int64)
}{
	{"payload byte flipped", func(d []byte, off int64) { d[off+headerSize+3] ^= 0x40 }},
	{"header zeroed", func(d []byte, off int64) { clear(d[off : off+headerSize]) }},
	{"length too large", func(d []byte, off int64) { binary.LittleEndian.PutUint32(d[off+4:], math.MaxUint32) }},
	{"other segment's number", func(d []byte, off int64) {
		binary.LittleEndian.PutUint64(d[off+8:], binary.LittleEndian.Uint64(d[off+8:])+7)
	}},
	{"crc only", func(d []byte, off int64) { d[off] ^= 1 }},
}

// A torn last record (a power loss in the middle of an unsynced write) is
// the end of the log: what came before it is read back, the store goes on,
// and the next open does not read the torn record either.
func TestTornLastRecordEndsTheLog(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			fs := vfs.NewMem()
			db := openStore(t, fs)
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: 1}, EntriesToSave: makeEntries(1, 1, 5)})
			off, path := db.off, db.active.path
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: 5}, EntriesToSave: makeEntries(1, 6, 7)})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			rewrite(t, fs, path, func(data []byte) { d.fn(data, off) })

			db = openStore(t, fs)
			equal(t, "entries", indexes(iterate(t, db, 1, 1, 1, 100, math.MaxUint64)), span(1, 5))
			equal(t, "state", readState(t, db, 1, 1, 0).State, pb.State{Term: 1, Vote: 1, Commit: 1})
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: 5}, EntriesToSave: makeEntries(2, 6, 6)})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openStore(t, fs)
			equal(t, "entries after another open", iterate(t, db, 1, 1, 1, 100, math.MaxUint64),
				append(makeEntries(1, 1, 5), makeEntries(2, 6, 6)...))
		})
	}
}

// The same damage in a segment that is not the last is corruption: Open
// fails, naming the file and the offset.
func TestDamageInEarlierSegmentIsAnError(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			fs := vfs.NewMem()
			db := openStore(t, fs)
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: 1}, EntriesToSave: makeEntries(1, 1, 5)})
			off, path := db.off, db.active.path
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(1, 6, 7)})
			// Reopening starts a new segment; the first one, with live
			// entries, stays.
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openStore(t, fs)
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(1, 8, 9)})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			rewrite(t, fs, path, func(data []byte) { d.fn(data, off) })
			_, err := Open(testDir, Options{fs: fs, segmentSize: testSegmentSize})
			if err == nil {
				t.Fatal("Open of a damaged earlier segment: no error")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error %q does not name the file and offset", err)
			}
			t.Log(err)
		})
	}
}

// Files Open finds in other states than it left them.
func TestOpenUnexpectedFiles(t *testing.T) {
	tests := []struct {
		name string
		// change is done to the store's files after three opens,
		// which leave segment 1 retired (its entries removed), segment
		// 2 with live entries and segment 3, the last.
		change  func(t *testing.T, fs vfs.FS)
		wantErr string
	}{
		{"a newer segment never started (zeros)", func(t *testing.T, fs vfs.FS) {
			zeroFile(t, fs, 4)
		}, ""},
		{"two newer segments never started", func(t *testing.T, fs vfs.FS) {
			zeroFile(t, fs, 4)
			zeroFile(t, fs, 5)
		}, "not the last segment"},
		{"a listed segment is missing", func(t *testing.T, fs vfs.FS) {
			if err := fs.Remove(fs.PathJoin(testDir, segmentName(2))); err != nil {
				t.Fatal(err)
			}
		}, "missing"},
		{"a retired segment back under its name", func(t *testing.T, fs vfs.FS) {
			// Segment 1 was retired (nothing live in it) by the last
			// open; a power loss can undo that rename.
			if err := fs.Rename(fs.PathJoin(testDir, sparePrefix+"00000000000000000001"),
				fs.PathJoin(testDir, segmentName(1))); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"a spare cut short while zero-filled", func(t *testing.T, fs vfs.FS) {
			f, err := fs.Create(fs.PathJoin(testDir, prepareName))
			if err != nil {
				t.Fatal(err)
			}
			_ = f.Close()
		}, ""},
		{"an unknown record type with a valid checksum", func(t *testing.T, fs vfs.FS) {
			rewrite(t, fs, fs.PathJoin(testDir, segmentName(3)), func(data []byte) {
				// The checkpoint's type, resealed.
				data[16] = 9
				binary.LittleEndian.PutUint32(data, crc(data[4:headerSize+int(binary.LittleEndian.Uint32(data[4:]))]))
			})
		}, "record type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			db := openStore(t, fs)
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, 1, 5)})
			db = reopen(t, fs, db)
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(1, 6, 9)})
			if err := db.RemoveEntriesTo(1, 1, 5); err != nil {
				t.Fatal(err)
			}
			db = reopen(t, fs, db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			tt.change(t, fs)
			db, err := Open(testDir, Options{fs: fs, segmentSize: testSegmentSize})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Open: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			equal(t, "entries", indexes(iterate(t, db, 1, 1, 6, 100, math.MaxUint64)), span(6, 9))
			equal(t, "removed", indexes(iterate(t, db, 1, 1, 1, 100, math.MaxUint64)), []uint64{})
		})
	}
}

func reopen(t *testing.T, fs vfs.FS, db *LogDB) *LogDB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return openStore(t, fs)
}

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// zeroFile creates segment seq full of zeros, as a power loss right after
// its creation leaves it.
func zeroFile(t *testing.T, fs vfs.FS, seq uint64) {
	t.Helper()
	f, err := fs.Create(fs.PathJoin(testDir, segmentName(seq)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, testSegmentSize)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
}

// A crash (the process dies; what it wrote stays in the page cache) after
// an unsynced save, then a power loss after the next Open: that Open
// recorded where the old segment ends, so it must have made the unsynced
// records it read durable before.
func TestCrashThenPowerLoss(t *testing.T) {
	fs := vfs.NewStrictMem()
	db := openStore(t, fs)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: 1}, EntriesToSave: makeEntries(1, 1, 3)})
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: 3}}) // not synced
	// The crash: db is never closed, nothing is lost. (Its spare is
	// done, as a dead process's would be, not half written.)
	db.background.Wait()
	db = openStore(t, fs)
	equal(t, "state after the crash", readState(t, db, 1, 1, 0).State, pb.State{Term: 1, Vote: 1, Commit: 3})
	db = powerLoss(t, fs, db).(*LogDB)
	equal(t, "state after the power loss", readState(t, db, 1, 1, 0).State, pb.State{Term: 1, Vote: 1, Commit: 3})
	equal(t, "entries", indexes(iterate(t, db, 1, 1, 1, 10, math.MaxUint64)), span(1, 3))
}
