package savecall

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// memory is a store's memory for the tests: saved States and snapshot
// indexes by replica, or an error for every snapshot lookup.
type memory struct {
	states map[raftio.NodeInfo]pb.State
	snaps  map[raftio.NodeInfo]uint64
	err    error
}

func (m *memory) LastState(ni raftio.NodeInfo) (pb.State, bool) {
	st, ok := m.states[ni]
	return st, ok
}

func (m *memory) SnapshotIndex(ni raftio.NodeInfo) (uint64, error) {
	return m.snaps[ni], m.err
}

var (
	r1 = raftio.NodeInfo{ShardID: 1, ReplicaID: 1}
	r2 = raftio.NodeInfo{ShardID: 2, ReplicaID: 1}
)

// saved is what the tests' store remembers: replica r1 has State saved,
// and a snapshot at 10.
var saved = pb.State{Term: 2, Vote: 1, Commit: 5}

func remembered() *memory {
	return &memory{
		states: map[raftio.NodeInfo]pb.State{r1: saved},
		snaps:  map[raftio.NodeInfo]uint64{r1: 10},
	}
}

func update(ni raftio.NodeInfo, st pb.State, snap uint64, entries ...uint64) pb.Update {
	ud := pb.Update{ShardID: ni.ShardID, ReplicaID: ni.ReplicaID, State: st, Snapshot: pb.Snapshot{Index: snap}}
	for _, i := range entries {
		ud.EntriesToSave = append(ud.EntriesToSave, pb.Entry{Index: i, Term: 2})
	}
	return ud
}

func stateChange(ni raftio.NodeInfo, st pb.State) Change {
	return Change{Replica: ni, State: st, SetState: true}
}

func TestUpdate(t *testing.T) {
	commit6 := pb.State{Term: 2, Vote: 1, Commit: 6}
	tests := []struct {
		name     string
		updates  []pb.Update
		want     []Change
		mustSync bool
	}{
		{
			name:    "an empty update changes nothing",
			updates: []pb.Update{update(r1, pb.State{}, 0)},
			want:    []Change{{Replica: r1}},
		},
		{
			name:    "the last State saved is not written again",
			updates: []pb.Update{update(r1, saved, 0)},
			want:    []Change{{Replica: r1}},
		},
		{
			name:    "a commit index alone is written without a sync",
			updates: []pb.Update{update(r1, commit6, 0)},
			want:    []Change{stateChange(r1, commit6)},
		},
		{
			name:     "a term change is synced",
			updates:  []pb.Update{update(r1, pb.State{Term: 3, Commit: 5}, 0)},
			want:     []Change{stateChange(r1, pb.State{Term: 3, Commit: 5})},
			mustSync: true,
		},
		{
			name:     "a vote change is synced",
			updates:  []pb.Update{update(r1, pb.State{Term: 2, Vote: 2, Commit: 5}, 0)},
			want:     []Change{stateChange(r1, pb.State{Term: 2, Vote: 2, Commit: 5})},
			mustSync: true,
		},
		{
			name:     "the first State since the store opened is synced",
			updates:  []pb.Update{update(r2, pb.State{Term: 2, Vote: 1, Commit: 5}, 0)},
			want:     []Change{stateChange(r2, pb.State{Term: 2, Vote: 1, Commit: 5})},
			mustSync: true,
		},
		{
			name:     "entries are synced and set the max index to the highest",
			updates:  []pb.Update{update(r1, pb.State{}, 0, 11, 12, 13)},
			want:     []Change{{Replica: r1, MaxIndex: 13, SetMax: true}},
			mustSync: true,
		},
		{
			name:     "a newer snapshot is written, synced, and sets the max index",
			updates:  []pb.Update{update(r1, pb.State{}, 20)},
			want:     []Change{{Replica: r1, Snapshot: 20, SetSnapshot: true, MaxIndex: 20, SetMax: true}},
			mustSync: true,
		},
		{
			name:     "a newer snapshot's entries set the max index after it",
			updates:  []pb.Update{update(r1, commit6, 20, 20, 21)},
			want:     []Change{{Replica: r1, State: commit6, SetState: true, Snapshot: 20, SetSnapshot: true, MaxIndex: 21, SetMax: true}},
			mustSync: true,
		},
		{
			name:     "an older snapshot is not written, and still synced",
			updates:  []pb.Update{update(r1, pb.State{}, 10)},
			want:     []Change{{Replica: r1}},
			mustSync: true,
		},
		{
			name:     "a replica's first snapshot is newer",
			updates:  []pb.Update{update(r2, pb.State{}, 1)},
			want:     []Change{{Replica: r2, Snapshot: 1, SetSnapshot: true, MaxIndex: 1, SetMax: true}},
			mustSync: true,
		},
		{
			name: "commit indexes of one replica twice are written without a sync",
			updates: []pb.Update{
				update(r1, commit6, 0),
				update(r1, pb.State{Term: 2, Vote: 1, Commit: 7}, 0),
			},
			want: []Change{stateChange(r1, commit6), stateChange(r1, pb.State{Term: 2, Vote: 1, Commit: 7})},
		},
		{
			name:    "a State equal to an earlier update's is not written again",
			updates: []pb.Update{update(r1, commit6, 0), update(r1, commit6, 0)},
			want:    []Change{stateChange(r1, commit6), {Replica: r1}},
		},
		{
			name:     "a term change against an earlier update's State is synced",
			updates:  []pb.Update{update(r1, commit6, 0), update(r1, pb.State{Term: 3, Commit: 6}, 0)},
			want:     []Change{stateChange(r1, commit6), stateChange(r1, pb.State{Term: 3, Commit: 6})},
			mustSync: true,
		},
		{
			name: "a State is compared with its own replica's, not another's",
			updates: []pb.Update{
				update(r2, pb.State{Term: 2, Vote: 1, Commit: 5}, 0),
				update(r1, pb.State{Term: 7, Commit: 5}, 0),
				update(r1, saved, 0),
			},
			want: []Change{
				stateChange(r2, pb.State{Term: 2, Vote: 1, Commit: 5}),
				stateChange(r1, pb.State{Term: 7, Commit: 5}),
				stateChange(r1, saved),
			},
			mustSync: true,
		},
		{
			name:     "a snapshot older than an earlier update's is not written",
			updates:  []pb.Update{update(r1, pb.State{}, 30), update(r1, pb.State{}, 20)},
			want:     []Change{{Replica: r1, Snapshot: 30, SetSnapshot: true, MaxIndex: 30, SetMax: true}, {Replica: r1}},
			mustSync: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCall("test")
			// A call before, to show that Reset forgets it.
			if _, err := c.Update(remembered(), &pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 9}}); err != nil {
				t.Fatal(err)
			}
			c.Reset()
			for i := range tt.updates {
				ch, err := c.Update(remembered(), &tt.updates[i])
				if err != nil {
					t.Fatal(err)
				}
				if ch != tt.want[i] {
					t.Errorf("update %d: %+v, want %+v", i, ch, tt.want[i])
				}
			}
			if got := c.Changes(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes %+v, want %+v", got, tt.want)
			}
			if c.MustSync() != tt.mustSync {
				t.Errorf("MustSync %v, want %v", c.MustSync(), tt.mustSync)
			}
		})
	}
}

func TestUpdateErrors(t *testing.T) {
	lookup := errors.New("lookup failed")
	tests := []struct {
		name string
		mem  *memory
		ud   pb.Update
		want string
		is   error
	}{
		{
			name: "a newer snapshot past the update's last entry",
			mem:  remembered(),
			ud:   update(r1, pb.State{}, 20, 18, 19),
			want: "test: shard 1 replica 1: snapshot 20 is newer than the last entry 19 saved with it",
		},
		{
			name: "the memory's error, as it is",
			mem:  &memory{err: lookup},
			ud:   update(r1, pb.State{}, 20),
			is:   lookup,
			want: "lookup failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCall("test")
			_, err := c.Update(tt.mem, &tt.ud)
			if err == nil || err.Error() != tt.want || tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
	// An older snapshot past the last entry is not written, so not checked.
	c := NewCall("test")
	ud := update(r1, pb.State{}, 9, 5)
	if _, err := c.Update(remembered(), &ud); err != nil {
		t.Fatalf("older snapshot: %v", err)
	}
}

// SaveSnapshots' snapshots: kept when newer, without a max index or a sync.
func TestSnapshot(t *testing.T) {
	c := NewCall("test")
	m := remembered()
	tests := []struct {
		name string
		ud   pb.Update
		want Change
	}{
		{"no snapshot", update(r1, saved, 0), Change{Replica: r1}},
		{"the one remembered", update(r1, pb.State{}, 10), Change{Replica: r1}},
		{"newer than the one remembered", update(r1, pb.State{}, 12), Change{Replica: r1, Snapshot: 12, SetSnapshot: true}},
		{"older than the call's", update(r1, pb.State{}, 11), Change{Replica: r1}},
		{"a replica's first", update(r2, pb.State{}, 3), Change{Replica: r2, Snapshot: 3, SetSnapshot: true}},
		{"newer than the call's", update(r1, pb.State{}, 13), Change{Replica: r1, Snapshot: 13, SetSnapshot: true}},
	}
	var want []Change
	for _, tt := range tests {
		ch, err := c.Snapshot(m, &tt.ud)
		if err != nil || ch != tt.want {
			t.Fatalf("%s: %+v, %v; want %+v", tt.name, ch, err, tt.want)
		}
		if ch.SetSnapshot {
			want = append(want, ch)
		}
	}
	if got := c.Changes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
	if c.MustSync() {
		t.Fatal("SaveSnapshots' snapshots set MustSync")
	}
	lookup := errors.New("lookup failed")
	ud := update(r2, pb.State{}, 1)
	if _, err := NewCall("test").Snapshot(&memory{err: lookup}, &ud); !errors.Is(err, lookup) {
		t.Fatalf("error %v, want the memory's", err)
	}
}

// A reused call decides without allocating, as SaveRaftState must.
func TestUpdateAllocations(t *testing.T) {
	c := NewCall("test")
	m := remembered()
	uds := []pb.Update{
		update(r1, pb.State{Term: 2, Vote: 1, Commit: 6}, 0, 11),
		update(r2, pb.State{Term: 1}, 4, 4, 5),
		update(r1, pb.State{Term: 2, Vote: 1, Commit: 7}, 0),
	}
	allocs := testing.AllocsPerRun(100, func() {
		c.Reset()
		for i := range uds {
			if _, err := c.Update(m, &uds[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per call, want 0", allocs)
	}
}
