package raftlog

import (
	"sync"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// replicaInfo is what the store remembers about one replica so that the
// save path decides without reading pebble: whether a State is new (and
// whether it changes term or vote, which decides the sync), which snapshot
// is the newest, and the max index that hides stale entries from readers.
type replicaInfo struct {
	// state is the last State written for the replica, durable or not;
	// hasState is false before the first write since open (or after the
	// replica's data was removed), and then the next State is synced.
	state    pb.State
	hasState bool

	// maxKnown says maxIndex and hasMax are what pebble holds, so readers
	// need not look. hasMax is false when there is no max index record,
	// that is, when no entry or snapshot was ever saved.
	maxKnown bool
	hasMax   bool
	maxIndex uint64

	// snapKnown says snapIndex is the index of the newest snapshot record
	// in pebble (0: none).
	snapKnown bool
	snapIndex uint64
}

// cache is the per-replica memory of the store. One mutex guards it: the
// step workers (one per group of shards) and the readers (dragonboat's
// replica start-up, log readers of followers catching up) all touch it, each
// only briefly, and never while doing I/O.
type cache struct {
	mu sync.Mutex
	m  map[raftio.NodeInfo]replicaInfo
}

func newCache() *cache {
	return &cache{m: make(map[raftio.NodeInfo]replicaInfo)}
}

func (c *cache) get(ni raftio.NodeInfo) replicaInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[ni]
}

// learnMaxIndex records a max index read from pebble unless a writer already
// recorded one: a writer's value is newer than whatever the reader saw
// before taking the lock, so the reader must not overwrite it.
func (c *cache) learnMaxIndex(ni raftio.NodeInfo, index uint64, has bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ri := c.m[ni]
	if ri.maxKnown {
		return
	}
	ri.maxKnown, ri.hasMax, ri.maxIndex = true, has, index
	c.m[ni] = ri
}

// learnSnapshotIndex records the newest snapshot index read from pebble,
// unless a writer recorded one first (see learnMaxIndex).
func (c *cache) learnSnapshotIndex(ni raftio.NodeInfo, index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ri := c.m[ni]
	if ri.snapKnown {
		return
	}
	ri.snapKnown, ri.snapIndex = true, index
	c.m[ni] = ri
}

// apply records the changes of a committed batch, in batch order. They come
// only once the batch is committed, so that a failed write never leaves the
// cache claiming something pebble does not hold.
func (c *cache) apply(changes []savecall.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range changes {
		ch := &changes[i]
		if !ch.SetState && !ch.SetMax && !ch.SetSnapshot {
			continue
		}
		ri := c.m[ch.Replica]
		if ch.SetState {
			ri.state, ri.hasState = ch.State, true
		}
		if ch.SetMax {
			ri.maxKnown, ri.hasMax, ri.maxIndex = true, true, ch.MaxIndex
		}
		if ch.SetSnapshot {
			// Snapshot records are keyed by index and readers take the
			// highest, so the newest snapshot never goes backwards even
			// if two writers (the step worker and the snapshot worker)
			// race; the cache follows the same rule.
			if !ri.snapKnown || ch.Snapshot > ri.snapIndex {
				ri.snapIndex = ch.Snapshot
			}
			ri.snapKnown = true
		}
		c.m[ch.Replica] = ri
	}
}

// set replaces everything known about a replica, for ImportSnapshot and
// RemoveNodeData, which rewrite all of its metadata in one batch.
func (c *cache) set(ni raftio.NodeInfo, ri replicaInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[ni] = ri
}
