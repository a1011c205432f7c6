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
	// quietTimeout bounds the wait for a leaving node's proposals to
	// settle before it hands its shards over.
	quietTimeout = time.Second
	// quietSettle is the pause after they settled, for the followers to
	// apply the last commit: 0 left one hand-off in 16 to fail (and be
	// asked for again, 200 ms later), 5 ms none in 24 (BENCHMARKS.md,
	// "Cluster: failover, hand-off, priority").
	quietSettle = 5 * time.Millisecond
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
// transferPerTarget per candidate) until the transfers are done. Waiters, and
// the commands that came in meanwhile, are answered MOVED by the shards
// themselves as the new leader shows up.
//
// The shards go quiet first. dragonboat's target of a transfer does not
// campaign while it has committed entries it has not applied (its guard
// against config changes: raft.hasConfigChangeToApply), and under load the
// leader's TimeoutNow travels with the commit index of the entries just
// acknowledged, so the target skipped its campaign in about half of the
// hand-offs measured, and the leader dropped every proposal until the
// transfer timed out, an election timeout later. Quiet, the target has
// applied everything by the time it is asked. A transfer that fails all
// the same is asked for again once Raft has given up on it.
func (n *Node) transferLeadership(ctx context.Context) {
	n.draining.Store(true) // no more pulling: we are leaving
	if !n.clustered() {
		return
	}
	n.quiet(ctx, n.ledShards())
	retry := time.Duration(electionTicks+1) * n.cfg.RTT // Raft aborts a transfer after electionTicks
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
		now := time.Now()
		until, asked := now.Add(transferPerTarget), time.Time{}
		for left := led; len(left) > 0 && now.Before(until) && ctx.Err() == nil; left = n.ledShards() {
			if now.Sub(asked) >= retry {
				for _, s := range left {
					_ = n.nh.RequestLeaderTransfer(s.id, id)
				}
				asked = now
			}
			time.Sleep(5 * time.Millisecond)
			now = time.Now()
		}
		if moved := len(led) - len(n.ledShards()); moved > 0 {
			n.log.Info("handed leadership over", "to", id, "shards", moved)
		}
	}
}

// quiet stops the shards proposing commands and waits (bounded by ctx and
// quietTimeout) until what they proposed has settled, then quietSettle for
// the followers to apply the last commit index, which the leader sent them
// as it committed.
func (n *Node) quiet(ctx context.Context, shards []*shard) {
	for _, s := range shards {
		s.mu.Lock()
		s.handingOff = true
		s.mu.Unlock()
	}
	settled := func() bool {
		for _, s := range shards {
			s.mu.Lock()
			busy := len(s.inflight) > 0
			s.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	}
	until := time.Now().Add(quietTimeout)
	for !settled() && time.Now().Before(until) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-time.After(quietSettle):
	case <-ctx.Done():
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
