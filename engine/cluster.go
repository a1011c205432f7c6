package engine

import (
	"context"
	"net"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// Leadership in a baton cluster follows the order of --peers: the first
// live, caught-up node leads every shard. Raft elects whoever it elects; the
// node with the higher priority then *pulls* leadership to itself, once it
// has caught up. Pulling rather than pushing means that only a node that is
// alive and current ever asks, so the leader never stalls its proposals on
// a transfer to a node that is down (Raft drops proposals while a transfer
// is in progress).
//
// The puller asks through the log (a hand-off request, statemachine's
// version 4 entry) rather than asking Raft for the transfer itself: the
// leader then hands the shard over as a leaving node does, quiet first
// (see transferLeadership), which only the leader can do. Asked by the
// puller, the transfer was skipped by the target about half the time under
// load, and the leader dropped every proposal of the shard for an election
// timeout each time.

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

// clustered reports whether there is anyone to share leadership with:
// another voter.
func (n *Node) clustered() bool { return n.view().voters > 1 }

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
	d := s.node.view()
	if s.leaderID == 0 || !d.isVoter(s.node.cfg.ID) || d.rank(s.leaderID) <= d.rank(s.node.cfg.ID) || s.stopping || now.Sub(s.lastPull) < pullBackoff {
		return false
	}
	s.lastPull = now
	return true
}

// pull asks for the shard's leadership once this node has caught up: a
// ReadIndex on a follower completes only after it has applied everything the
// leader had committed when asked, so the transfer that follows does not wait
// for a lagging target. The request goes through the log (dragonboat
// forwards a follower's proposal to the leader), and the leader acts on it
// when it applies it (shard.handOffAsked).
func (n *Node) pull(s *shard) {
	rs, err := n.nh.ReadIndex(s.id, catchUpTimeout)
	if err != nil {
		return
	}
	if caughtUp, _ := n.completed(rs); !caughtUp || n.draining.Load() {
		return
	}
	if n.propose(s, sm.Header{Proposer: n.cfg.ID, HandOff: true}, "hand-off request") {
		n.log.Info("asked for leadership back", "shard", s.id)
	}
}

// handOffRequest is a hand-off request, applied, that the leader of shard
// s acts on: hand the shard over to replica to.
type handOffRequest struct {
	s  *shard
	to uint64
}

// handOffAsked runs, with s.mu held, when a hand-off request of replica to
// applies. Only the leader that serves acts on it, and only for a node of
// higher priority than itself: the shard goes quiet at once (its commands
// are held from now on), and runHandOffs does the rest.
func (s *shard) handOffAsked(to uint64) {
	n := s.node
	d := n.view()
	if !s.serving || s.leaderID != n.cfg.ID || d.rank(to) >= d.rank(n.cfg.ID) || s.handingOff || s.stopping || n.draining.Load() {
		return
	}
	s.handingOff = true
	select {
	case n.handOffs <- handOffRequest{s, to}:
	default: // not reached: a slot per shard, and handingOff keeps one request per shard
		s.handingOff = false
	}
}

// runHandOffs hands shards over as their hand-off requests applied: it
// waits for what they proposed to settle, asks Raft for the transfers (to
// a target that accepts connections), and if a transfer did not happen by
// the time Raft gives it up, serves the shard again (the puller asks again
// after pullBackoff).
func (n *Node) runHandOffs() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-n.stopC; cancel() }() // this loop returns only then
	for {
		var reqs []handOffRequest
		select {
		case <-n.stopC:
			return
		case r := <-n.handOffs:
			reqs = append(reqs, r)
		}
		// The requests that applied meanwhile go quiet and over together.
		for more := true; more; {
			select {
			case r := <-n.handOffs:
				reqs = append(reqs, r)
			default:
				more = false
			}
		}
		shards := make([]*shard, 0, len(reqs))
		byTarget := map[uint64][]*shard{}
		for _, r := range reqs {
			shards = append(shards, r.s)
			byTarget[r.to] = append(byTarget[r.to], r.s)
		}
		n.settle(ctx, shards)
		for to, group := range byTarget {
			if !n.peerAlive(ctx, to) {
				continue
			}
			if moved := n.handOver(ctx, group, to, n.transferGiveUp()); moved > 0 {
				n.log.Info("handed leadership over", "to", to, "shards", moved, "asked", true)
			}
		}
		for _, s := range shards {
			s.mu.Lock()
			if !n.draining.Load() { // a leaving node keeps them quiet
				s.handingOff = false
				if s.leaderID == n.cfg.ID {
					n.log.Info("hand-off did not happen: serving again", "shard", s.id)
					s.kickIfPending()
				}
			}
			s.mu.Unlock()
		}
	}
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
	shards := n.ledShards()
	for _, s := range shards {
		s.mu.Lock()
		s.handingOff = true
		s.mu.Unlock()
	}
	n.settle(ctx, shards)
	for _, id := range n.view().voterIDs() {
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
		if moved := n.handOver(ctx, led, id, transferPerTarget); moved > 0 {
			n.log.Info("handed leadership over", "to", id, "shards", moved)
		}
	}
}

// awaitLeaders waits, after the hand-off of a node that stops, until Raft
// names a leader for every shard (bounded by ctx and transferGiveUp): a
// shard handed over is leaderless for a moment, and its waiters and
// watches are better answered MOVED to the new leader than ERR
// unavailable.
func (n *Node) awaitLeaders(ctx context.Context) {
	if !n.clustered() {
		return
	}
	until := time.Now().Add(n.transferGiveUp())
	for time.Now().Before(until) && ctx.Err() == nil {
		leaderless := false
		for _, s := range n.shards {
			s.mu.Lock()
			leaderless = leaderless || s.leaderID == 0
			s.mu.Unlock()
		}
		if !leaderless {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// handOver asks Raft to transfer the leadership of shards to replica to,
// and again whenever Raft has given a transfer up (after electionTicks),
// until this node leads none of them or within has passed (or ctx ends).
// It returns how many moved.
func (n *Node) handOver(ctx context.Context, shards []*shard, to uint64, within time.Duration) int {
	retry := n.transferGiveUp()
	now := time.Now()
	until, asked := now.Add(within), time.Time{}
	for left := shards; len(left) > 0 && now.Before(until) && ctx.Err() == nil; left = n.ledAmong(shards) {
		if now.Sub(asked) >= retry {
			for _, s := range left {
				_ = n.nh.RequestLeaderTransfer(s.id, to)
			}
			asked = now
		}
		time.Sleep(5 * time.Millisecond)
		now = time.Now()
	}
	return len(shards) - len(n.ledAmong(shards))
}

// transferGiveUp is how long after a transfer was asked for Raft has given
// it up if it did not happen: electionTicks, and a tick to be sure.
func (n *Node) transferGiveUp() time.Duration {
	return time.Duration(electionTicks+1) * n.cfg.RTT
}

// settle waits (bounded by ctx and quietTimeout) until what the shards,
// quiet (handingOff), proposed has applied, then quietSettle for the
// followers to apply the last commit index, which the leader sent them as
// it committed.
func (n *Node) settle(ctx context.Context, shards []*shard) {
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
func (n *Node) ledShards() []*shard { return n.ledAmong(n.shards) }

// ledAmong lists those of shards this node leads now.
func (n *Node) ledAmong(shards []*shard) []*shard {
	var led []*shard
	for _, s := range shards {
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
