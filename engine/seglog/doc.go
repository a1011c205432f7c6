// Package seglog is baton's Raft log store for dragonboat (a raftio.ILogDB)
// made of append-only segment files and an in-memory index, set through
// NodeHostConfig.Expert.LogDBFactory = &seglog.Factory{}.
//
// # Why not dragonboat's store
//
// Dragonboat's default store (internal/logdb, on pebble) syncs every
// SaveRaftState, including the many whose only change is the commit index.
// On a three-node cluster that is about six device flushes per request
// instead of three: each replica flushes once for the entry and once more
// for the commit index that follows it, and since a step worker saves
// synchronously, the next requests' entries wait behind that second flush.
// Raft does not need it. The commit index is volatile state in Raft (the
// Raft paper's figure 2 lists only currentTerm, votedFor and the log as
// persistent), etcd's raft does not sync for a commit-only change
// (MustSync), nor does dragonboat's own tan store.
//
// This store keeps the semantics of dragonboat's default store (each
// method's documentation names the few deliberate differences) and changes
// when it syncs. And it does without pebble: no memtable inserts, flushes
// or compactions of entries that are deleted soon after they are written,
// which cost baton's earlier pebble store with this sync policy
// (engine/raftlog, removed since: BENCHMARKS.md, "Tried and not kept")
// 10-30 % of a node's CPU under load.
//
// # Sync policy
//
// Decided by engine/internal/savecall, so that the rules live in one place:
// SaveRaftState writes each call as one record, synced (fdatasync) before
// it returns when any update has entries to save, a snapshot, or a State
// whose Term or Vote differs from the last State saved for that replica
// (or none was saved since the store was opened); otherwise, when every
// State change is a commit index only, it is written but not synced. Every
// other write (bootstrap records, SaveSnapshots, ImportSnapshot,
// RemoveNodeData, RemoveEntriesTo) is synced, and so is every segment
// switch.
//
// An unsynced record does not stay at risk for long: the log is one sequential file at a time, a sync
// covers everything written to the file before it, and a segment is synced
// before the next one is started. So once any later synced write returns
// (the next entry of any replica of the NodeHost, a term change, a
// bootstrap record), every earlier unsynced one is durable too.
//
// Losing a commit-only record (to a power loss, or a crash before it was
// written out) is safe:
//
//   - The entries it declares committed are durable: a replica's commit
//     index never exceeds the entries it holds, and those were saved by an
//     earlier synced call, or by this very record, which is then synced
//     because it has entries.
//   - The term and vote it carries are durable: a State whose term or vote
//     changed is always synced, so an unsynced State repeats the term and
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
// Nothing in the file layout changes that reasoning: a record is applied to the index in log
// order, and the log read back after a power loss is a prefix of the log
// written (the reader stops at the first invalid record of the last
// segment, and every earlier segment was synced whole).
//
// Concurrent saves share syncs (group commit): appends to the active
// segment are serialised by a mutex, and a save that needs a sync while
// another goroutine syncs waits for the next sync, which covers every
// record written by then.
//
// # Files
//
// The store is one log per NodeHost, shared by all shards and replicas, in
// DirName under the NodeHost's directory (or its WAL directory). Segments
// are fixed-size files (segmentSize, 64 MiB) named by sequence number. Each
// new segment is written full of zeros and synced, and the directory
// synced, before its first record: an fdatasync after a write that grows a
// file (or fills fallocated blocks) must write the inode too, which
// measured here as 3 device writes and 330-530 µs per sync instead of 2 and
// 170-210 µs (see durable.CreateZeroed). A record that does not fit in what
// is left of a segment starts a new one; a record larger than a segment
// gets a segment of its own, sized to fit. Segments whose entries are all
// dead are retired at the next segment switch (see CompactEntriesTo):
// renamed to spare-N and recycled (renamed to the next segment's name and
// overwritten) rather than deleted, up to maxSpares of them. When no spare
// is left, one is zero-filled in the background, so that a switch on the
// save path does not write 64 MiB while holding the append mutex.
//
// Records (record.go) have a header of a CRC-32C, a length, the segment's
// sequence number and a type, then ops, whose data are the pb types' own
// encodings. The reader of a segment stops at the first record whose CRC
// fails, whose length is 0 or does not fit, or whose sequence number is not
// the segment's (zeros, or a recycled file's old records).
//
// Every segment starts with a checkpoint record: every replica's bootstrap,
// State, newest snapshot, max index and removal points, and the older
// segments that still hold live entries with the offset each ends at. So
// older segments are needed only for their entries, and a segment that
// holds none can go. Open (recovery.go) replays the live segments in order
// and rebuilds the index; an invalid record before an older segment's
// recorded end is corruption, and Open fails naming the file and offset;
// in the last segment it is the end of the log. Open never appends to the
// last segment: it syncs it (a crash leaves unsynced records in the page
// cache, and Open read them) and starts a new one, whose checkpoint records
// where the last one ended, so a torn tail is never overwritten nor read
// again.
//
// A segment is retired only when every entry in it is dead, so a replica
// whose entries stay live for long (a shard that writes little, and so is
// rarely snapshotted) would keep every segment holding one of them. At each
// switch, the live entries of older segments that are mostly dead (at most
// an eighth of a segment live) are copied forward into the new segment,
// right after its checkpoint (relocation.go, bounded per switch); those
// segments then hold nothing live and the next switch retires them.
//
// # Index
//
// In memory (index.go), each replica has its metadata and, for each entry,
// its segment, offset and length, in runs of consecutive indexes
// (runs.go). IterateEntries reads the entries back with pread. Entries
// above the max index are kept but never returned (dragonboat's rule for a
// suffix overwritten by a later save at lower indexes). Entries removed by RemoveEntriesTo or RemoveNodeData
// are dropped from the index, and checkpoints carry the point and position
// of the replica's last removal, so that Open drops them again when it
// replays an older segment without the retired one that removed them.
// (This is exact as long as a replica's removals do not go backwards, which
// dragonboat's never do: they follow its snapshots.)
//
// CompactEntriesTo switches segments early when more segments are dead
// than spares are kept, so that a node that writes little reclaims them
// too.
//
// # Concurrency
//
// LogDB's documentation gives the lock order. Writers encode their record
// outside any shared lock (in the step worker's own buffer), then, under
// the append mutex, write it and apply it to the index; readers take only
// the index's read lock to find entries and the files' read lock while
// they pread them, so reads run alongside writes.
package seglog
