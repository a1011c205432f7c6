package seglog

import (
	"testing"

	"github.com/baton-dev/baton/engine/internal/logdbtest"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/logger"
	"github.com/lni/dragonboat/v4/raftio"
)

func init() {
	for _, name := range []string{"raft", "rsm", "transport", "dragonboat", "logdb", "grpc", "config",
		"raftpb", "settings", "tan", "pebblekv", "registry", "server", "gossip", "LogDB", "tools",
		"fileutil", "utils", "vfs", "seglog"} {
		logger.GetLogger(name).SetLevel(logger.ERROR)
	}
}

const testDir = "/data/node/baton-seglog"

// testSegmentSize keeps the segments of in-memory stores small, so that
// the shared tests rotate segments too.
const testSegmentSize = 64 << 10

// openStore opens a store on fs with small segments and closes it when the
// test ends, if the test did not.
func openStore(t *testing.T, fs vfs.FS) *LogDB {
	t.Helper()
	return openSized(t, fs, testSegmentSize)
}

func openSized(t *testing.T, fs vfs.FS, size int64) *LogDB {
	t.Helper()
	db, err := Open(testDir, Options{fs: fs, segmentSize: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// storeHarness runs the shared behavioural tests (logdbtest) on this store.
var storeHarness = harnessFor(testSegmentSize)

// harnessFor returns the harness of stores with segments of size bytes.
func harnessFor(size int64) *logdbtest.Harness {
	return &logdbtest.Harness{
		Open: func(t *testing.T, fs vfs.FS) raftio.ILogDB { return openSized(t, fs, size) },
		Lowest: func(t *testing.T, db raftio.ILogDB, shardID, replicaID uint64) uint64 {
			return lowestEntry(db.(*LogDB), shardID, replicaID)
		},
		Saves: func(db raftio.ILogDB) (uint64, uint64) {
			l := db.(*LogDB)
			return l.saves.Counts()
		},
		// The index is all the store remembers, so forgetting is reopening:
		// everything is read back from the segments.
		Forget: func(t *testing.T, db raftio.ILogDB) raftio.ILogDB {
			l := db.(*LogDB)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			nl, err := Open(l.dir, Options{fs: l.fs, segmentSize: l.segmentSize})
			if err != nil {
				t.Fatal(err)
			}
			return nl
		},
		// NodeHosts run on the real file system: small segments keep
		// their zero-filling cheap and make them switch segments.
		Factory: func() config.LogDBFactory { return &Factory{segmentSize: nodeHostSegmentSize} },
		Files:   nodeHostFiles,
		Records: func(t *testing.T, db raftio.ILogDB, kind logdbtest.Kind) int {
			l := db.(*LogDB)
			l.idx.mu.RLock()
			defer l.idx.mu.RUnlock()
			n := 0
			for _, r := range l.idx.replicas {
				switch kind {
				case logdbtest.Entries:
					for _, run := range r.entries {
						n += len(run.locs)
					}
				case logdbtest.Snapshots:
					if r.hasSnap {
						n++
					}
				}
			}
			return n
		},
	}
}

// lowestEntry returns the index of the replica's lowest stored entry, live
// or hidden above the max index (0 if none).
func lowestEntry(l *LogDB, shardID, replicaID uint64) uint64 {
	l.idx.mu.RLock()
	defer l.idx.mu.RUnlock()
	r := l.idx.get(raftio.GetNodeInfo(shardID, replicaID))
	if r == nil || len(r.entries) == 0 {
		return 0
	}
	return r.entries[0].first
}

// The shared helpers, under short names.
var (
	makeEntries = logdbtest.MakeEntries
	save        = logdbtest.Save
	iterate     = logdbtest.Iterate
	indexes     = logdbtest.Indexes
	span        = logdbtest.Span
	readState   = logdbtest.ReadState
	equal       = logdbtest.Equal
	powerLoss   = storeHarness.PowerLoss
)

// segmentFiles returns how many segment files the store zero-filled and
// recycled since it opened.
func segmentFiles(db *LogDB) (created, recycled int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.created, db.recycled
}

// relocated returns how many entries the store copied forward since it
// opened.
func relocated(db *LogDB) int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.relocated
}
