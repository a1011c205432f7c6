package statemachine

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble"

	"github.com/baton-dev/baton/backup"
)

// Backups: a node's tables written to a file of package backup, one part
// per shard, each part the shard's snapshot stream (see the package doc),
// and a new cluster's tables written from such a file before it starts.
//
// The file's format (package backup's version 1) did not change with the
// directory nor with shared holds: each part says its own stream version,
// a part of version 5 carries the shard's directory, and one of version 6
// its shared grants too. So every backup written before still restores as
// it did, and a backup of a cluster below LevelMembership is the same
// file as before; a build of level 2 refuses a part of version 5 ("unknown
// version 5"), and one of level 3 a part of version 6, as they would
// refuse to take part in the cluster it came from. A part's lock count
// (backup.Part.Locks, BackupInfo.Locks) counts grants: each shared grant
// is one.
//
// A shard is captured by Lookup(BackupQuery{}), on any replica (dragonboat's
// StaleRead): under the table's read lock it copies the table's locks
// (their keys alias the arena's bytes and their owners are the table's
// strings, all of which never change: not copied), its seq, fence and
// applied index. So Update waits for the copy, about 26 ms for a million
// locks in one shard on 2 busy cores (BenchmarkCaptureBackup; 60 to 80 ms
// when every key was a string of its own), and never for the allocation before it nor
// the sort and the encoding after it. The copy is the shard's applied
// state: a follower's may lag its leader's a little.
//
// The alternative, a pebble snapshot of the last checkpoint plus the keys
// changed since, would hold the lock only for those (at most
// checkpointKeys) but has to agree with checkpoints and snapshot
// recoveries that write pebble outside the lock: not worth it for a copy
// that costs this little.
//
// Restore epochs: a restore must not issue again a token that the
// backed-up cluster issued after the backup, or that a lost majority
// committed and the node backed up never applied: a resource that saw
// such a token would refuse the new holder (for a lower token) or take
// two holders at once (for the same one). Nothing in the backup says how
// far the old cluster went on after it, and a jump of the counter by a
// time-based guess would rest on a bound on the grant rate that nobody can
// prove and on clocks that may disagree. So the counter's top EpochBits
// bits count restores instead: a cluster bootstrapped fresh is in epoch 0,
// and a restore starts every shard at the first seq of the epoch after
// the highest in the backup. The old cluster, whose shards are all in that
// highest epoch or below, cannot reach the new one without 2^46 grants in
// one shard since its epoch began: its every token stays below every
// token of the restored cluster, however long it ran after the backup.
// One epoch for all the shards, rather than one each, keeps the rule
// "tokens after the n-th restore of a lineage start at n<<56" true of the
// whole cluster.

// EpochBits is the width of a token's restore epoch: its top bits, the top
// bits of the shard's counter seq, which count the restores in the lineage
// of the cluster that issued it (0: a cluster bootstrapped fresh). A
// restore starts the epoch above the backup's highest (RestoreBackup).
const EpochBits = 8

// MaxEpoch is the last restore epoch: a backup of a cluster in it cannot
// be restored, as the next epoch's tokens would not fit in 64 bits.
const MaxEpoch = 1<<EpochBits - 1

// epochShift is where a seq's epoch starts: seq has 64-ShardBits bits,
// the low 46 of which count the grants within the epoch.
const epochShift = 64 - ShardBits - EpochBits

// TokenEpoch is the restore epoch of a token: its top EpochBits bits.
func TokenEpoch(token uint64) uint8 {
	return uint8(token >> (64 - EpochBits))
}

// seqEpoch is the restore epoch of a shard's counter (the epoch of the
// tokens it issues next). A counter above 54 bits (no valid table has
// one) is an epoch above MaxEpoch, which no restore goes beyond.
func seqEpoch(seq uint64) uint64 {
	return seq >> epochShift
}

// ErrEpochsExhausted is the error of a backup whose cluster is in the last
// restore epoch, MaxEpoch: a restore could not issue tokens above the ones
// that cluster can issue.
var ErrEpochsExhausted = errors.New("statemachine: no restore epoch left")

// BackupQuery is the Lookup query that captures the shard's table for a
// backup: Lookup answers a *ShardBackup.
type BackupQuery struct{}

// ShardBackup is one shard's table at one applied index, captured by
// Lookup(BackupQuery{}): its locks, its token counter, its fence, its
// cluster version and its directory.
type ShardBackup struct {
	shard uint64
	meta  meta
	owned bool         // a lock has an owner
	locks []backupLock // in key order
}

// backupLock is one grant of a ShardBackup. Its key aliases the table's
// arena and its owner is the table's own string, neither of which ever
// changes: the copy is of their headers.
type backupLock struct {
	key, owner string
	token      uint64
	leaseMs    uint32
	permits    uint32 // 0: an exclusive lock
}

// WriteTo writes the table's snapshot stream (the one SaveSnapshot would
// write of it) to w.
func (b *ShardBackup) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	err := writeSnapshot(b.shard, &lockRows{locks: b.locks}, streamVersion(b.meta, b.owned), b.meta, cw, nil)
	return cw.n, err
}

// captureBackup copies the table under the read lock (what Update waits
// for), then sorts the copy without it.
func (s *onDisk) captureBackup() (*ShardBackup, error) {
	b, err := s.copyTable()
	if err != nil {
		return nil, err
	}
	// In key order, a shared key's grants in token order: the stream's.
	slices.SortFunc(b.locks, func(x, y backupLock) int {
		if c := strings.Compare(x.key, y.key); c != 0 {
			return c
		}
		return cmp.Compare(x.token, y.token)
	})
	return b, nil
}

// copyTable copies the table's locks, in no order, and its meta.
func (s *onDisk) copyTable() (*ShardBackup, error) {
	return s.copyLocked(s.backupBuffer())
}

// backupBuffer is memory for a copy of the table, allocated before the
// read lock is taken, and touched (cleared), so that Update does not wait
// for the allocation nor for the page faults of fresh memory: with the
// allocation under the lock, a million locks held it 160 to 240 ms, 60 to
// 80 ms without (BenchmarkCaptureBackup, on 2 busy cores). The table
// seldom grows much before the lock is taken; if it does, append grows the
// copy.
func (s *onDisk) backupBuffer() []backupLock {
	s.mu.RLock()
	n := 0
	if s.t != nil {
		n = s.t.len()
	}
	s.mu.RUnlock()
	buf := make([]backupLock, n+n/16+16)
	clear(buf)
	return buf[:0]
}

// copyLocked copies the table into buf under the read lock: this is what
// Update waits for.
func (s *onDisk) copyLocked(buf []backupLock) (*ShardBackup, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t := s.t
	if t == nil {
		return nil, ErrClosed
	}
	t.each(func(l Lock) {
		buf = append(buf, backupLock{key: aliasString(l.Key), owner: aliasString(l.Owner), token: l.Token, leaseMs: l.LeaseMs, permits: l.Permits})
	})
	return &ShardBackup{shard: s.shard, meta: t.meta(s.applied), owned: len(t.owners) > 0, locks: buf}, nil
}

// lockRows is the rowSource of a captured table.
type lockRows struct {
	locks []backupLock
	i     int
}

func (r *lockRows) next() (Lock, bool) {
	if r.i == len(r.locks) {
		return Lock{}, false
	}
	l := &r.locks[r.i]
	r.i++
	return Lock{Key: aliasBytes(l.key), Token: l.token, LeaseMs: l.leaseMs, Owner: aliasBytes(l.owner), Permits: l.permits}, true
}

func (r *lockRows) err() error { return nil }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteBackup writes a backup file of a node's shards 1..shards to w.
// capture returns each shard's table: Lookup(BackupQuery{}) on the node's
// replica of it. Each shard is captured when its turn comes, so each part is
// consistent on its own; nothing is written before the first shard is
// captured, so that a node that cannot capture fails before it writes. On
// error too, the BackupInfo's Bytes says how much was written.
func WriteBackup(w io.Writer, shards int, capture func(shard uint64) (*ShardBackup, error)) (BackupInfo, error) {
	cw := &countingWriter{w: w}
	info := BackupInfo{Shards: shards}
	err := writeBackup(cw, shards, capture, &info)
	info.Bytes = cw.n
	return info, err
}

func writeBackup(w io.Writer, shards int, capture func(shard uint64) (*ShardBackup, error), info *BackupInfo) error {
	var bw *backup.Writer
	for id := uint64(1); id <= uint64(shards); id++ {
		b, err := capture(id)
		if err != nil {
			return fmt.Errorf("statemachine: back up shard %d: %w", id, err)
		}
		if b.shard != id {
			return fmt.Errorf("statemachine: back up shard %d: captured shard %d", id, b.shard)
		}
		// The part's length goes before it: encode twice rather than
		// hold the encoded part in memory as well as the copy.
		size, err := b.WriteTo(io.Discard)
		if err != nil {
			return err
		}
		if bw == nil {
			if bw, err = backup.NewWriter(w, shards); err != nil {
				return err
			}
		}
		part := backup.Part{Shard: id, Locks: uint64(len(b.locks)), Length: uint64(size)}
		if err := bw.Part(part, func(pw io.Writer) error { _, err := b.WriteTo(pw); return err }); err != nil {
			return err
		}
		info.Locks += len(b.locks)
		info.Epoch = max(info.Epoch, int(seqEpoch(b.meta.seq)))
		if id == 1 && b.meta.dirVersion != 0 {
			info.Directory = []byte(b.meta.dir)
		}
	}
	info.RestoreEpoch = info.Epoch + 1
	if bw == nil {
		return fmt.Errorf("statemachine: a backup of %d shards", shards)
	}
	return bw.Close()
}

// BackupInfo describes a backup file.
type BackupInfo struct {
	Shards int   // shards, one part each
	Locks  int   // locks held, over all shards
	Bytes  int64 // the file's size (WriteBackup only)
	// Epoch is the highest restore epoch of the backup's shards: the
	// number of restores in the lineage of the cluster backed up.
	Epoch int
	// RestoreEpoch is the epoch a restore from the backup starts (or
	// started, from RestoreBackup): Epoch+1. Every token the restored
	// cluster issues is at least RestoreEpoch<<56.
	RestoreEpoch int
	// Directory is shard 1's directory in the backup (where the engine
	// keeps the member list), nil if it was never set (a cluster below
	// LevelMembership): the membership of the cluster backed up, for
	// `baton backup` and an operator to see. RestoreBackup does not
	// restore it (see there). A copy, the caller's.
	Directory []byte
}

// CheckBackup reads the backup file r whole and checks it as RestoreBackup
// does (its framing and checksums, every shard's table, and a restore
// epoch left), writing nothing. A bad file is an error that matches
// backup.ErrBad or ErrBadSnapshot; a good one of a cluster in epoch
// MaxEpoch is ErrEpochsExhausted.
func CheckBackup(r io.Reader) (BackupInfo, error) {
	return readBackup(r, nil, func(*onDisk, *table) error { return nil })
}

// RestoreBackup writes the tables of the backup file r into db, the lock
// table of a node that has none yet: a new cluster, whose every node is
// restored from the same file before dragonboat starts. Each shard's meta
// gets applied index 0 (the new Raft log is empty), seq RestoreEpoch<<46,
// the first of the epoch above the backup's, so that tokens go on above
// every token the backed-up cluster issued, before the backup or after it
// (see "Restore epochs" above), and fence 0 (no proposer of the new
// cluster has fenced yet); cluster version 1, as a cluster bootstrapped
// fresh, which the new cluster's nodes raise again, but for a shard that
// holds a shared grant, which gets LevelShared (the lowest version whose
// tables hold shared grants: a build of level 3 refuses the data dir, as
// it cannot read them, and the shard's shared grants are released,
// extended and expire as in the cluster backed up); and no directory. The
// directory is dropped on purpose: it is the membership of the cluster
// backed up (in shard 1's), and a restored cluster is a new cluster with
// new members, bootstrapped from its own --peers; keeping the old list
// would make the engine believe in members that are not there.
// BackupInfo.Directory still shows it. The held locks, shared grants
// among them, keep their tokens, all in the backup's epoch or below. A db in which a shard has a table
// already is refused, and so is a backup of a cluster in epoch MaxEpoch
// (ErrEpochsExhausted). The rows are written shard by shard, each shard
// checked first, and every meta at the end in one synced batch: until then
// Open finds no table (rows without a meta are dropped), so a restore cut
// short leaves no shard restored; a restore refused midway deletes the
// rows it wrote too.
func RestoreBackup(db *pebble.DB, r io.Reader) (BackupInfo, error) {
	if shard, found, err := anyMeta(db); err != nil {
		return BackupInfo{}, err
	} else if found {
		return BackupInfo{}, fmt.Errorf("statemachine: the lock table already has shard %d; restore only into a new one", shard)
	}
	var restored []*onDisk
	var levels []uint64 // each restored shard's cluster version
	info, err := readBackup(r, db, func(s *onDisk, t *table) error {
		restored = append(restored, s)
		levels = append(levels, levelNone)
		if len(t.shared) > 0 {
			levels[len(levels)-1] = LevelShared
		}
		b, err := s.writeRows(t, nil)
		if err != nil {
			return err
		}
		defer b.Close()
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("statemachine: shard %d: restore rows: %w", s.shard, err)
		}
		return nil
	})
	if err != nil {
		dropRows(db, restored)
		return BackupInfo{}, err
	}
	b := db.NewBatch()
	defer b.Close()
	for i, s := range restored {
		s.putMeta(b, meta{seq: uint64(info.RestoreEpoch) << epochShift, level: levels[i]})
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return BackupInfo{}, fmt.Errorf("statemachine: restore metas: %w", err)
	}
	return info, nil
}

// dropRows deletes the rows a failed restore wrote. Open would drop them
// (they have no meta), but a refused restore should leave no trace in the
// lock table. Best effort: the restore's own error is the one to report.
func dropRows(db *pebble.DB, shards []*onDisk) {
	b := db.NewBatch()
	defer b.Close()
	for _, s := range shards {
		_ = b.DeleteRange(s.tableLo[:], s.tableHi[:], nil)
		_ = b.DeleteRange(s.grantLo[:], s.grantHi[:], nil)
	}
	_ = b.Commit(pebble.NoSync)
}

// anyMeta finds a shard with a meta in db, that is with a table.
func anyMeta(db *pebble.DB) (uint64, bool, error) {
	it := db.NewIter(&pebble.IterOptions{LowerBound: []byte{metaPrefix}, UpperBound: []byte{metaPrefix + 1}})
	var shard uint64
	found := it.First()
	if found && len(it.Key()) == prefixLen {
		shard = uint64(binary.BigEndian.Uint32(it.Key()[1:]))
	}
	if err := it.Close(); err != nil {
		return 0, false, fmt.Errorf("statemachine: scan metas: %w", err)
	}
	return shard, found, nil
}

// readBackup reads and checks the backup file r, and hands each shard's
// table to fn (with the shard's state machine over db, which may be nil
// if fn writes nothing) once the shard's part has been checked whole.
func readBackup(r io.Reader, db *pebble.DB, fn func(*onDisk, *table) error) (BackupInfo, error) {
	br, err := backup.NewReader(r)
	if err != nil {
		return BackupInfo{}, err
	}
	if br.Shards() > MaxShards {
		return BackupInfo{}, fmt.Errorf("%w: a backup of %d shards, more than %d", backup.ErrBad, br.Shards(), MaxShards)
	}
	info := BackupInfo{Shards: br.Shards()}
	for {
		p, err := br.Next()
		if errors.Is(err, io.EOF) {
			info.RestoreEpoch = info.Epoch + 1
			return info, nil
		}
		if err != nil {
			return BackupInfo{}, err
		}
		s := newOnDisk(db, nil, p.Shard)
		// Of at least readSnapshot's size, so that it reads through this
		// reader, which then still holds whatever follows the stream.
		pr := bufio.NewReaderSize(br, snapBufSize)
		_, t, err := s.readSnapshot(pr, nil)
		if err != nil {
			return BackupInfo{}, err
		}
		// The part must end with the stream, and its checksum is checked
		// at its end.
		if _, err := pr.ReadByte(); err == nil {
			return BackupInfo{}, s.badSnapshot("bytes after the table in the backup")
		} else if !errors.Is(err, io.EOF) {
			return BackupInfo{}, err
		}
		if uint64(t.len()) != p.Locks {
			return BackupInfo{}, s.badSnapshot("%d locks in the table, %d in the backup's frame", t.len(), p.Locks)
		}
		// Refused before the shard is written: the shards after it
		// cannot lower the epoch a restore would need.
		if e := seqEpoch(t.seq); e >= MaxEpoch {
			return BackupInfo{}, fmt.Errorf("%w: shard %d's tokens are in restore epoch %d (the last is %d), and a restore must start an epoch above the backup's so that its tokens are above every token the backed-up cluster can issue",
				ErrEpochsExhausted, p.Shard, e, MaxEpoch)
		}
		info.Epoch = max(info.Epoch, int(seqEpoch(t.seq)))
		if p.Shard == 1 && t.dirVersion != 0 {
			info.Directory = t.dir // the table's own copy, read from r
		}
		if err := fn(s, t); err != nil {
			return BackupInfo{}, err
		}
		info.Locks += t.len()
	}
}
