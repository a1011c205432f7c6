package raftlog

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/logger"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

func init() {
	for _, name := range []string{"raft", "rsm", "transport", "dragonboat", "logdb", "grpc", "config",
		"raftpb", "settings", "tan", "pebblekv", "registry", "server", "gossip", "LogDB", "tools",
		"fileutil", "utils", "vfs", "raftlog"} {
		logger.GetLogger(name).SetLevel(logger.ERROR)
	}
}

const testDir = "/data/node/baton-raftlog"

// testWALPrefill is the prefill of the WAL files of stores opened by
// openStore: big enough that pebble's first WAL files (its first memtables
// are small, growing to memTableSize) end inside it, small enough that
// tests opening dozens of stores in memory stay quick.
const testWALPrefill = 2 << 20

// openStore opens a store on fs (an in-memory one unless the test needs a
// power loss) and closes it when the test ends, if the test did not.
func openStore(t *testing.T, fs vfs.FS) *LogDB {
	t.Helper()
	db, err := Open(testDir, Options{fs: fs, walPrefill: testWALPrefill})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// reopen closes db cleanly and opens it again on the same fs.
func reopen(t *testing.T, fs vfs.FS, db *LogDB) *LogDB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return openStore(t, fs)
}

// makeEntries returns entries first..last of term, each with a command that
// names it, so a test can tell which save an entry came from.
func makeEntries(term, first, last uint64) []pb.Entry {
	var out []pb.Entry
	for i := first; i <= last; i++ {
		out = append(out, pb.Entry{
			Term:  term,
			Index: i,
			Type:  pb.ApplicationEntry,
			Cmd:   fmt.Appendf(nil, "entry %d of term %d", i, term),
		})
	}
	return out
}

func save(t *testing.T, db *LogDB, uds ...pb.Update) {
	t.Helper()
	if err := db.SaveRaftState(uds, 1); err != nil {
		t.Fatal(err)
	}
}

func iterate(t *testing.T, db *LogDB, shardID, replicaID, low, high, maxSize uint64) []pb.Entry {
	t.Helper()
	ents, _, err := db.IterateEntries(nil, 0, shardID, replicaID, low, high, maxSize)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// all returns the replica's live entries from its lowest stored one (found
// in pebble directly, since the store has no call for it).
func all(t *testing.T, db *LogDB, shardID, replicaID uint64) []pb.Entry {
	t.Helper()
	it := db.db.NewIter(&pebble.IterOptions{
		LowerBound: indexKey(prefixEntry, shardID, replicaID, 0),
		UpperBound: replicaRangeEnd(prefixEntry, shardID, replicaID),
	})
	defer it.Close()
	if !it.First() {
		return nil
	}
	first, _ := keyIndex(it.Key())
	return iterate(t, db, shardID, replicaID, first, math.MaxUint64, math.MaxUint64)
}

func indexes(ents []pb.Entry) []uint64 {
	out := []uint64{}
	for _, e := range ents {
		out = append(out, e.Index)
	}
	return out
}

func span(first, last uint64) []uint64 {
	out := []uint64{}
	for i := first; i <= last; i++ {
		out = append(out, i)
	}
	return out
}

func readState(t *testing.T, db *LogDB, shardID, replicaID, snapshotIndex uint64) raftio.RaftState {
	t.Helper()
	rs, err := db.ReadRaftState(shardID, replicaID, snapshotIndex)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

// view is everything a store shows about one replica, to compare a store
// before and after a reopen.
type view struct {
	Bootstrap    pb.Bootstrap
	BootstrapErr error
	State        raftio.RaftState
	StateErr     error
	Snapshot     pb.Snapshot
	Entries      []pb.Entry
}

func viewOf(t *testing.T, db *LogDB, shardID, replicaID, snapshotIndex uint64) view {
	t.Helper()
	var v view
	v.Bootstrap, v.BootstrapErr = db.GetBootstrapInfo(shardID, replicaID)
	v.State, v.StateErr = db.ReadRaftState(shardID, replicaID, snapshotIndex)
	ss, err := db.GetSnapshot(shardID, replicaID)
	if err != nil {
		t.Fatal(err)
	}
	v.Snapshot = ss
	v.Entries = all(t, db, shardID, replicaID)
	return v
}
