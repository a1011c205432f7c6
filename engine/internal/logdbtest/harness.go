// Package logdbtest holds the behavioural tests that a baton Raft log store
// (engine/seglog) must pass: dragonboat's semantics and baton's sync
// policy, written apart from the store so that another store (as
// engine/raftlog was) is held to them by the same code. A store's package
// test calls Run with a Harness that opens the store and reaches into it
// where a test needs to.
package logdbtest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Kind is a kind of stored record, for Harness.Records.
type Kind int

const (
	// Entries are entry records, live or hidden above the max index.
	Entries Kind = iota
	// Snapshots are snapshot records.
	Snapshots
)

// Harness is what the tests need of a store besides raftio.ILogDB.
type Harness struct {
	// Open opens the store on fs, always in the same directory, and
	// closes it when the test ends if the test did not.
	Open func(t *testing.T, fs vfs.FS) raftio.ILogDB
	// Lowest returns the lowest entry index the store holds for the
	// replica, hidden or not, 0 if none (raftio has no call for it).
	Lowest func(t *testing.T, db raftio.ILogDB, shardID, replicaID uint64) uint64
	// Saves returns how many SaveRaftState writes were synced and not.
	Saves func(db raftio.ILogDB) (synced, unsynced uint64)
	// Forget makes the store forget whatever it remembers besides its
	// files (its caches), or reopens it, and returns the store to go on
	// with: what it shows must not change.
	Forget func(t *testing.T, db raftio.ILogDB) raftio.ILogDB
	// Records counts the records of a kind the store holds, over all
	// replicas.
	Records func(t *testing.T, db raftio.ILogDB, kind Kind) int
	// Factory returns a new factory of the store, for NodeHost
	// (RunNodeHost).
	Factory func() config.LogDBFactory
	// Files, when set, checks the files a closed NodeHost left in the
	// store, given the directories NodeHost passed its factory.
	Files func(t *testing.T, dirs, wals []string)
	// SkipAllocations skips the test that the save path allocates
	// nothing, for a configuration that allocates on purpose (segments so
	// small that most saves switch segments).
	SkipAllocations bool
}

// Run runs every behavioural test against the store.
func Run(t *testing.T, h *Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"BootstrapInfoAndListNodeInfo", testBootstrapInfoAndListNodeInfo},
		{"SaveRaftStateAndReadBack", testSaveRaftStateAndReadBack},
		{"OverwrittenSuffixIsGone", testOverwrittenSuffixIsGone},
		{"IterateEntriesMaxSize", testIterateEntriesMaxSize},
		{"IterateEntriesStopsAtGaps", testIterateEntriesStopsAtGaps},
		{"ReadRaftStateRange", testReadRaftStateRange},
		{"RemoveEntriesTo", testRemoveEntriesTo},
		{"CompactEntriesTo", testCompactEntriesTo},
		{"Snapshots", testSnapshots},
		{"ImportSnapshot", testImportSnapshot},
		{"RemoveNodeData", testRemoveNodeData},
		{"UnchangedStateIsNotWritten", testUnchangedStateIsNotWritten},
		{"SameReplicaTwiceInOneCall", testSameReplicaTwiceInOneCall},
		{"CloseAndReopenKeepsEverything", testCloseAndReopenKeepsEverything},
		{"ConcurrentWorkersAndReaders", testConcurrentWorkersAndReaders},
		{"SaveRaftStateAllocations", testSaveRaftStateAllocations},
		{"ConcurrentSnapshotSaves", testConcurrentSnapshotSaves},
		{"SyncPolicySurvivesPowerLoss", testSyncPolicySurvivesPowerLoss},
		{"FirstStateAfterOpenIsSynced", testFirstStateAfterOpenIsSynced},
		{"PowerLossAtEveryStep", testPowerLossAtEveryStep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

// RunNodeHost runs real dragonboat NodeHosts on the store: proposals,
// restarts, snapshots and compactions, three replicas, a snapshot import.
func RunNodeHost(t *testing.T, h *Harness) {
	if testing.Short() {
		t.Skip("starts dragonboat")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"Restart", testNodeHostRestart},
		{"ThreeNodeHostsSkipCommitOnlySyncs", testThreeNodeHostsSkipCommitOnlySyncs},
		{"ImportSnapshotThroughDragonboat", testImportSnapshotThroughDragonboat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

// reopen closes db cleanly and opens it again on the same fs.
func (h *Harness) reopen(t *testing.T, fs vfs.FS, db raftio.ILogDB) raftio.ILogDB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return h.Open(t, fs)
}

// powerLoss closes db without letting anything more reach "disk", drops
// every write that was not synced, as a power loss would, and opens the
// store again. (Close may sync; the strict file system ignores that.)
func (h *Harness) powerLoss(t *testing.T, fs *vfs.MemFS, db raftio.ILogDB) raftio.ILogDB {
	t.Helper()
	fs.SetIgnoreSyncs(true)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
	return h.Open(t, fs)
}

// PowerLoss is powerLoss for a store's own tests.
func (h *Harness) PowerLoss(t *testing.T, fs *vfs.MemFS, db raftio.ILogDB) raftio.ILogDB {
	t.Helper()
	return h.powerLoss(t, fs, db)
}

// all returns the replica's live entries from its lowest stored one.
func (h *Harness) all(t *testing.T, db raftio.ILogDB, shardID, replicaID uint64) []pb.Entry {
	t.Helper()
	first := h.Lowest(t, db, shardID, replicaID)
	if first == 0 {
		return nil
	}
	return iterate(t, db, shardID, replicaID, first, ^uint64(0), ^uint64(0))
}

// MakeEntries returns entries first..last of term, each with a command that
// names it, so a test can tell which save an entry came from.
func MakeEntries(term, first, last uint64) []pb.Entry {
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

func makeEntries(term, first, last uint64) []pb.Entry { return MakeEntries(term, first, last) }

// Save saves the updates as step worker 1.
func Save(t *testing.T, db raftio.ILogDB, uds ...pb.Update) {
	t.Helper()
	if err := db.SaveRaftState(uds, 1); err != nil {
		t.Fatal(err)
	}
}

func save(t *testing.T, db raftio.ILogDB, uds ...pb.Update) {
	t.Helper()
	Save(t, db, uds...)
}

// Iterate returns the replica's entries in [low, high), up to maxSize.
func Iterate(t *testing.T, db raftio.ILogDB, shardID, replicaID, low, high, maxSize uint64) []pb.Entry {
	t.Helper()
	ents, _, err := db.IterateEntries(nil, 0, shardID, replicaID, low, high, maxSize)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

func iterate(t *testing.T, db raftio.ILogDB, shardID, replicaID, low, high, maxSize uint64) []pb.Entry {
	t.Helper()
	return Iterate(t, db, shardID, replicaID, low, high, maxSize)
}

// Indexes returns the entries' indexes.
func Indexes(ents []pb.Entry) []uint64 {
	out := []uint64{}
	for _, e := range ents {
		out = append(out, e.Index)
	}
	return out
}

func indexes(ents []pb.Entry) []uint64 { return Indexes(ents) }

// Span returns first..last.
func Span(first, last uint64) []uint64 {
	out := []uint64{}
	for i := first; i <= last; i++ {
		out = append(out, i)
	}
	return out
}

func span(first, last uint64) []uint64 { return Span(first, last) }

// ReadState is ReadRaftState, failing the test on an error.
func ReadState(t *testing.T, db raftio.ILogDB, shardID, replicaID, snapshotIndex uint64) raftio.RaftState {
	t.Helper()
	rs, err := db.ReadRaftState(shardID, replicaID, snapshotIndex)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func readState(t *testing.T, db raftio.ILogDB, shardID, replicaID, snapshotIndex uint64) raftio.RaftState {
	t.Helper()
	return ReadState(t, db, shardID, replicaID, snapshotIndex)
}

// Equal fails the test unless got and want are deeply equal.
func Equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	Equal(t, what, got, want)
}

// WaitClosed waits (at most 30 s) for ch to be closed.
func WaitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("compaction not done after 30s")
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	WaitClosed(t, ch)
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

func (h *Harness) viewOf(t *testing.T, db raftio.ILogDB, shardID, replicaID, snapshotIndex uint64) view {
	t.Helper()
	var v view
	v.Bootstrap, v.BootstrapErr = db.GetBootstrapInfo(shardID, replicaID)
	v.State, v.StateErr = db.ReadRaftState(shardID, replicaID, snapshotIndex)
	ss, err := db.GetSnapshot(shardID, replicaID)
	if err != nil {
		t.Fatal(err)
	}
	v.Snapshot = ss
	v.Entries = h.all(t, db, shardID, replicaID)
	return v
}
