package raftlog

import (
	"sync"

	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4/logger"
	"github.com/lni/dragonboat/v4/raftio"
)

var plog = logger.GetLogger("raftlog")

// compactTask is a replica's pending request to compact its entries up to
// index; requests that arrive before it runs join it (the highest index
// wins, which covers every earlier request).
type compactTask struct {
	index uint64
	done  []chan struct{}
}

// compactor runs CompactEntriesTo's pebble compactions one at a time on its
// own goroutine: a manual compaction can take long and is only about disk
// space, so nothing should wait for it but whoever asked, and running them
// one by one keeps the store to the single compaction its options allow.
type compactor struct {
	db *pebble.DB

	mu      sync.Mutex
	pending map[raftio.NodeInfo]*compactTask
	order   []raftio.NodeInfo // first come, first compacted

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newCompactor(db *pebble.DB) *compactor {
	c := &compactor{
		db:      db,
		pending: make(map[raftio.NodeInfo]*compactTask),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go c.run()
	return c
}

// add queues a compaction and returns the channel closed once it is done.
func (c *compactor) add(ni raftio.NodeInfo, index uint64) <-chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	t, ok := c.pending[ni]
	if !ok {
		t = &compactTask{index: index}
		c.pending[ni] = t
		c.order = append(c.order, ni)
	} else if index > t.index {
		t.index = index
	}
	t.done = append(t.done, ch)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return ch
}

func (c *compactor) next() (raftio.NodeInfo, *compactTask, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.order) == 0 {
		return raftio.NodeInfo{}, nil, false
	}
	ni := c.order[0]
	c.order = c.order[1:]
	t := c.pending[ni]
	delete(c.pending, ni)
	return ni, t, true
}

func (c *compactor) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		for {
			ni, t, ok := c.next()
			if !ok {
				break
			}
			start := indexKey(prefixEntry, ni.ShardID, ni.ReplicaID, 0)
			end := indexRangeEnd(prefixEntry, ni.ShardID, ni.ReplicaID, t.index)
			if err := c.db.Compact(start, end, false); err != nil {
				// Only disk space is at stake: the entries are already
				// deleted (RemoveEntriesTo), compaction only reclaims
				// their space, and the next request will try again.
				plog.Errorf("shard %d replica %d: compact entries to %d: %v",
					ni.ShardID, ni.ReplicaID, t.index, err)
			}
			for _, ch := range t.done {
				close(ch)
			}
			select {
			case <-c.stop:
				return
			default:
			}
		}
	}
}

// close stops the worker once its current compaction is done and waits for
// it, so that pebble is never closed under a running compaction. Requests
// still queued are dropped with their channels left open, as dragonboat's
// store does: their compaction did not happen, and the store is closing.
func (c *compactor) close() {
	close(c.stop)
	<-c.done
}
