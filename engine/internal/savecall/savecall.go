// Package savecall makes the decisions of a SaveRaftState call for baton's
// Raft log store (engine/seglog): which of each update's State and snapshot
// to write, what each update changes for its replica, and whether the call
// must be synced. The store writes what is decided in its own format (a
// segment record) and tells the package what it remembers of its replicas
// from before the call (Memory). Saves counts the calls that wrote
// something, and times them for whoever watches the store (the node's
// metrics).
//
// The decisions are the sync policy the store documents, and the safety of
// skipping a sync rests on them (engine/seglog's package documentation
// gives the argument). They are kept apart from the store's file format so
// that they can be read, and tested, on their own (two stores shared them
// while engine/raftlog existed).
//
// The rules, as in dragonboat's store except for the sync:
//
//   - A State equal to the last State saved for its replica is not
//     written again.
//   - A call must be synced if any update has entries, a snapshot (newer
//     than the replica's or not), or a State whose term or vote differs
//     from the last State saved for its replica, or none was saved since
//     the store was opened. A call whose only changes are commit indexes
//     is written without a sync.
//   - A snapshot is written only if newer than the replica's newest. It
//     then sets the replica's max index to its own index, and the update's
//     entries, if any, set it to their highest index after it. An update
//     whose snapshot is newer than its last entry is an error (dragonboat's
//     store panics): Raft never produces one.
//
// "Last saved" and "newest" include the earlier updates of the same call,
// which may name the same replica: each update's Change is kept, in order,
// and looked up backwards before the store's memory.
//
// A Call allocates nothing once its list has grown to the longest call
// seen; each store keeps one in each step worker's context
// (engine/internal/stepworkers), so that SaveRaftState allocates nothing
// in the steady state.
package savecall

import (
	"fmt"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Change is what one update of a call changes for its replica: what the
// store is to write besides the entries, and, once it is written, what the
// store is to remember.
type Change struct {
	Replica raftio.NodeInfo

	// State is the update's State, to be written, when SetState: it
	// differs from the last State saved for the replica.
	State    pb.State
	SetState bool

	// Snapshot is the index of the update's snapshot, to be written, when
	// SetSnapshot: it is newer than the replica's newest.
	Snapshot    uint64
	SetSnapshot bool

	// MaxIndex is the replica's new max index, to be written after every
	// entry of the call, when SetMax: the highest index of the update's
	// entries, else the index of its snapshot.
	MaxIndex uint64
	SetMax   bool
}

// Memory is what a store remembers of its replicas from before a call,
// which the call's lookups fall back on when no earlier update of the call
// says.
type Memory interface {
	// LastState returns the last State the store wrote for the replica,
	// synced or not, and false if it wrote none since it was opened (or
	// since the replica's data was removed): the next one is then synced.
	LastState(ni raftio.NodeInfo) (pb.State, bool)
	// SnapshotIndex returns the index of the replica's newest snapshot,
	// 0 if it has none.
	SnapshotIndex(ni raftio.NodeInfo) (uint64, error)
}

// Call is one call's changes, in order (one per update of a SaveRaftState
// call, one per newer snapshot of a SaveSnapshots call), and whether the
// call must be synced. A step worker reuses its Call from call to call
// (Reset).
type Call struct {
	store    string
	changes  []Change
	mustSync bool
}

// NewCall returns an empty call. store is the store's name, which starts
// the errors of Update, as every error of the store starts with it.
func NewCall(store string) *Call {
	return &Call{store: store}
}

// Reset empties the call for the next one, keeping its list's capacity.
func (c *Call) Reset() {
	c.changes, c.mustSync = c.changes[:0], false
}

// Update decides about the next update of the call (see the package
// documentation for the rules) and returns its Change, also kept for the
// later updates and for Changes. The store writes the Change's State and
// snapshot as it says, the update's entries after every snapshot of the
// call, and the max indexes (Changes) after every entry.
//
// An error is that of the Memory, as it is, or one naming an update whose
// snapshot is newer than its last entry; the call is then void.
func (c *Call) Update(m Memory, ud *pb.Update) (Change, error) {
	ch := Change{Replica: raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}}
	if !pb.IsEmptyState(ud.State) {
		prev, ok := c.lastState(m, ch.Replica)
		if !ok || !pb.IsStateEqual(prev, ud.State) {
			ch.State, ch.SetState = ud.State, true
			if !ok || prev.Term != ud.State.Term || prev.Vote != ud.State.Vote {
				c.mustSync = true
			}
		}
	}
	if !pb.IsEmptySnapshot(ud.Snapshot) {
		c.mustSync = true
		newer, err := c.snapshotIsNewer(m, ch.Replica, ud.Snapshot.Index)
		if err != nil {
			return Change{}, err
		}
		if newer {
			if n := len(ud.EntriesToSave); n > 0 && ud.Snapshot.Index > ud.EntriesToSave[n-1].Index {
				return Change{}, fmt.Errorf("%s: shard %d replica %d: snapshot %d is newer than the last entry %d saved with it",
					c.store, ud.ShardID, ud.ReplicaID, ud.Snapshot.Index, ud.EntriesToSave[n-1].Index)
			}
			ch.Snapshot, ch.SetSnapshot = ud.Snapshot.Index, true
			ch.MaxIndex, ch.SetMax = ud.Snapshot.Index, true
		}
	}
	if len(ud.EntriesToSave) > 0 {
		c.mustSync = true
		highest := uint64(0)
		for i := range ud.EntriesToSave {
			highest = max(highest, ud.EntriesToSave[i].Index)
		}
		if highest > 0 {
			ch.MaxIndex, ch.SetMax = highest, true
		}
	}
	c.changes = append(c.changes, ch)
	return ch, nil
}

// Snapshot decides about the snapshot of an update given to SaveSnapshots,
// a snapshot a replica made of its own applied state: it is to be written
// only if newer than the replica's newest, and then its Change, which
// unlike Update's leaves the max index alone, is kept. An update without a
// snapshot, or with an older one, gives a Change that sets nothing, and
// is not kept. Snapshot does not touch MustSync: SaveSnapshots always
// syncs. An error is that of the Memory, as it is.
func (c *Call) Snapshot(m Memory, ud *pb.Update) (Change, error) {
	ch := Change{Replica: raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}}
	if pb.IsEmptySnapshot(ud.Snapshot) {
		return ch, nil
	}
	newer, err := c.snapshotIsNewer(m, ch.Replica, ud.Snapshot.Index)
	if err != nil {
		return Change{}, err
	}
	if !newer {
		return ch, nil
	}
	ch.Snapshot, ch.SetSnapshot = ud.Snapshot.Index, true
	c.changes = append(c.changes, ch)
	return ch, nil
}

// MustSync reports whether the call must be synced before it returns.
func (c *Call) MustSync() bool { return c.mustSync }

// Changes returns the call's changes, in order, until the next Reset.
func (c *Call) Changes() []Change { return c.changes }

// lastState returns the last State saved for the replica: by an earlier
// update of this call if any, else as m remembers it.
func (c *Call) lastState(m Memory, ni raftio.NodeInfo) (pb.State, bool) {
	for i := len(c.changes) - 1; i >= 0; i-- {
		if c.changes[i].Replica == ni && c.changes[i].SetState {
			return c.changes[i].State, true
		}
	}
	return m.LastState(ni)
}

// snapshotIsNewer reports whether a snapshot at index is newer than the
// replica's newest: the one of an earlier update of this call if any, else
// the one m remembers.
func (c *Call) snapshotIsNewer(m Memory, ni raftio.NodeInfo, index uint64) (bool, error) {
	for i := len(c.changes) - 1; i >= 0; i-- {
		if c.changes[i].Replica == ni && c.changes[i].SetSnapshot {
			return index > c.changes[i].Snapshot, nil
		}
	}
	cur, err := m.SnapshotIndex(ni)
	if err != nil {
		return false, err
	}
	return index > cur, nil
}
