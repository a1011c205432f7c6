package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// Each shard's table has a directory: an opaque blob that only the engine
// reads (it keeps the cluster's member list in shard 1's), with a version
// that counts the writes that took. It lives here rather than in the
// engine so that it is Raft state like the locks: written by log entries
// (directory writes, SealDirectory), kept in the checkpoint and carried in
// snapshots, so that every replica, a restarted one and one recovered from
// a snapshot among them, has the same directory at the same index.

// dirPrefix is the key prefix of a shard's stored directory:
//
//	'd' shard(u32 BE)  ->  dirVersion u64 LE, blob (1..MaxDirectory bytes)
//
// absent while the directory was never set. It is a key of its own rather
// than more of the meta, which a checkpoint writes every time: the
// directory is written only by the checkpoint after it changed, and the
// meta keeps the lengths that builds of older levels check.
const dirPrefix = 'd'

// dirValueMin and dirValueMax bound a stored directory's value.
const (
	dirValueMin = 8 + 1
	dirValueMax = 8 + MaxDirectory
)

// Directory is the shard's directory: its version (0 if it was never
// written, and then blob is nil) and its blob, as the last directory
// write that took left it. The engine reads it after the Applied of its
// own write to see whether the write took (the version went from the
// write's Base to Base+1 and the blob is its own). blob is read-only; it
// is never changed (a write replaces it), so it stays valid however long
// it is kept.
func (v Table) Directory() (version uint64, blob []byte) {
	if v.t == nil {
		return 0, nil
	}
	return v.t.dirVersion, v.t.dir
}

// setDirectory applies a directory write of base and blob: the directory
// becomes a copy of blob (which aliases the Raft entry) and its version
// one more, if the table's cluster version is LevelMembership or more and
// the directory's version is base; otherwise nothing changes. Below
// LevelMembership a replica of level 2 may be in the shard, and it skips
// the entry: applying it here too would part the tables.
func (t *table) setDirectory(base uint64, blob []byte) {
	if t.level < LevelMembership || base != t.dirVersion {
		return
	}
	t.dir = bytes.Clone(blob)
	t.dirVersion++
	t.dirChanged = true
}

// putDir adds the shard's directory to b, in the layout above.
func (s *onDisk) putDir(b *pebble.Batch, version uint64, blob []byte) {
	op := b.SetDeferred(prefixLen, 8+len(blob))
	copy(op.Key, s.dirKey[:])
	binary.LittleEndian.PutUint64(op.Value, version)
	copy(op.Value[8:], blob)
	_ = op.Finish() // cannot fail: the batch is not indexed
}

// readDir reads the shard's stored directory into t, whose cluster
// version must already be the meta's: a directory is refused in a table
// below LevelMembership, where no write could have taken. A shard without
// one (never written, or a data dir of an older build) keeps version 0.
func (s *onDisk) readDir(t *table) error {
	v, closer, err := s.db.Get(s.dirKey[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("statemachine: shard %d: read directory: %w", s.shard, err)
	}
	defer closer.Close()
	if len(v) < dirValueMin || len(v) > dirValueMax {
		return fmt.Errorf("statemachine: shard %d: corrupt directory (%d bytes)", s.shard, len(v))
	}
	version := binary.LittleEndian.Uint64(v)
	if version == 0 || t.level < LevelMembership {
		return fmt.Errorf("statemachine: shard %d: corrupt directory (version %d in a table of cluster version %d)", s.shard, version, t.level)
	}
	t.dirVersion, t.dir = version, bytes.Clone(v[8:])
	return nil
}
