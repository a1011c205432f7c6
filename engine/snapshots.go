package engine

import (
	"errors"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"
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
// log rather than from a snapshot of the whole table. The engine counts
// entries too, and takes dragonboat's place for the snapshot every
// SnapshotEntries (its own are turned off: replicaConfig), so that every
// compaction of the log goes through runSnapshots.
//
// A replica too far behind (a new member, one that was down) gets a
// snapshot streamed from the leader at the leader's applied index, and
// then needs the log from just after it. If the leader compacted its log
// past that point meanwhile, as a busy shard with a big table does while
// the stream takes seconds, the replica needs another snapshot, and can
// loop so, a snapshot after another (measured: 20 snapshots of a table of
// 100,000 locks for one member to join, with --snapshot-entries 20 under
// 3,000 cycles/s; one since). So a leader takes no snapshot, and compacts
// nothing, while it streams a snapshot, nor for a while after (sendEnded:
// the receiver still has to apply it, which takes about as long), nor,
// after a stream, while a joining learner has not said that it caught up
// (holdsLog): dragonboat's system events say when a stream starts and
// ends (snapshotSends). The log grows for that time instead, bounded by
// maxSendHold.

const (
	// snapshotTimeout bounds one requested snapshot.
	snapshotTimeout = time.Minute
	// snapshotRetry is the pause after a request dragonboat refused (one
	// of its own snapshots under way, the shard not ready): every applied
	// entry kicks the snapshotter while the count is over the bound.
	snapshotRetry = 100 * time.Millisecond
	// minSendHold is the least time the log is kept whole after a
	// snapshot stream ended: the receiver applies it, then asks for the
	// entries after it. Applying takes about as long as the stream took,
	// and the log is held for twice that when it is longer.
	minSendHold = 3 * time.Second
	// maxSendHold bounds how long one stream holds the log, even if its
	// end is never reported.
	maxSendHold = 10 * time.Minute
	// heldRetry is how often the snapshotter looks again at a log that
	// a stream holds.
	heldRetry = time.Second
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
// and wakes the snapshotter once the count is due (snapshotDue). s.mu is
// held.
func (s *shard) countLogged(size int) {
	s.logged.bytes += uint64(size)
	s.logged.entries++
	if s.node.snapshotDue(s.logged) {
		s.kickSnapshots()
	}
}

// kickSnapshots wakes the snapshotter.
func (s *shard) kickSnapshots() {
	select {
	case s.snapKick <- struct{}{}:
	default:
	}
}

// snapshotDue says whether a log that took in since is due a snapshot:
// SnapshotBytes or SnapshotEntries since the last (a bound of 0, in a
// unit test's node, is none).
func (n *Node) snapshotDue(since logSince) bool {
	return (n.cfg.SnapshotBytes > 0 && since.bytes >= n.cfg.SnapshotBytes) ||
		(n.cfg.SnapshotEntries > 0 && since.entries >= n.cfg.SnapshotEntries)
}

// runSnapshots asks for a snapshot of s whenever countLogged says one is
// due and no stream holds the log; it is the only goroutine that does, so
// requests never overlap.
func (n *Node) runSnapshots(s *shard) {
	for {
		select {
		case <-n.stopC:
			return
		case <-s.snapKick:
		}
		s.mu.Lock()
		since, held := s.logged, s.holdsLog(time.Now())
		s.mu.Unlock()
		if !n.snapshotDue(since) {
			continue // counted down by a snapshot since the kick
		}
		pause := time.Duration(0)
		if held {
			n.log.Debug("snapshot put off: a snapshot stream holds the log", "shard", s.id, "bytes", since.bytes, "entries", since.entries)
			pause = heldRetry
		} else if err := n.requestSnapshot(s, since); err != nil {
			n.log.Debug("snapshot", "shard", s.id, "bytes", since.bytes, "entries", since.entries, "err", err)
			pause = snapshotRetry
		}
		if pause > 0 {
			select {
			case <-n.stopC:
				return
			case <-time.After(pause):
				s.kickSnapshots() // still due, whether or not entries come
			}
		}
	}
}

// holdsLog reports whether a snapshot stream holds s's log at now, and
// forgets streams older than maxSendHold. After a stream was received, a
// learner that has not said yet that it caught up (a node that joins,
// whose Ready the directory shows) holds the log too, up to maxSendHold
// after the stream: loading a big table can take longer than the hold of
// the stream alone. s.mu is held.
func (s *shard) holdsLog(now time.Time) bool {
	for r, start := range s.sends {
		if now.Sub(start) > maxSendHold {
			delete(s.sends, r)
		}
	}
	if len(s.sends) > 0 || now.Before(s.heldUntil) {
		return true
	}
	return !s.lastSent.IsZero() && now.Sub(s.lastSent) < maxSendHold && s.node.view().catchingUp()
}

// sendStarted records that this replica streams a snapshot of s to
// replica.
func (s *shard) sendStarted(replica uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sends == nil {
		s.sends = map[uint64]time.Time{}
	}
	s.sends[replica] = now
}

// sendEnded records the end of the stream to replica: the log stays held
// for minSendHold, or twice as long as the stream took if that is longer,
// when it was received; not at all when it failed (the next try starts
// anew).
func (s *shard) sendEnded(replica uint64, received bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start, ok := s.sends[replica]
	if !ok {
		return
	}
	delete(s.sends, replica)
	if received {
		s.lastSent = now
		if until := now.Add(max(minSendHold, 2*now.Sub(start))); until.After(s.heldUntil) {
			s.heldUntil = until
		}
	}
}

// snapshotSends hears from dragonboat when this node starts and ends
// streaming a snapshot to a replica (its raftio.ISystemEventListener); it
// ignores the other events.
type snapshotSends struct{ n *Node }

func (l snapshotSends) shard(id uint64) *shard {
	if id < 1 || id > uint64(len(l.n.shards)) {
		return nil
	}
	return l.n.shards[id-1]
}

// SendSnapshotStarted implements raftio.ISystemEventListener.
func (l snapshotSends) SendSnapshotStarted(info raftio.SnapshotInfo) {
	if s := l.shard(info.ShardID); s != nil {
		s.sendStarted(info.ReplicaID, time.Now())
	}
}

// SendSnapshotCompleted implements raftio.ISystemEventListener.
func (l snapshotSends) SendSnapshotCompleted(info raftio.SnapshotInfo) {
	if s := l.shard(info.ShardID); s != nil {
		s.sendEnded(info.ReplicaID, true, time.Now())
	}
}

// SendSnapshotAborted implements raftio.ISystemEventListener.
func (l snapshotSends) SendSnapshotAborted(info raftio.SnapshotInfo) {
	if s := l.shard(info.ShardID); s != nil {
		s.sendEnded(info.ReplicaID, false, time.Now())
	}
}

// The other events of raftio.ISystemEventListener: not used.

func (snapshotSends) NodeHostShuttingDown()                       {}
func (snapshotSends) NodeUnloaded(raftio.NodeInfo)                {}
func (snapshotSends) NodeDeleted(raftio.NodeInfo)                 {}
func (snapshotSends) NodeReady(raftio.NodeInfo)                   {}
func (snapshotSends) MembershipChanged(raftio.NodeInfo)           {}
func (snapshotSends) ConnectionEstablished(raftio.ConnectionInfo) {}
func (snapshotSends) ConnectionFailed(raftio.ConnectionInfo)      {}
func (snapshotSends) SnapshotReceived(raftio.SnapshotInfo)        {}
func (snapshotSends) SnapshotRecovered(raftio.SnapshotInfo)       {}
func (snapshotSends) SnapshotCreated(raftio.SnapshotInfo)         {}
func (snapshotSends) SnapshotCompacted(raftio.SnapshotInfo)       {}
func (snapshotSends) LogCompacted(raftio.EntryInfo)               {}
func (snapshotSends) LogDBCompacted(raftio.EntryInfo)             {}

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
