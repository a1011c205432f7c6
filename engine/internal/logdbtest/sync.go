package logdbtest

import (
	"errors"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// The sync policy, proven against pebble's strict in-memory file system.
// Every case starts from entries 1..10 of term 2, voted for 1, committed to
// 5, saved with a sync, then does its steps and loses power.
func testSyncPolicySurvivesPowerLoss(t *testing.T, h *Harness) {
	base := pb.State{Term: 2, Vote: 1, Commit: 5}
	commitOnly := func(commit uint64) func(*testing.T, raftio.ILogDB) {
		return func(t *testing.T, db raftio.ILogDB) {
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: commit}})
		}
	}
	type counts struct{ synced, unsynced uint64 }
	tests := []struct {
		name  string
		steps []func(*testing.T, raftio.ILogDB)
		// saves counts SaveRaftState commits by sync mode, the base
		// save included.
		saves counts
		// what survives
		state   pb.State
		entries []uint64
		check   func(*testing.T, raftio.ILogDB)
	}{
		{
			name:    "nothing after the base save",
			saves:   counts{1, 0},
			state:   base,
			entries: span(1, 10),
		},
		{
			// The commit-only save is not synced, so it is lost: the
			// commit index read back is the last synced one (never
			// more than was saved), and entries, term and vote are
			// all there.
			name:    "commit only is not synced",
			steps:   []func(*testing.T, raftio.ILogDB){commitOnly(8)},
			saves:   counts{1, 1},
			state:   base,
			entries: span(1, 10),
		},
		{
			name:    "several commit-only saves",
			steps:   []func(*testing.T, raftio.ILogDB){commitOnly(6), commitOnly(7), commitOnly(8)},
			saves:   counts{1, 3},
			state:   base,
			entries: span(1, 10),
		},
		{
			// A later synced write makes the earlier unsynced one
			// durable: the log is sequential.
			name: "commit only, then entries of the same replica",
			steps: []func(*testing.T, raftio.ILogDB){commitOnly(8), func(t *testing.T, db raftio.ILogDB) {
				save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: makeEntries(2, 11, 12)})
			}},
			saves:   counts{2, 1},
			state:   pb.State{Term: 2, Vote: 1, Commit: 8},
			entries: span(1, 12),
		},
		{
			name: "commit only, then entries of another replica",
			steps: []func(*testing.T, raftio.ILogDB){commitOnly(8), func(t *testing.T, db raftio.ILogDB) {
				save(t, db, pb.Update{ShardID: 7, ReplicaID: 3, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, 1, 1)})
			}},
			saves:   counts{2, 1},
			state:   pb.State{Term: 2, Vote: 1, Commit: 8},
			entries: span(1, 10),
			check: func(t *testing.T, db raftio.ILogDB) {
				equal(t, "other replica", indexes(h.all(t, db, 7, 3)), []uint64{1})
			},
		},
		{
			name: "commit only, then a bootstrap record",
			steps: []func(*testing.T, raftio.ILogDB){commitOnly(8), func(t *testing.T, db raftio.ILogDB) {
				if err := db.SaveBootstrapInfo(7, 3, pb.Bootstrap{Join: true}); err != nil {
					t.Fatal(err)
				}
			}},
			saves:   counts{1, 1},
			state:   pb.State{Term: 2, Vote: 1, Commit: 8},
			entries: span(1, 10),
		},
		{
			name: "commit only, with a commit-only save of another replica in the same call",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				save(t, db,
					pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: 8}},
					pb.Update{ShardID: 1, ReplicaID: 2, State: pb.State{Term: 2, Vote: 1, Commit: 8}},
				)
			}},
			saves:   counts{2, 0}, // replica 2's first state is synced, and so the batch
			state:   pb.State{Term: 2, Vote: 1, Commit: 8},
			entries: span(1, 10),
		},
		{
			name: "term change alone is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 3, Commit: 5}})
			}},
			saves:   counts{2, 0},
			state:   pb.State{Term: 3, Commit: 5},
			entries: span(1, 10),
		},
		{
			name: "vote change alone is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 2, Commit: 5}})
			}},
			saves:   counts{2, 0},
			state:   pb.State{Term: 2, Vote: 2, Commit: 5},
			entries: span(1, 10),
		},
		{
			name: "entries with a commit change are synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: 9},
					EntriesToSave: makeEntries(2, 11, 11)})
			}},
			saves:   counts{2, 0},
			state:   pb.State{Term: 2, Vote: 1, Commit: 9},
			entries: span(1, 11),
		},
		{
			name: "an overwritten suffix is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 3, Vote: 1, Commit: 5},
					EntriesToSave: makeEntries(3, 6, 7)})
			}},
			saves:   counts{2, 0},
			state:   pb.State{Term: 3, Vote: 1, Commit: 5},
			entries: span(1, 7),
		},
		{
			name: "a snapshot with a commit change is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: 10},
					Snapshot: pb.Snapshot{Index: 10, Term: 2}})
			}},
			saves:   counts{2, 0},
			state:   pb.State{Term: 2, Vote: 1, Commit: 10},
			entries: span(1, 10),
			check: func(t *testing.T, db raftio.ILogDB) {
				if ss, err := db.GetSnapshot(1, 1); err != nil || ss.Index != 10 {
					t.Fatalf("snapshot = %d, %v; want 10", ss.Index, err)
				}
			},
		},
		{
			name: "SaveSnapshots is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				if err := db.SaveSnapshots([]pb.Update{{ShardID: 1, ReplicaID: 1, Snapshot: pb.Snapshot{Index: 4, Term: 2}}}); err != nil {
					t.Fatal(err)
				}
			}},
			saves:   counts{1, 0},
			state:   base,
			entries: span(1, 10),
			check: func(t *testing.T, db raftio.ILogDB) {
				if ss, err := db.GetSnapshot(1, 1); err != nil || ss.Index != 4 {
					t.Fatalf("snapshot = %d, %v; want 4", ss.Index, err)
				}
			},
		},
		{
			name: "RemoveEntriesTo is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				if err := db.RemoveEntriesTo(1, 1, 4); err != nil {
					t.Fatal(err)
				}
			}},
			saves:   counts{1, 0},
			state:   base,
			entries: span(5, 10),
		},
		{
			name: "ImportSnapshot is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				if err := db.ImportSnapshot(pb.Snapshot{ShardID: 1, Index: 8, Term: 4, Type: pb.RegularStateMachine}, 1); err != nil {
					t.Fatal(err)
				}
			}},
			saves:   counts{1, 0},
			state:   pb.State{Term: 4, Commit: 8},
			entries: span(1, 8),
		},
		{
			name: "RemoveNodeData is synced",
			steps: []func(*testing.T, raftio.ILogDB){func(t *testing.T, db raftio.ILogDB) {
				if err := db.RemoveNodeData(1, 1); err != nil {
					t.Fatal(err)
				}
			}},
			saves: counts{1, 0},
			check: func(t *testing.T, db raftio.ILogDB) {
				if _, err := db.ReadRaftState(1, 1, 0); !errors.Is(err, raftio.ErrNoSavedLog) {
					t.Fatalf("ReadRaftState after removal: %v", err)
				}
				if _, err := db.GetBootstrapInfo(1, 1); !errors.Is(err, raftio.ErrNoBootstrapInfo) {
					t.Fatalf("GetBootstrapInfo after removal: %v", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewStrictMem()
			db := h.Open(t, fs)
			if err := db.SaveBootstrapInfo(1, 1, pb.Bootstrap{Addresses: map[uint64]string{1: "a:1"}}); err != nil {
				t.Fatal(err)
			}
			save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: base, EntriesToSave: makeEntries(2, 1, 10)})
			for _, step := range tt.steps {
				step(t, db)
			}
			if s, u := h.Saves(db); (counts{s, u}) != tt.saves {
				got := counts{s, u}
				t.Fatalf("SaveRaftState commits (synced, unsynced) = %v, want %v", got, tt.saves)
			}
			db = h.powerLoss(t, fs, db)
			if tt.check != nil {
				tt.check(t, db)
			}
			if tt.entries == nil {
				return
			}
			rs := readState(t, db, 1, 1, 0)
			equal(t, "state", rs.State, tt.state)
			equal(t, "entries", indexes(h.all(t, db, 1, 1)), tt.entries)
			if _, err := db.GetBootstrapInfo(1, 1); err != nil {
				t.Fatalf("bootstrap: %v", err)
			}
		})
	}
}

// The first State saved after the store opens is synced, even if it differs
// from the one on disk in its commit index only: the store keeps no State
// from before, so it has nothing to compare the term and vote with.
func testFirstStateAfterOpenIsSynced(t *testing.T, h *Harness) {
	fs := vfs.NewStrictMem()
	db := h.Open(t, fs)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: 5}, EntriesToSave: makeEntries(2, 1, 10)})
	db = h.reopen(t, fs, db)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 2, Vote: 1, Commit: 9}})
	db = h.powerLoss(t, fs, db)
	equal(t, "state", readState(t, db, 1, 1, 0).State, pb.State{Term: 2, Vote: 1, Commit: 9})
}

// A long run of saves with power lost at every point: whatever is read back
// has every entry and the term and vote of the last synced save, and a
// commit index between the last synced one and the last saved one.
func testPowerLossAtEveryStep(t *testing.T, h *Harness) {
	type step struct {
		ud     pb.Update
		synced bool
	}
	var steps []step
	term, vote, commit, last := uint64(1), uint64(1), uint64(0), uint64(0)
	for i := 0; i < 30; i++ {
		switch i % 5 {
		case 0, 2: // entries, commit behind
			steps = append(steps, step{pb.Update{State: pb.State{Term: term, Vote: vote, Commit: commit},
				EntriesToSave: makeEntries(term, last+1, last+2)}, true})
			last += 2
		case 1, 3: // commit catches up
			commit = last
			steps = append(steps, step{pb.Update{State: pb.State{Term: term, Vote: vote, Commit: commit}}, false})
		case 4: // new term and vote
			term++
			vote = uint64(i%3 + 1)
			steps = append(steps, step{pb.Update{State: pb.State{Term: term, Vote: vote, Commit: commit}}, true})
		}
	}
	for n := 1; n <= len(steps); n++ {
		fs := vfs.NewStrictMem()
		db := h.Open(t, fs)
		var lastSynced, lastSaved pb.State
		var entries uint64
		for _, s := range steps[:n] {
			s.ud.ShardID, s.ud.ReplicaID = 1, 1
			save(t, db, s.ud)
			if s.synced {
				lastSynced = s.ud.State
			}
			lastSaved = s.ud.State
			if k := len(s.ud.EntriesToSave); k > 0 {
				entries = s.ud.EntriesToSave[k-1].Index
			}
		}
		db = h.powerLoss(t, fs, db)
		st := readState(t, db, 1, 1, 0).State
		if st.Term != lastSynced.Term || st.Vote != lastSynced.Vote ||
			st.Commit < lastSynced.Commit || st.Commit > lastSaved.Commit {
			t.Fatalf("after %d saves: state %+v, last synced %+v, last saved %+v", n, st, lastSynced, lastSaved)
		}
		if got := indexes(iterate(t, db, 1, 1, 1, math.MaxUint64, math.MaxUint64)); len(got) != int(entries) {
			t.Fatalf("after %d saves: entries %v, want 1..%d", n, got, entries)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
