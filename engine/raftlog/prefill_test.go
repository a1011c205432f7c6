package raftlog

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Every WAL file pebble writes, beside the store or in its own directory,
// is full size before the first record goes in, so that a synced save never
// grows the file; nothing else is prefilled.
func TestWALFilesArePrefilled(t *testing.T) {
	for _, separateWAL := range []bool{false, true} {
		t.Run(map[bool]string{false: "wal beside", true: "wal dir"}[separateWAL], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), DirName)
			opts := Options{}
			walDir := dir
			if separateWAL {
				walDir = filepath.Join(t.TempDir(), DirName)
				opts.WALDir = walDir
			}
			db, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: 3},
				EntriesToSave: makeEntries(1, 1, 3)})

			logs := 0
			for _, d := range []string{dir, walDir} {
				files, err := os.ReadDir(d)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range files {
					info, err := f.Info()
					if err != nil {
						t.Fatal(err)
					}
					isLog := strings.HasSuffix(f.Name(), ".log")
					if isLog && d == walDir {
						logs++
						if info.Size() != walPrefillSize {
							t.Errorf("WAL %s is %d bytes, want %d", f.Name(), info.Size(), walPrefillSize)
						}
					} else if info.Size() >= walPrefillSize {
						t.Errorf("%s in %s is %d bytes: prefilled, though not a WAL", f.Name(), d, info.Size())
					}
				}
			}
			if logs == 0 {
				t.Fatalf("no WAL file in %s", walDir)
			}
			if got := indexes(all(t, db, 1, 1)); len(got) != 3 {
				t.Fatalf("entries %v, want 1..3", got)
			}
		})
	}
}

// Pebble replays WAL files up to their first zeroed chunk: after a power
// loss, with several WAL files written (each prefilled, the later ones
// recycled), every synced entry is read back, and nothing else.
func TestPrefilledWALsSurvivePowerLoss(t *testing.T) {
	fs := vfs.NewStrictMem()
	db := openStore(t, fs)
	// Enough bytes for pebble to switch WAL files several times (its
	// first memtables are small), each file ending inside its prefill.
	const entries, size = 40, 64 << 10
	for i := uint64(1); i <= entries; i++ {
		e := pb.Entry{Term: 1, Index: i, Type: pb.ApplicationEntry, Cmd: bytes.Repeat([]byte{byte(i)}, size)}
		save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: i - 1},
			EntriesToSave: []pb.Entry{e}})
	}
	// Not synced: only the commit index moves.
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: entries}})
	logs := 0
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			logs++
		}
	}
	if logs < 3 {
		t.Fatalf("%d WAL files: the test needs pebble to switch files", logs)
	}

	db = powerLoss(t, fs, db).(*LogDB)
	got := iterate(t, db, 1, 1, 1, math.MaxUint64, math.MaxUint64)
	if len(got) != entries {
		t.Fatalf("%d entries after the power loss, want %d", len(got), entries)
	}
	for i, e := range got {
		if e.Index != uint64(i+1) || len(e.Cmd) != size || e.Cmd[0] != byte(i+1) {
			t.Fatalf("entry %d read back as index %d with %d bytes of %d", i+1, e.Index, len(e.Cmd), e.Cmd[0])
		}
	}
	if st := readState(t, db, 1, 1, 0).State; st.Term != 1 || st.Vote != 1 || st.Commit < entries-1 {
		t.Fatalf("state %+v after the power loss", st)
	}
}
