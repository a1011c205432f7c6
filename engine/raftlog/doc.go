// Package raftlog is baton's Raft log store for dragonboat: an
// implementation of raftio.ILogDB on one pebble instance per NodeHost, set
// through NodeHostConfig.Expert.LogDBFactory = &raftlog.Factory{}.
//
// # Why not dragonboat's store
//
// Dragonboat's default store (internal/logdb, also on pebble) syncs every
// SaveRaftState, including the many whose only change is the commit index.
// On a three-node cluster that is about six device flushes per request
// instead of three: each replica flushes once for the entry and once more
// for the commit index that follows it, and since a step worker saves
// synchronously, the next requests' entries wait behind that second flush.
// Raft does not need it. The commit index
// is volatile state in Raft (the Raft paper's figure 2 lists only
// currentTerm, votedFor and the log as persistent), etcd's raft does not
// sync for a commit-only change (MustSync), nor does dragonboat's own tan
// store.
//
// This store keeps the semantics of dragonboat's default store (each
// method's documentation names the few deliberate differences) and changes
// only when it syncs.
//
// # Sync policy
//
// SaveRaftState writes all the updates of a call in one pebble batch. The
// batch is committed with pebble.Sync when any update has entries to save,
// a snapshot, or a State whose Term or Vote differs from the last State
// saved for that replica (or none was saved since the store was opened);
// otherwise, when every State change is a commit index only, with
// pebble.NoSync. Every other write (bootstrap records, SaveSnapshots,
// ImportSnapshot, RemoveNodeData, RemoveEntriesTo) is synced. So whatever
// Raft must not lose (term, vote, entries, snapshots) is durable before the
// call that saves it returns. SaveRaftState's decisions (what to write,
// whether to sync) are engine/internal/savecall's, which engine/seglog
// shares, so that both stores keep to this policy by the same code.
//
// A NoSync write does not stay at risk for long. Pebble's write-ahead log is
// one sequential log: every batch is appended to it in commit order, and a
// synced commit returns only once the log is synced up to and including its
// own record, which is after every record before it. When pebble moves to a
// new WAL file it syncs the old one as it closes it. So once any later
// synced write returns (the next entry of any replica of the NodeHost, a
// term change, a bootstrap record), every earlier NoSync write is durable
// too; on a busy node that is within a round trip.
//
// Losing a commit-only update (to a power loss, or a crash before pebble
// wrote its buffer out) is safe:
//
//   - The entries it declares committed are durable: a replica's commit
//     index never exceeds the entries it holds, and those were saved by an
//     earlier synced call, or by this very batch, which is then synced
//     because it has entries.
//   - The term and vote it carries are durable: a State whose term or vote
//     changed is always synced, so a NoSync State repeats the term and
//     vote of a synced one.
//   - After a restart the replica reads an older commit index, never a
//     newer one, and learns the current one again: from the leader's
//     next heartbeat or append, or, if it becomes leader, by committing an
//     entry of its new term. Committed entries stay committed in Raft
//     whether or not one replica remembers it. A state machine that
//     persists its own applied index (baton's does) may restart ahead of
//     the commit index read back; dragonboat handles that (entries up to
//     the state machine's index are not applied to it again).
//
// # Layout
//
// One key per entry: a prefix byte, the shard id, the replica id and the
// index, all big-endian, so a replica's entries are one contiguous range in
// index order (see keys.go). State, bootstrap and max index records have
// one key per replica; snapshot records are keyed by index, the highest
// being the current one. Values are raftpb's own encodings (Marshal and
// MarshalTo, Unmarshal) of pb.Entry, pb.State, pb.Snapshot and
// pb.Bootstrap; the max index is 8 bytes, big-endian.
//
// The max index is dragonboat's rule for stale entries: it is set to the
// highest index of each save's entries (and to a snapshot's index when a
// newer snapshot is saved through SaveRaftState), so entries saved later at
// lower indexes hide the higher ones saved before, without deleting them.
// IterateEntries and ReadRaftState never look above it.
//
// # Concurrency and allocation
//
// Dragonboat calls SaveRaftState from one goroutine per step worker, with
// the worker's 1-based id. Each worker has its own batch, reused after each
// commit, and values are marshalled straight into it, so the save path
// allocates nothing in the steady state. What the store remembers per
// replica (last State, max index, newest snapshot index) is guarded by one
// mutex, held only briefly and never during I/O; cache entries change only
// after the batch that justifies them is committed. Reads run concurrently
// with writes. LogDB's documentation says which calls may overlap.
//
// # Files
//
// The store lives in DirName under the NodeHost directory; pebble's WAL goes
// to DirName under NodeHostConfig.WALDir when that is set. Pebble is opened
// with small memtables (4 MiB, at most 4 queued) and recycles its WAL files;
// every new WAL file is written full of zeros before pebble gets it
// (prefillFS), so that a WAL sync is a data-only flush from the first save
// on (see pebbleOptions and prefill.go).
package raftlog
