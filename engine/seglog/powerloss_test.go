package seglog

import (
	"errors"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// replicaView is everything the store shows about one replica, and the
// lowest entry it holds.
type replicaView struct {
	Bootstrap    pb.Bootstrap
	BootstrapErr error
	State        raftio.RaftState
	StateErr     error
	Snapshot     pb.Snapshot
	Lowest       uint64
	Entries      []pb.Entry
}

func viewReplica(t *testing.T, db *LogDB, ni raftio.NodeInfo) replicaView {
	t.Helper()
	var v replicaView
	var err error
	v.Bootstrap, v.BootstrapErr = db.GetBootstrapInfo(ni.ShardID, ni.ReplicaID)
	if v.Snapshot, err = db.GetSnapshot(ni.ShardID, ni.ReplicaID); err != nil {
		t.Fatal(err)
	}
	v.State, v.StateErr = db.ReadRaftState(ni.ShardID, ni.ReplicaID, v.Snapshot.Index)
	v.Lowest = lowestEntry(db, ni.ShardID, ni.ReplicaID)
	if v.Lowest != 0 {
		v.Entries = iterate(t, db, ni.ShardID, ni.ReplicaID, v.Lowest, math.MaxUint64, math.MaxUint64)
	}
	return v
}

// A mix of every kind of synced write, on segments so small that most steps
// switch segments and retire old ones, with power lost after every step:
// what the store shows afterwards is exactly what it showed before. (No
// step is a commit-only save, so nothing may be lost; the shared tests
// prove what commit-only saves may lose.)
func TestPowerLossAtEveryStepWithSegmentSwitches(t *testing.T) {
	a, b, c := raftio.NodeInfo{ShardID: 1, ReplicaID: 1}, raftio.NodeInfo{ShardID: 2, ReplicaID: 1}, raftio.NodeInfo{ShardID: 3, ReplicaID: 2}
	dni := raftio.NodeInfo{ShardID: 4, ReplicaID: 1}
	type step func(t *testing.T, db *LogDB)
	var steps []step
	lastA, lastB, term := uint64(0), uint64(0), uint64(1)
	for i := 0; i < 48; i++ {
		switch i % 8 {
		case 0: // entries of A
			first := lastA + 1
			lastA += 3
			ents, st := bigEntries(term, first, lastA, 40), pb.State{Term: term, Vote: 1, Commit: first - 1}
			steps = append(steps, func(t *testing.T, db *LogDB) {
				save(t, db, pb.Update{ShardID: a.ShardID, ReplicaID: a.ReplicaID, State: st, EntriesToSave: ents})
			})
		case 1: // entries of B and a term change of A, in one call
			lastB++
			ents := makeEntries(1, lastB, lastB)
			term++
			st := pb.State{Term: term, Vote: 2, Commit: lastA - 3}
			steps = append(steps, func(t *testing.T, db *LogDB) {
				save(t, db, pb.Update{ShardID: b.ShardID, ReplicaID: b.ReplicaID, State: pb.State{Term: 1}, EntriesToSave: ents},
					pb.Update{ShardID: a.ShardID, ReplicaID: a.ReplicaID, State: st})
			})
		case 2: // a snapshot of A's own, then its log removed below it
			ss := pb.Snapshot{Index: lastA - 1, Term: term - 1, Filepath: "snap"}
			steps = append(steps, func(t *testing.T, db *LogDB) {
				if err := db.SaveSnapshots([]pb.Update{{ShardID: a.ShardID, ReplicaID: a.ReplicaID, Snapshot: ss}}); err != nil {
					t.Fatal(err)
				}
				if err := db.RemoveEntriesTo(a.ShardID, a.ReplicaID, ss.Index-1); err != nil {
					t.Fatal(err)
				}
			})
		case 3: // A's last entry overwritten at a new term: the max index drops
			ents := bigEntries(term, lastA, lastA, 10)
			steps = append(steps, func(t *testing.T, db *LogDB) {
				save(t, db, pb.Update{ShardID: a.ShardID, ReplicaID: a.ReplicaID, EntriesToSave: ents})
			})
		case 4: // C appears, its entries beside one of D, which D keeps
			// forever: the segment stays, and with it C's entries after
			// C is removed, unless Open drops them again.
			d := uint64(i/8 + 1)
			steps = append(steps, func(t *testing.T, db *LogDB) {
				if err := db.SaveBootstrapInfo(c.ShardID, c.ReplicaID, pb.Bootstrap{Addresses: map[uint64]string{2: "c:2"}}); err != nil {
					t.Fatal(err)
				}
				save(t, db, pb.Update{ShardID: c.ShardID, ReplicaID: c.ReplicaID, State: pb.State{Term: 1, Vote: 2},
					EntriesToSave: makeEntries(1, 1, 4)},
					pb.Update{ShardID: dni.ShardID, ReplicaID: dni.ReplicaID, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, d, d)})
			})
		case 5: // a snapshot from the leader for B, through SaveRaftState
			lastB += 5
			ss := pb.Snapshot{Index: lastB, Term: 1, Filepath: "b"}
			ents := makeEntries(1, lastB, lastB)
			steps = append(steps, func(t *testing.T, db *LogDB) {
				save(t, db, pb.Update{ShardID: b.ShardID, ReplicaID: b.ReplicaID, Snapshot: ss, EntriesToSave: ents})
				if err := db.RemoveEntriesTo(b.ShardID, b.ReplicaID, lastB-1); err != nil {
					t.Fatal(err)
				}
			})
		case 6: // C goes
			steps = append(steps, func(t *testing.T, db *LogDB) {
				if err := db.RemoveNodeData(c.ShardID, c.ReplicaID); err != nil {
					t.Fatal(err)
				}
			})
		case 7: // C imported from a snapshot
			steps = append(steps, func(t *testing.T, db *LogDB) {
				if err := db.ImportSnapshot(pb.Snapshot{ShardID: c.ShardID, Index: 3, Term: 1, Type: pb.RegularStateMachine}, c.ReplicaID); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	const size = 1 << 10
	switches, copied := 0, 0
	for n := 1; n <= len(steps); n++ {
		fs := vfs.NewStrictMem()
		db := openSized(t, fs, size)
		for _, s := range steps[:n] {
			s(t, db)
		}
		created, recycled := segmentFiles(db)
		switches += created + recycled
		copied += relocated(db)
		want := map[raftio.NodeInfo]replicaView{}
		for _, ni := range []raftio.NodeInfo{a, b, c, dni} {
			want[ni] = viewReplica(t, db, ni)
		}
		nis, err := db.ListNodeInfo()
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 2; round++ {
			// A power loss, then a clean reopen of what it left.
			if round == 0 {
				db = powerLoss(t, fs, db).(*LogDB)
			} else {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = openSized(t, fs, size)
			}
			for _, ni := range []raftio.NodeInfo{a, b, c, dni} {
				got := viewReplica(t, db, ni)
				if got.StateErr != nil && errors.Is(got.StateErr, want[ni].StateErr) {
					got.StateErr = want[ni].StateErr
				}
				equal(t, "replica", got, want[ni])
			}
			got, err := db.ListNodeInfo()
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "ListNodeInfo", got, nis)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d segment switches, %d entries copied forward, in all", switches, copied)
	if copied == 0 {
		t.Fatal("no entry copied forward: the test needs D's entries to be")
	}
}
