// Package statemachine is baton's replicated lock table: the commands, their
// compact binary encoding (many commands to one Raft entry), the
// deterministic apply that assigns fencing tokens, and the dragonboat
// on-disk state machine that keeps the table in pebble.
//
// It knows nothing of connections or time: leases are stored as a duration
// (lease_ms), and the engine turns them into deadlines on every replica when
// the Observer tells it a grant or extend was applied.
//
// # Fencing tokens
//
// Each shard keeps a counter seq, persisted with the table. A Grant that
// takes a key increments it and issues
//
//	token = seq<<ShardBits | shardID    (shardID in 1..MaxShards)
//
// Because seq only grows and is part of the replicated state (it survives
// restarts and travels in snapshots), tokens strictly increase per shard, so
// every grant of a key gets a larger token than all earlier grants of that
// key. Because the low ShardBits bits are the shard id, two shards can never
// issue the same token, and no token is 0 (which Release uses for "any
// holder").
//
// seq's top EpochBits bits are its restore epoch (so are a token's top
// bits): 0 in a cluster bootstrapped fresh, and one more after each restore
// from a backup, which starts every shard at the first seq of the epoch
// above the backup's (RestoreBackup; "Restore epochs" in backup.go). So the
// tokens of a restored cluster are above every token the backed-up one
// issued, even after the backup. Within an epoch seq counts 2^46 grants
// per shard.
//
// # Owners
//
// A Grant may name its owner (protocol version 1.1): the owner is stored
// with the grant and leaves the table with it (Release, Expire). A Grant of
// a key held by a grant with the same owner is that grant's retry, whose
// answer the client lost: it is answered Regranted with the holder's token
// and changes nothing (no token is issued, the lease is not touched), so
// that the retry gets its own grant back instead of waiting behind it. A
// Grant without an owner, or with another one, finds the key held as
// before (GrantRejected).
//
// # Shared holds
//
// From cluster version LevelShared on (protocol version 1.4), a Grant may
// be shared: with Permits (1..MaxPermits) it asks for one of Permits
// shared holds of its key. A key then has no holder, one exclusive holder,
// or from 1 to permits shared holders, each a grant of its own: its own
// token (issued as for any grant, from seq), lease, owner and slot (see
// Table). The table decides, deterministically:
//
//   - A shared Grant of a free key makes the key shared, with the Grant's
//     permits, and grants it: Granted, a new token.
//   - A shared Grant of a shared key whose owner (not empty) is the owner
//     of one of the key's shared grants is that grant's retry: Regranted
//     with its token, nothing changes (the lease is not touched),
//     whatever permits it names. Otherwise, if its permits are not the
//     key's: PermitsMismatch; if fewer than permits hold the key: Granted,
//     a new token; else GrantRejected. Nothing changes but on Granted.
//   - Owners keep to one kind (no upgrade or downgrade in place): a shared
//     Grant of a key held exclusively by its owner, or an exclusive Grant
//     whose owner holds one of the key's shared grants, is KindMismatch;
//     any other Grant of a key held in the other kind is GrantRejected.
//   - A Release with a token, an Extend and an Expire act on the grant
//     with that token only, shared or exclusive, as they always did; a
//     shared key whose last holder leaves is free. A Release without a
//     token of a shared key releases every shared holder, in token order:
//     Released, Token 0, Slot the key's header row, and Table.Freed lists
//     the slots of the grants it ended.
//   - Below LevelShared a shared Grant changes nothing (NotEnabled), and so
//     does every other command of its batch (see "Cluster version").
//
// A shared key is kept as a header row (the key's own row, in the index;
// no token, no lease) and one row per shared grant (not in the index: it
// names its header's slot instead of key bytes), and an index of the
// key's holders by token and by owner, so that no command scans the
// holders (a key may have MaxPermits of them). An exclusive lock costs
// exactly what it did: its row is unchanged, and the shared keys' state
// lives aside, as owners do.
//
// # The fence
//
// dragonboat forwards a proposal made on a follower to the leader, which
// appends it like its own. So a node that lost its leadership without
// knowing yet (it was paused, or cut off) can still get a batch into the
// log, decided from a view that has gone stale: the release of a grant it
// thinks nobody took, say, while the new leader has given that grant back
// to its owner's retry. The table keeps such batches out. Each new leader
// proposes a fence (an entry without commands whose header has Fence set)
// before it serves, and the table remembers the fence's proposer; from then
// on a batch of any other proposer is answered Fenced, every command of it,
// and changes nothing, until the next fence. A node's batches therefore
// take effect only between its own fence and the next one, and every one of
// them was decided from a view that held every batch that took effect
// before it: the node applied everything up to its fence, and after it
// nobody else's batch took effect. The engine treats a Fenced batch of its
// own as one Raft dropped, and a fence of another proposer as the end of its
// leadership. The fence's proposer is part of the table's state (fence,
// 0 before the first fence, when every batch applies), persisted in the
// meta and carried in snapshots, so that every replica decides alike after
// a restart or a snapshot recovery.
//
// # Encoding of an entry
//
// One Raft entry carries one Batch, little endian:
//
//	header (21 bytes, fixed so that Seal can patch it in place):
//	  version  u8   (1, or 2 if a command is an owned Grant, 8 if one is
//	                a shared Grant; 3: a fence, 4: a hand-off request,
//	                5: a level report, 6: a raise, 7: a directory write)
//	  proposer u64  (not 0 in a fence; a Raft replica id in versions 4
//	                to 7)
//	  seq      u64  (the level, not 0, in versions 5 and 6; the base
//	                directory version in version 7)
//	  count    u32  number of commands that follow (0 in versions 3 to 7)
//	version 7 only, after the header:
//	  bloblen  uvarint, 1..MaxDirectory
//	  blob     bloblen bytes
//	count times:
//	  op       u8   wire op: OpGrant..OpExpire, or 5 (owned Grant,
//	                versions 2 and 8 only), or 6 (shared Grant, version 8
//	                only)
//	  keylen   uvarint, 1..MaxKeyLen
//	  key      keylen bytes
//	  Grant:   lease_ms uvarint (a Grant without an owner)
//	  5:       lease_ms uvarint, then
//	           ownerlen uvarint, 1..MaxOwnerLen
//	           owner    ownerlen bytes
//	  6:       permits uvarint, 1..MaxPermits
//	           lease_ms uvarint
//	           ownerlen uvarint, 0..MaxOwnerLen (0: no owner)
//	           owner    ownerlen bytes
//	  Release: token uvarint (0 = whoever holds the key)
//	  Extend:  token uvarint, lease_ms uvarint
//	  Expire:  token uvarint
//
// Version 1 is the encoding from before owners, and version 2 is version 1
// plus wire op 5, a Grant with an owner; it decodes to an OpGrant Command
// with Owner set. Seal writes version 2 if and only if the batch has a
// Grant with an owner (and no shared Grant, which makes it version 8),
// and DecodeBatch rejects a version 2 entry without one, as it rejects
// op 5 in version 1: so each batch has exactly one
// encoding, and the entries of a cluster in which no client names an
// owner are version 1, which a replica not yet upgraded applies as it
// always did (see Seal for what an owned Grant does to one). DecodeBatch
// reads both, because a replica applies again, after a restart, the entries
// its log kept from before the upgrade, and a leader not yet upgraded still
// writes version 1. Varints must be minimal and lease_ms must fit in 32
// bits; nothing may follow the last command.
//
// Version 3 is a fence (see "The fence"): the header alone, with count 0
// and a proposer other than 0 (the table's fence is 0 before the first
// one); it decodes to a Header with Fence set. Seal writes version 3 if and
// only if its Header has Fence set, and DecodeBatch rejects a version 3
// entry with commands, so a fence too has one encoding. The barrier the
// engine proposes before it serves is now the fence. A version 1 entry
// with zero commands, the barrier of the release before the fence, is
// still valid: it decodes to a Header without Fence and applies as an
// entry without commands, which changes nothing and is not a fence.
//
// Version 4 is a hand-off request: the header alone, with count 0 and, as
// its proposer, the Raft replica id (not 0) of the node that asks the
// shard's leader to hand the shard over to it; it decodes to a Header with
// HandOff set. It changes nothing in the table (not even for the fence:
// it has no commands to keep out), so only the engine, which acts on it
// as the leader, tells it from an entry without commands; a replica of a
// release before it skips it as undecodable and stays in step.
//
// Versions 5 and 6 are a level report and a raise of the cluster version
// (see "Cluster version"): the header alone, with count 0, the replica id
// that reports or raises as the proposer and the level in the seq field;
// they decode to a Header with Report or Raise set and Level the level
// (Seq 0). A report changes nothing in the table; a raise only its
// cluster version. A replica of level 1 skips both and stays in step.
//
// Version 8 is version 2 plus wire op 6, a shared Grant (see "Shared
// holds"): it decodes to an OpGrant Command with Permits set (and Owner,
// if its owner length is not 0). Seal writes version 8 if and only if the
// batch has a shared Grant, whatever its owners, and DecodeBatch rejects
// op 6 in any other version and a version 8 entry without one: each
// batch keeps exactly one encoding, and a batch without a shared Grant
// is written as before. A replica of level 3 rejects version 8 as
// unknown and skips the entry whole; below LevelShared a version 8 entry
// changes nothing, every command of it answered NotEnabled, so that such
// a replica stays in step (see FeatureLevel).
//
// Version 7 is a directory write (see "Directory"): the header, with
// count 0, the proposing node's replica id as the proposer and the base
// version in the seq field, then the blob, which ends the entry; it
// decodes to a Header with Directory set, Base the base (Seq 0) and Blob
// the blob. A replica of level 2 skips it and stays in step, as a
// directory write changes nothing below LevelMembership.
//
// # Cluster version
//
// Every build has a FeatureLevel: the newest formats of the log, the
// snapshots, the Raft transport and the data dir it knows. Each shard's
// table has a cluster version, 1 until a raise applies and then the
// highest level raised to, never lowered; it is replicated (a raise is a
// log entry) and kept in the meta and the snapshot stream from 2 on.
// Whatever a build of an older level could not read, or would apply
// differently, is written only once the shard's version allows it: so a
// cluster is upgraded one node at a time, each node running a mix of old
// and new builds until the last voter is upgraded and the version raised.
// The engine decides when to raise (a node reports its level in every
// shard; the leader raises once every voter has reported); this package
// only applies the raise, and refuses to open a data dir or a snapshot of
// a version above its FeatureLevel (ErrTooOld, StoredClusterVersion).
// FeatureLevel's doc lists what each level brings: level 3 the
// directory (LevelMembership), level 4 shared holds (LevelShared: entry
// version 8, snapshot stream version 6, the shared rows of "Pebble
// layout"; below it a batch with a shared Grant changes nothing).
//
// # Directory
//
// Each shard's table has a directory: an opaque blob, for the engine
// (which keeps the cluster's membership in shard 1's), and a version
// that counts the writes that took, 0 while it was never set
// (Table.Directory). It is Raft state like the locks: written only by
// directory writes (SealDirectory, entry version 7), kept in the
// checkpoint and in the snapshot stream, so that every replica has the
// same directory at the same index, after a restart or a snapshot
// recovery too. A write is a compare-and-set: it takes if and only if
// the table's cluster version is LevelMembership or more and its Base is
// the directory's version, and then the directory is its blob and the
// version one more; otherwise nothing changes, and the proposer learns
// that from the version it reads after its write's Applied. The
// compare-and-set, not the fence, orders the writes of different nodes
// (a directory write is never Fenced), and a write changes no lock.
// Below LevelMembership a write changes nothing, because a replica of
// level 2 may still be in the shard, and it skips version 7 entries.
// Backups carry the directory, and a restore drops it (RestoreBackup).
//
// # Pebble layout
//
// All shards of a node share one pebble DB (see OpenDB):
//
//	't' shard(u32 BE) key  ->  token u64 LE, lease_ms u32 LE, owner       the lock table
//	                           or 0 u64, permits u32 LE                   (a shared key's header)
//	'g' shard(u32 BE) keylen(u8) key token(u64 BE)
//	                       ->  token u64 LE, lease_ms u32 LE, owner       a shared grant of key
//	'm' shard(u32 BE)      ->  applied u64 LE, seq u64 LE, fence u64 LE  the shard's meta
//	                           [, cluster version u64 LE]
//	'd' shard(u32 BE)      ->  directory version u64 LE, blob             the shard's directory
//
// A key held by shared grants (see "Shared holds") has its header under
// 't', where an exclusive lock's row would be: token 0 (which no grant
// has), its permits (1..MaxPermits) where the lease is, no owner (12
// bytes). Each of its grants has a row under 'g', by key length, key
// and token, valued as an exclusive lock's row, the token again first. A
// prefix of their own rather than a suffix of the key: the table's keys
// may be any bytes, so no suffix could tell a grant's row from another
// key's; the length first keeps each key's grants one range, in token
// order. The key's row under 't' is the key's whatever holds it, so a key
// that changes kind between checkpoints gets its row overwritten, as a
// ghost is, and the checkpoint deletes a freed grant's row as it deletes a
// freed key's. A header has at least one grant and at most permits, and a
// key's grants have distinct owners; Open refuses a table that breaks
// that, or has shared rows below LevelShared. A build of level 3 never
// sees them: the shard's meta says version 4 by then, and such a build
// refuses it (ErrTooOld); and it would refuse a header (token 0) as a row
// with a token the shard did not issue. The shard's rows are then two key
// ranges, 't' and 'g', which a snapshot recovery, a restore and Open's
// drop of orphan rows each delete together.
//
// The directory's row is absent while its version is 0 (a table that
// never had a directory, or one below LevelMembership, and every data
// dir from before it, which therefore opens as it is). Its blob is
// 1..MaxDirectory bytes. It is part of the checkpoint: written in the
// checkpoint's batch, with the meta, by the first checkpoint after it
// changed (it changes seldom, so the others do not write it again),
// dropped and written with the meta by a snapshot recovery, dropped
// with the rows of a shard without a meta, and never written by a
// restore. A build of level 2 never sees one: the shard's meta says
// version 3 by then, and such a build refuses it (ErrTooOld).
//
// A row's owner is the rest of its value, 0..MaxOwnerLen bytes (none: the
// value is 12 bytes). That is also the row of a table written before owners
// existed, so such a data dir opens as it is, every lock without an owner;
// a binary from before owners refuses a row with one (a corrupt row) rather
// than drop its owner.
//
// The meta's fence is the proposer of the latest fence applied (0: none).
// Every checkpoint writes the meta with it (24 bytes); the meta of the
// release before the fence is 16 bytes, without it, and Open reads that as
// fence 0, so a data dir from before the fence opens as it is. A meta of
// any other length is an error. A binary from before the fence refuses a
// 24-byte meta ("meta is 24 bytes, want 16") and does not open the shard.
//
// From cluster version 2 on, the meta has the version after the fence (32
// bytes); a table of version 1 keeps the 24 bytes, so that a build of
// level 1 opens the data dir until its shards are raised. A build of
// level 1 refuses a 32-byte meta ("meta is 32 bytes, want 24"), and a
// later build one of a version above its own (ErrTooOld).
//
// The big-endian shard id keeps each shard's table (and its shared grants)
// one contiguous key range, so a shard can be scanned or dropped
// (DeleteRange) on its own.
//
// Pebble holds a checkpoint of the table: the rows of the keys held at some
// applied index, the meta with that index, seq and fence, and the
// directory. Update
// applies to the in-memory table only and remembers which keys changed; a
// checkpoint writes those rows (deletes for the keys freed since) and the
// meta in ONE pebble batch. Checkpoints are written at Sync, Close and PrepareSnapshot
// (fsynced but the last), and by Update once 65,536 keys have changed or a
// million commands have applied since the last one. The Raft log is the
// durable record of everything after the checkpoint: dragonboat compacts
// the log only up to an index it has called Sync at, and Open returns the
// checkpoint's index, from which dragonboat applies the log again. So a
// lock granted and released between two checkpoints, which is most locks
// under load, costs pebble nothing; measured with BenchmarkUpdate, apply
// went from 1.5 to 10.8 million commands per second when Update stopped
// writing a pebble row per command. A shard's meta is present if and only
// if its table is complete: Open treats rows without meta as the remains of
// an interrupted snapshot recovery and drops them.
//
// # Snapshot stream
//
//	header:  magic "btsn", version u8 (6 if the table's cluster version
//	         is LevelShared or more, else 5 if it is LevelMembership or
//	         more, else 4 if it is 2 or more, else 3 if it has a fence,
//	         else 2 if a lock has an owner, else 1),
//	         shard u32 LE, applied u64 LE, seq u64 LE,
//	         then in version 3: fence u64 LE (not 0), in versions 4 to
//	         6: fence u64 LE (0: none), cluster version u64 LE (2 or
//	         more; 3 in version 5, 4 or more in version 6, less in
//	         version 4), then in versions 5 and 6: directory version
//	         u64 LE, bloblen uvarint (0..MaxDirectory), blob (0 and 0:
//	         never set; else neither)
//	records: keylen uvarint (1..MaxKeyLen), key, token uvarint,
//	         lease_ms uvarint, then from version 2 on: ownerlen uvarint
//	         (0..MaxOwnerLen, 0: no owner), owner, then from version 6
//	         on: permits uvarint (0: an exclusive lock, else
//	         1..MaxPermits: a shared grant); one record per grant, in key
//	         order, a shared key's grants in token order
//	trailer: 0x00 (a keylen no record has), record count u64 LE,
//	         CRC-32C u32 LE of every byte before it
//
// Version 1 is the stream from before owners. Like Seal, SaveSnapshot
// writes version 2 only if a lock has an owner, and RecoverFromSnapshot
// rejects a version 2 stream in which none has: one encoding per table,
// and a node of the release before owners (which rejects version 2) could
// recover from a snapshot of the next as long as no client named an owner.
// A version 1 stream (from an older node, or one dragonboat kept on disk)
// is read as locks without owners.
//
// Version 3 is the stream of a table with a fence: SaveSnapshot writes it
// if and only if the table's fence is not 0, whether or not a lock has an
// owner (its records are version 2's, with no owner required), and
// RecoverFromSnapshot rejects a version 3 stream whose fence is 0: one
// encoding per table again. A table without a fence (a cluster in which no
// leader has proposed one yet) is streamed exactly as before, in version 1
// or 2. RecoverFromSnapshot takes the stream's fence (0 for versions 1 and
// 2) as the table's and writes it to the meta.
//
// Version 4 is the stream of a table whose cluster version is 2 or more,
// with or without a fence or owners; a table of version 1 is streamed as
// before (1, 2 or 3), so that a node of level 1 can recover from it. A
// version 4 stream of version 1 or less is rejected (one encoding per
// table), and one of a version above FeatureLevel is refused (ErrTooOld).
//
// Version 5 is the stream of a table whose cluster version is
// LevelMembership or more: version 4 and the table's directory (see
// "Directory"), which RecoverFromSnapshot takes as the table's, replacing
// the one it had, in memory and in pebble. A table below LevelMembership
// is streamed as before (version 4 or less), so that a node of level 2
// can recover from it; a version 5 stream of a cluster version below
// LevelMembership is rejected, and so is a version 4 stream of one at or
// above it (one encoding per table).
//
// Version 6 is the stream of a table whose cluster version is LevelShared
// or more, whether or not a key is shared: version 5 and a permits field
// in every record, a shared key's grants one record each (no header: the
// permits of its records are its own), consecutive, in strictly
// increasing token order, all with the same permits, at most permits of
// them, each owner once; RecoverFromSnapshot rejects a stream that breaks
// that. A table below LevelShared is streamed as before (version 5 or
// less), so that a node of level 3 can recover from it; a version 6
// stream of a cluster version below LevelShared is rejected, and so is a
// version 5 stream of one at or above it (one encoding per table). A
// build of level 3 refuses a version 6 stream as "unknown version 6", as
// a build of level 2 refuses version 5; it never has to recover from one
// while it takes part, as a shard is raised to LevelShared only once
// every voter runs a build of level 4.
//
// Mixing releases across the fence is not supported: a node of the
// release before it rejects version 3 entries (it skips them, so it would
// apply the batches a fence keeps out, and its table would part from the
// others'), version 3 snapshot streams ("unknown version 3") and the
// 24-byte meta its own data dir gets once it has run this release ("meta
// is 24 bytes, want 16"). Upgrade a cluster to the fence by stopping every
// node, upgrading all of them, and starting them again; a data dir and a
// log of the release before open as they are (no fence: every batch
// applies until the first fence).
//
// RecoverFromSnapshot reads and checks the whole stream before it touches
// pebble, so a truncated or corrupt stream is an error that leaves the
// existing table as it was.
//
// # Backups
//
// A backup (WriteBackup, for a node's GET /backup) is a file of package
// backup with one part per shard, each part the shard's snapshot stream
// above, of the in-memory table as Lookup(BackupQuery{}) copied it: so
// from LevelMembership on, a part (version 5) carries the shard's
// directory, and from LevelShared on (version 6) its shared grants, each
// counted as a lock. RestoreBackup writes such a file into the lock table
// of a new node, as the tables of a new cluster: applied index 0, the
// first seq of the next restore epoch, fence 0, cluster version 1 (but
// LevelShared for a shard that holds a shared grant: the lowest version
// that can hold one), no directory (a new cluster has new members;
// BackupInfo.Directory shows the old ones; see RestoreBackup). Every grant
// keeps its token, shared ones too.
//
// # Memory and concurrency
//
// Each shard's state machine keeps its whole table in memory, so Update
// never reads pebble, and keeps each held key once, compactly (apply.go):
// the key's bytes in an arena of append-only chunks (arena.go), its row
// (token, lease, the key's place in the arena; 16 bytes) in a slab by
// slot, and an open-addressed hash from key to slot (index.go: 8 bytes an
// entry, at most 3/4 full). None of them holds a Go pointer per key, so the
// GC scans almost nothing of a big table; measured with 1,000,000 locks
// held, the table is about 55 bytes per lock of 17-byte keys. Owners are
// kept aside from the rows, for the rows that have one, so that a lock
// without an owner costs nothing for them; so are shared keys (see
// "Shared holds"): a shared grant is a row of 16 bytes, without key
// bytes or an index entry, plus its entry in its key's holder index (a
// map by token, and one by owner for the grants with one). The arena reclaims freed key
// bytes a chunk at a time: a chunk other than the tail that falls below
// half live has its live keys copied to the tail and is dropped, so the
// arena stays under twice its live bytes plus a chunk, and one compaction
// moves at most a chunk (64 KiB). The set of keys changed since the
// checkpoint is flags on the rows and a list of their slots; a key the
// checkpoint has and that was released since stays in the index as a
// ghost row (not held) until the checkpoint has written its delete.
//
// The table is also the engine's view of the shard's locks (Table, which
// the Observer reads), so it is guarded by two locks. The Observer's
// (Observer.Locker) keeps the observer's reads apart from every change:
// Update holds it from the change of each entry to the end of its Applied,
// a checkpoint while it drops ghost rows, Open and RecoverFromSnapshot
// while they swap the table in and call Reset. The state machine's own
// read-write mutex, taken inside the observer's, keeps dragonboat's Lookup
// (which may run while Update or RecoverFromSnapshot does) apart from the
// same changes: Lookup reads under its read lock, which is never held
// while pebble is written. Lookup returns ErrClosed after Close. Key bytes
// never change once written (a chunk is only appended to), so the slices
// that Reset's Table and backups hand out stay valid however long they are
// kept.
package statemachine

import "sync"

// MaxShards is the largest shard id: a token carries its shard id in its low
// ShardBits bits, so tokens of different shards never collide.
const (
	ShardBits = 10
	MaxShards = 1<<ShardBits - 1
)

// MaxKeyLen is the longest key a command may carry (the protocol's limit).
const MaxKeyLen = 250

// MaxOwnerLen is the longest owner a Grant may carry (the protocol's limit).
const MaxOwnerLen = 64

// MaxPermits is the most permits a shared Grant may name (the protocol's
// limit): a shared key has at most this many holders at once.
const MaxPermits = 1_000_000

// Op is a replicated command's kind.
type Op uint8

// Commands.
const (
	OpGrant   Op = 1 // Grant{Key, LeaseMs, Owner, Permits}: take a free key (or, with Permits, one of a shared key's permits), assign a new token
	OpRelease Op = 2 // Release{Key, Token}: Token 0 releases whoever holds Key (every shared holder)
	OpExtend  Op = 3 // Extend{Key, Token, LeaseMs}
	OpExpire  Op = 4 // Expire{Key, Token}: the leader saw the lease run out
)

// Command is one replicated command. Key and Owner alias the encoded entry
// when decoded; Batch.Append copies them.
type Command struct {
	Op      Op
	Key     []byte
	Token   uint64
	LeaseMs uint32
	// Permits is 0 for an exclusive Grant; 1..MaxPermits makes the Grant
	// a shared one, for one of Permits shared holds of the key (protocol
	// version 1.4; see "Shared holds" in the package doc). Other ops do not
	// carry it: Batch.Append ignores it and DecodeBatch leaves it 0. (Next
	// to LeaseMs, in what was padding: a Command is the 72 bytes it was.)
	Permits uint32
	// Owner names the Grant's owner, 0..MaxOwnerLen bytes (empty: none); a
	// retry of the Grant with the same owner is Regranted. Other ops do not
	// carry it: Batch.Append ignores it and DecodeBatch leaves it nil, as
	// they do a Grant's Token. A decoded Grant without an owner has a nil
	// Owner.
	Owner []byte
}

// Code is the outcome of one command.
type Code uint8

// Outcomes.
const (
	Granted       Code = 1 // Grant took the key; Result.Token is the new token
	GrantRejected Code = 2 // Grant found the key held (shared: every permit taken), and not by the Grant's owner; nothing changed
	Released      Code = 3 // Release freed the grant (without a token: every grant of the key)
	NotHeld       Code = 4 // Release/Extend found no matching holder; nothing changed
	Extended      Code = 5 // Extend set the lease
	Expired       Code = 6 // Expire freed the grant (token matched)
	Noop          Code = 7 // Expire found no matching holder, or an unknown op
	Regranted     Code = 8 // Grant found the key held by its owner, or one of its shared grants (a retry); Result.Token is that grant's; nothing changed
	Fenced        Code = 9 // the batch's proposer does not hold the fence: no command of the batch changed anything
	// NotEnabled: the batch has a shared Grant and the table's cluster
	// version is below LevelShared; no command of the batch changed
	// anything (a replica of level 3 skips the whole entry).
	NotEnabled Code = 10
	// PermitsMismatch: a shared Grant named other permits than the key's
	// shared holders have; nothing changed.
	PermitsMismatch Code = 11
	// KindMismatch: a Grant's owner holds the key, but in the other kind
	// (a shared Grant of an owner that holds the key exclusively, or an
	// exclusive Grant of an owner that holds one of its shared grants);
	// nothing changed.
	KindMismatch Code = 12
)

// Result is the outcome of one command, in the order of the batch. It is
// comparable (==).
type Result struct {
	Code Code
	// Token is, for Granted, the new token; for Regranted and Extended,
	// the grant's token; for Released and Expired, the freed grant's
	// token, and 0 for a Release without a token of a shared key (it
	// freed every shared grant: Table.Freed lists them).
	Token uint64
	// Slot is the table's row of the grant the command is about (see
	// Table) for the codes that name one: Granted, Regranted, Extended,
	// Released and Expired (the row the grant was freed from); 0 for the
	// others. A shared grant has a row of its own, so Slot is that
	// grant's. A Release without a token of a shared key names the key's
	// header row (Table.Find's slot, which is no grant) and its freed
	// grants are Table.Freed's. A row freed by an entry is not reused
	// before the entry's Applied returns, so within one entry a slot
	// names one grant.
	Slot uint32
}

// Header identifies a batch's proposer, so that the proposing node can pair
// an applied entry with the requests waiting for it. Proposer is random per
// process start; Seq grows per proposal.
//
// Fence marks a fence: an entry without commands by which a new leader
// claims the table (see "The fence" in the package doc). From a fence on,
// the table applies only batches of the fence's Proposer; any other
// proposer's batch is answered Fenced and changes nothing. A fence has no
// commands and its Proposer is not 0 (Seal panics otherwise).
//
// HandOff marks a hand-off request: an entry without commands by which
// the node whose Raft replica id is Proposer (not a process's random
// proposer here) asks the shard's leader to hand the leadership over to
// it. It changes nothing in the table. It has no commands, its Proposer is
// not 0, and it is not a fence (Seal panics otherwise).
//
// Report marks a level report: an entry without commands by which the node
// whose Raft replica id is Proposer says that its build supports cluster
// versions up to Level (its FeatureLevel). Raise marks a raise: the
// shard's cluster version becomes Level, if it was lower (a version is
// never lowered). Proposer is the replica id of the leader that raises.
// Neither changes a lock; both have no commands, a Proposer and a Level
// that are not 0, and are neither a fence nor a hand-off request (Seal
// panics otherwise). See "Cluster version" in the package doc.
//
// Directory marks a directory write (SealDirectory): the shard's
// directory becomes Blob if its version is Base when the entry applies
// and the table's cluster version is LevelMembership or more; otherwise
// nothing changes. Proposer is the replica id of the node that proposes
// it (not 0); Base is encoded in the seq field (Seq is 0); Blob is
// 1..MaxDirectory bytes and, decoded, aliases the entry: it is valid
// during the Applied call only. See "Directory" in the package doc.
//
// Size is not encoded: Update sets it to the entry's size in the Raft log
// (its command's bytes) before it tells the observer, which may bound the
// log by bytes with it.
type Header struct {
	Proposer uint64
	Seq      uint64
	Fence    bool
	HandOff  bool
	Report   bool
	Raise    bool
	Level    uint64 // Report, Raise: the level (encoded in the seq field; Seq is 0)
	// Directory, Base and Blob: see above. A Header is not comparable
	// (==) because of Blob; compare the fields that matter.
	Directory bool
	Base      uint64 // Directory: the directory version the write replaces (encoded in the seq field; Seq is 0)
	Blob      []byte // Directory: the new directory, 1..MaxDirectory bytes
	Size      int
	// shared marks an entry of version 8, a batch with a shared Grant:
	// DecodeBatch sets it, so that applyBatch knows without a look at
	// every command; Seal ignores it (Append's commands decide).
	shared bool
}

// kinds counts the entry kinds h is marked with; a batch of commands is
// none of them, and every other entry exactly one.
func (h Header) kinds() int {
	n := 0
	for _, k := range [...]bool{h.Fence, h.HandOff, h.Report, h.Raise, h.Directory} {
		if k {
			n++
		}
	}
	return n
}

// Lock is one grant as the table stores it: an exclusive lock, or one
// shared grant of a shared key (Key is then the key's, and the key has one
// Lock per shared grant).
type Lock struct {
	Key     []byte
	Token   uint64
	LeaseMs uint32
	// Permits is 0 for an exclusive lock, and the key's permits for a
	// shared grant.
	Permits uint32
	Owner   []byte // the grant's owner; nil if it has none
}

// Observer learns, on every replica and in log order, what the table did,
// and may read the table itself (Table) under the lock it names for it.
// Calls for one shard never overlap; calls for different shards may.
// Byte slices are valid only during the call, and are read-only.
type Observer interface {
	// Locker returns the lock that guards shardID's table against the
	// observer: the state machine holds it whenever it changes the table
	// (Update, from the change of each entry to the end of its Applied; a
	// checkpoint, while it drops the rows it wrote deletes for; Open and
	// RecoverFromSnapshot, while they swap the table and call Reset), and
	// never while it waits for pebble. The observer reads the Table only
	// under it, and so sees a table whose every change it has been told
	// of. Reset and Applied are called with it held: they must not take it.
	// It is asked once per call that needs it; the same lock each time.
	Locker(shardID uint64) sync.Locker
	// Reset says the shard's table was (re)loaded wholesale, by Open or by
	// RecoverFromSnapshot: forget what you knew of the shard and read t to
	// learn every lock it holds now. t is the shard's table from now on,
	// until the next Reset (a table Close dropped is never changed again).
	Reset(shardID uint64, t Table)
	// Applied reports one applied entry: its header, commands and results
	// (results[i] belongs to cmds[i]). It is called after the entry's
	// changes are in the in-memory table (pebble gets them with the next
	// checkpoint: see the package doc), once per decodable
	// entry, including entries with zero commands (a fence among them,
	// with h.Fence set, and a directory write, with h.Directory set,
	// whether it took or not: the table's Directory says) and batches
	// the fence kept out (every result
	// Fenced); undecodable entries are not reported. Command.Key and
	// Command.Owner alias the Raft entry. The table is the entry's end
	// state: a key the entry changed twice shows the second change while
	// Applied reads the first one's result. A Release without a token of
	// a shared key ends several grants: Table.Freed(i) lists their slots
	// for results[i], during this call.
	Applied(shardID uint64, index uint64, h Header, cmds []Command, results []Result)
}

// LookupKey is the query type the state machine's Lookup accepts: it answers
// a LookupResult for that key from the committed table.
type LookupKey []byte

// LookupResult answers a LookupKey. For an exclusively held key, Token,
// LeaseMs and Owner are its grant's and Permits and Holders are 0; for a
// key held by shared grants, Permits is the key's permits, Holders the
// number of its shared grants (1..Permits), and Token, LeaseMs and Owner
// are zero (each grant has its own: Table). A free key is all zero.
type LookupResult struct {
	Held    bool
	Token   uint64
	LeaseMs uint32
	// Owner is the grant's owner ("" if none). A string, so that the result
	// stays comparable; it is the table's own (immutable) copy.
	Owner string
	// Permits and Holders describe a shared key (see above).
	Permits uint32
	Holders uint32
}
