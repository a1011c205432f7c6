package statemachine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// FeatureLevel is the highest cluster version this build can take part
// in: the newest formats of the log, the snapshots, the Raft transport and
// the lock table's files that it reads and writes.
//
// A cluster's version is agreed through the log, one shard at a time
// (see "Cluster version" in the package doc): a node reports its
// FeatureLevel in a level report, and the leader raises the shard's
// version, with a raise, to the lowest level its voters reported once
// every voter has reported. Anything that a node of an older build could
// not read, or would apply differently, is used only from the version
// that introduced it on, so that every build can take over a running
// cluster of the one before it one node at a time, and nothing of the new
// formats is written while a node of the old build may still need to read
// it.
//
// The levels:
//
//	1  every build up to commit 52576db: entries of versions 1 to 4,
//	   snapshot streams of versions 1 to 3, metas of 16 or 24 bytes. Its
//	   builds report nothing, so a voter that never reported counts as 1.
//	2  the cluster version itself: level reports and raises in the log
//	   (entries of versions 5 and 6, which a build of level 1 skips, as it
//	   skips every entry it cannot decode, and which change no lock), the
//	   version in the meta (32 bytes) and in the snapshot stream (version
//	   4), which a build of level 1 refuses to open or recover from. So a
//	   node of level 1 can be started again on its data dir, and receive
//	   the others' snapshots, until its shards are raised to 2, and not
//	   after.
//	3  membership: directory entries (entry version 7) and the directory
//	   in the snapshot stream (version 5) and in the lock table's files
//	   (its own key per shard, beside the meta). A build of level 2 (up
//	   to commit aa0b06c) rejects version 7 in DecodeBatch ("unknown
//	   version": it knows 1 to 6) and skips it, as it skips every entry it
//	   cannot decode; a directory write changes nothing in a table below
//	   version 3, so such a build stays in step until its shards are
//	   raised. It refuses a version 5 stream ("unknown version 5") and a
//	   meta of version 3 (ErrTooOld), so it cannot start again once they
//	   are. The directory itself is only an opaque blob here: what it
//	   holds (the members) is the engine's.
//	4  shared holds (protocol 1.4): shared Grants (entry version 8, which
//	   a build of level 3, up to the commit before this level, rejects
//	   in DecodeBatch as "unknown version" and skips whole; below
//	   LevelShared every command of such an entry is answered NotEnabled
//	   and changes nothing, so that such a build stays in step), shared
//	   grants in the snapshot stream (version 6, written from level 4 on,
//	   whether or not a key is shared; a build of level 3 refuses it as
//	   "unknown version 6", as a build of level 2 refuses version 5) and
//	   in the lock table's files (header rows with token 0 and grant rows
//	   of their own prefix: "Pebble layout" in the package doc), which a
//	   build of level 3 never reads: the shard's meta says version 4 by
//	   then, and it refuses it (ErrTooOld).
const FeatureLevel = 4

// LevelShared is the cluster version from which a shared Grant takes
// effect: below it, an entry with one (version 8) changes nothing, every
// command of it answered NotEnabled, so that a replica of a build of
// level 3, which skips the entry, stays in step. The engine proposes
// shared Grants only from it on (and answers `S` with ERR unavailable
// before).
const LevelShared = 4

// LevelMembership is the cluster version from which the engine may
// propose directory writes (SealDirectory), and from which they take
// effect: below it a directory write changes nothing, so that a replica
// of a build of level 2, which skips the entry, stays in step.
const LevelMembership = 3

// levelNone is the cluster version of a table that was never raised: a
// meta or a snapshot stream without a version is of level 1.
const levelNone = 1

// ErrTooOld is what the errors of StoredClusterVersion and Open match
// (errors.Is) when a data dir or a snapshot holds a cluster version above
// FeatureLevel: this build cannot take part in that cluster any more.
var ErrTooOld = errors.New("statemachine: cluster version above this build's")

// TooOld is the one-line reason, matching ErrTooOld, that a build of
// FeatureLevel gives for not taking part any more in shard, at cluster
// version v: at start (Open, StoredClusterVersion) and when a raise to v
// applies (the engine).
func TooOld(shard, v uint64) error {
	return fmt.Errorf("%w: shard %d is at cluster version %d and this build supports up to %d; "+
		"run a build of level %d or later (a cluster version is never lowered: see docs/operations.md, Upgrading)",
		ErrTooOld, shard, v, FeatureLevel, v)
}

// StoredClusterVersion is the highest cluster version among the shards'
// checkpoints in db (1 for a lock table that has none or was never raised),
// and an error matching ErrTooOld, naming the shard, if it is above
// FeatureLevel. A node checks it before it starts any replica, so that a
// build too old for its data dir refuses to start with one line that
// says why, instead of failing inside Raft.
func StoredClusterVersion(db *pebble.DB) (uint64, error) {
	it := db.NewIter(&pebble.IterOptions{LowerBound: []byte{metaPrefix}, UpperBound: []byte{metaPrefix + 1}})
	v, shard := uint64(levelNone), uint64(0)
	for ok := it.First(); ok; ok = it.Next() {
		m, ok := decodeMeta(it.Value())
		if !ok || len(it.Key()) != prefixLen {
			continue // Open names a bad meta, with its shard
		}
		if m.level > v {
			v, shard = m.level, uint64(binary.BigEndian.Uint32(it.Key()[1:]))
		}
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("statemachine: scan metas: %w", err)
	}
	if v > FeatureLevel {
		return v, TooOld(shard, v)
	}
	return v, nil
}

// ClusterVersion is the shard's cluster version: 1 until a raise applies,
// then the highest level raised to.
func (v Table) ClusterVersion() uint64 { return v.t.level }
