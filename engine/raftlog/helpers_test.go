package raftlog

import (
	"math"
	"testing"

	"github.com/baton-dev/baton/engine/internal/logdbtest"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
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

// harness runs the shared behavioural tests (logdbtest) on this store.
var storeHarness = &logdbtest.Harness{
	Open: func(t *testing.T, fs vfs.FS) raftio.ILogDB { return openStore(t, fs) },
	Lowest: func(t *testing.T, db raftio.ILogDB, shardID, replicaID uint64) uint64 {
		return lowestEntry(t, db.(*LogDB), shardID, replicaID)
	},
	Saves: func(db raftio.ILogDB) (uint64, uint64) {
		l := db.(*LogDB)
		return l.saves.Counts()
	},
	// A cold cache: everything is read from pebble again.
	Forget: func(t *testing.T, db raftio.ILogDB) raftio.ILogDB {
		db.(*LogDB).cache = newCache()
		return db
	},
	Factory: func() config.LogDBFactory { return &Factory{} },
	Files:   nodeHostFiles,
	Records: func(t *testing.T, db raftio.ILogDB, kind logdbtest.Kind) int {
		prefix := map[logdbtest.Kind]byte{logdbtest.Entries: prefixEntry, logdbtest.Snapshots: prefixSnapshot}[kind]
		it := db.(*LogDB).db.NewIter(nil)
		defer it.Close()
		n := 0
		for ok := it.SeekGE([]byte{prefix}); ok && it.Key()[0] == prefix; ok = it.Next() {
			n++
		}
		return n
	},
}

// lowestEntry returns the index of the replica's lowest entry in the store,
// live or not (0 if none); reading it while NodeHost runs is safe.
func lowestEntry(t *testing.T, db *LogDB, shardID, replicaID uint64) uint64 {
	t.Helper()
	it := db.db.NewIter(&pebble.IterOptions{
		LowerBound: indexKey(prefixEntry, shardID, replicaID, 0),
		UpperBound: replicaRangeEnd(prefixEntry, shardID, replicaID),
	})
	defer it.Close()
	if !it.First() {
		return 0
	}
	index, _ := keyIndex(it.Key())
	return index
}

// all returns the replica's live entries from its lowest stored one.
func all(t *testing.T, db *LogDB, shardID, replicaID uint64) []pb.Entry {
	t.Helper()
	first := lowestEntry(t, db, shardID, replicaID)
	if first == 0 {
		return nil
	}
	return iterate(t, db, shardID, replicaID, first, math.MaxUint64, math.MaxUint64)
}

// The shared helpers, under their old names here.
var (
	makeEntries = logdbtest.MakeEntries
	save        = logdbtest.Save
	iterate     = logdbtest.Iterate
	indexes     = logdbtest.Indexes
	readState   = logdbtest.ReadState
	powerLoss   = storeHarness.PowerLoss
)
