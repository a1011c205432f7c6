package engine

import (
	"context"
	"net"
	"time"
)

// Leadership in a baton cluster follows the order of --peers: the first
// live, caught-up node leads every shard. Raft elects whoever it elects; the
// node with the higher priority then *pulls* leadership to itself, once it
// has caught up. Pulling rather than pushing means that only a node that is
// alive and current ever asks, so the leader never stalls its proposals on
// a transfer to a node that is down (Raft drops proposals while a transfer
// is in progress).

const (
	// priorityInterval is how often a node looks for shards led by a node
	// of lower priority.
	priorityInterval = 200 * time.Millisecond
	// pullBackoff spaces two pulls of the same shard.
	pullBackoff = 500 * time.Millisecond
	// catchUpTimeout bounds the ReadIndex that proves a node caught up.
	catchUpTimeout = 2 * time.Second
	// transferPerTarget bounds the wait for one hand-off target to take
	// every shard before the next candidate is tried.
	transferPerTarget = time.Second
)

// clustered reports whether there is anyone to share leadership with.
func (n *Node) clustered() bool { return len(n.cfg.Peers) > 1 }

// runPriority pulls, every priorityInterval, the leadership of each shard
// whose leader has a lower priority than this node.
func (n *Node) runPriority() {
	t := time.NewTicker(priorityInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stopC:
			return
		case <-t.C:
		}
		if n.draining.Load() {
			continue
		}
		for _, s := range n.shards {
			if s.shouldPull(time.Now()) {
				n.pull(s)
			}
		}
	}
}

// shouldPull reports whether this node should ask for the shard's
// leadership now, and records the attempt.
func (s *shard) shouldPull(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	me := s.node.cfg.ID
	if s.leaderID == 0 || s.leaderID <= me || s.stopping || now.Sub(s.lastPull) < pullBackoff {
		return false
	}
	s.lastPull = now
	return true
}

// pull takes the shard's leadership once this node has caught up: a
// ReadIndex on a follower completes only after it has applied everything the
// leader had committed when asked, so the transfer that follows does not wait
// for a lagging target.
func (n *Node) pull(s *shard) {
	rs, err := n.nh.ReadIndex(s.id, catchUpTimeout)
	if err != nil {
		return
	}
	var caughtUp bool
	select {
	case r := <-rs.ResultC():
		caughtUp = r.Completed()
		rs.Release()
	case <-n.stopC:
		return
	}
	if !caughtUp || n.draining.Load() {
		return
	}
	if err := n.nh.RequestLeaderTransfer(s.id, n.cfg.ID); err != nil {
		n.log.Debug("leader transfer request failed", "shard", s.id, "err", err)
		return
	}
	n.log.Info("taking leadership back", "shard", s.id)
}

// transferLeadership moves the leadership of every shard this node leads to
// the next live node in priority order, and waits (bounded by ctx and
// transferPerTarget per candidate) until the transfers are done. Waiters are
// answered MOVED by the shards themselves as the new leader shows up.
func (n *Node) transferLeadership(ctx context.Context) {
	n.draining.Store(true) // no more pulling: we are leaving
	if !n.clustered() {
		return
	}
	for id := uint64(1); id <= uint64(len(n.cfg.Peers)); id++ {
		if id == n.cfg.ID {
			continue
		}
		led := n.ledShards()
		if len(led) == 0 || ctx.Err() != nil {
			return
		}
		if !n.peerAlive(ctx, id) {
			continue
		}
		for _, s := range led {
			_ = n.nh.RequestLeaderTransfer(s.id, id)
		}
		until := time.Now().Add(transferPerTarget)
		for len(n.ledShards()) > 0 && time.Now().Before(until) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		if moved := len(led) - len(n.ledShards()); moved > 0 {
			n.log.Info("handed leadership over", "to", id, "shards", moved)
		}
	}
}

// ledShards lists the shards this node leads now.
func (n *Node) ledShards() []*shard {
	var led []*shard
	for _, s := range n.shards {
		s.mu.Lock()
		if s.leaderID == n.cfg.ID {
			led = append(led, s)
		}
		s.mu.Unlock()
	}
	return led
}

// peerAlive reports whether peer id accepts connections on its client port.
func (n *Node) peerAlive(ctx context.Context, id uint64) bool {
	d := net.Dialer{Timeout: 200 * time.Millisecond}
	c, err := d.DialContext(ctx, "tcp", n.clientAddrOf(id))
	if err != nil {
		return false
	}
	c.Close()
	return true
}
