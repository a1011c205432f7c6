package engine

import (
	"errors"
	"time"

	"github.com/lni/dragonboat/v4"
)

// Dragonboat takes a snapshot of a shard, and compacts its Raft log, every
// SnapshotEntries applied entries. An entry is one proposal, which holds one
// command under a light load and a thousand under a heavy one, so that count
// alone lets the log grow to gigabytes: at 4 connections x 1,024 in flight
// 100,000 entries are about 4 GB, and the log store (pebble) flushes and
// compacts those live entries again and again until the snapshot lets it
// delete them. On three nodes that was a third of a follower's CPU
// (BENCHMARKS.md, "The Raft log's size").
//
// So the engine also counts the bytes of the entries applied to each shard
// (every replica does, for its own log) and, once SnapshotBytes have been
// applied since the last snapshot it asked for, asks dragonboat for one
// (runSnapshots). The snapshot of baton's on-disk state machine is a
// checkpoint of the changed rows; dragonboat then compacts the log up to a
// little before it, keeping about a quarter of SnapshotBytes of entries
// (snapshotOverhead) so that a follower a little behind catches up from the
// log rather than from a snapshot of the whole table.

const (
	// snapshotTimeout bounds one requested snapshot.
	snapshotTimeout = time.Minute
	// snapshotRetry is the pause after a request dragonboat refused (one
	// of its own snapshots under way, the shard not ready): every applied
	// entry kicks the snapshotter while the count is over the bound.
	snapshotRetry = 100 * time.Millisecond
)

// snapshotter is the part of dragonboat's NodeHost that takes snapshots on
// request.
type snapshotter interface {
	RequestSnapshot(shardID uint64, opt dragonboat.SnapshotOption, timeout time.Duration) (*dragonboat.RequestState, error)
}

// logSince is what a shard's Raft log took in since the last snapshot the
// engine asked for.
type logSince struct {
	bytes, entries uint64
}

// countLogged adds an applied entry of size bytes to the shard's log count
// and wakes the snapshotter once the count reaches SnapshotBytes. s.mu is
// held.
func (s *shard) countLogged(size int) {
	s.logged.bytes += uint64(size)
	s.logged.entries++
	if s.logged.bytes >= s.node.cfg.SnapshotBytes {
		select {
		case s.snapKick <- struct{}{}:
		default:
		}
	}
}

// runSnapshots asks for a snapshot of s whenever countLogged says its log
// took in SnapshotBytes; it is the only goroutine that does, so requests
// never overlap.
func (n *Node) runSnapshots(s *shard) {
	for {
		select {
		case <-n.stopC:
			return
		case <-s.snapKick:
		}
		s.mu.Lock()
		since := s.logged
		s.mu.Unlock()
		if since.bytes < n.cfg.SnapshotBytes {
			continue // counted down by a snapshot since the kick
		}
		if err := n.requestSnapshot(s, since); err != nil {
			n.log.Debug("snapshot by log size", "shard", s.id, "bytes", since.bytes, "entries", since.entries, "err", err)
			select {
			case <-n.stopC:
				return
			case <-time.After(snapshotRetry):
			}
		}
	}
}

// requestSnapshot asks dragonboat for a snapshot of s and waits for it. On
// success the entries counted before the request are counted down; those
// applied meanwhile stay counted, so the next snapshot comes a little early
// rather than late.
func (n *Node) requestSnapshot(s *shard, since logSince) error {
	opt := dragonboat.SnapshotOption{
		OverrideCompactionOverhead: true,
		CompactionOverhead:         snapshotOverhead(since, n.cfg.SnapshotBytes, n.cfg.SnapshotEntries),
	}
	rs, err := n.snapshots.RequestSnapshot(s.id, opt, snapshotTimeout)
	if err != nil {
		return err
	}
	switch ok, stopped := n.completed(rs); {
	case stopped:
		return nil
	case !ok:
		return errors.New("not taken (another snapshot under way, or the shard is closing)")
	}
	s.mu.Lock()
	s.logged.bytes -= min(s.logged.bytes, since.bytes)
	s.logged.entries -= min(s.logged.entries, since.entries)
	s.mu.Unlock()
	return nil
}

// keptAfterSnapshot is how many entries dragonboat keeps below the
// snapshots it takes every snapshotEntries (config.Config's
// CompactionOverhead).
func keptAfterSnapshot(snapshotEntries uint64) uint64 { return snapshotEntries / 5 }

// snapshotOverhead is how many entries the log keeps below a snapshot taken
// after since: about a quarter of snapshotBytes at since's mean entry size,
// at least one entry, and no more than dragonboat keeps after its own
// snapshots (keptAfterSnapshot).
func snapshotOverhead(since logSince, snapshotBytes, snapshotEntries uint64) uint64 {
	most := max(keptAfterSnapshot(snapshotEntries), 1)
	if since.bytes == 0 || since.entries == 0 {
		return most
	}
	mean := max(since.bytes/since.entries, 1)
	return min(max(snapshotBytes/4/mean, 1), most)
}
