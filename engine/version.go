package engine

import (
	"context"
	"math"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// The cluster version (statemachine.FeatureLevel) is agreed shard by shard
// through the log. Every node reports its build's level in each shard
// once per leader term it sees (a level report: after a restart, and after
// every election, so that whoever leads has heard from every node since it
// could have missed a report in a snapshot it recovered from, or a node
// could have been restarted with another build). The leader that serves a
// shard raises its version (a raise) to the lowest level among the
// shard's members, voters and learners, once every one has reported one
// above the shard's version; a member that never reports (a build of
// level 1) holds the version at 1. Reports are the engine's, not the table's: only the raise
// changes the table, so replicas that saw different reports stay alike.

const (
	// versionInterval is how often a node looks for reports to send and
	// versions to raise: a raise comes within about two of them of the
	// last voter's report.
	versionInterval = 500 * time.Millisecond
	// reportBackoff spaces two reports of this node in one shard whose
	// outcome it has not seen applied.
	reportBackoff = 2 * time.Second
	// requestTimeout bounds a proposal of this node's own (propose), and
	// the membership read before a raise.
	requestTimeout = 2 * time.Second
)

// runVersion sends this node's level reports and, where it leads, raises
// the shards' versions, every versionInterval.
func (n *Node) runVersion() {
	t := time.NewTicker(versionInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stopC:
			return
		case <-t.C:
		}
		for _, s := range n.shards {
			if s.shouldReport(time.Now()) {
				n.propose(s, sm.Header{Proposer: n.cfg.ID, Report: true, Level: sm.FeatureLevel}, "level report")
			}
			if level := n.raiseTo(s); level > 0 {
				if n.propose(s, sm.Header{Proposer: n.cfg.ID, Raise: true, Level: level}, "raise") {
					n.log.Info("raised the cluster version", "shard", s.id, "version", level)
				}
			}
		}
	}
}

// shouldReport reports whether this node should send its level report to
// the shard now (a leader is known, and no report of ours has applied in
// its term), and records the attempt.
func (s *shard) shouldReport(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaderID == 0 || s.stopping || s.reportedTerm == s.stats.term.Load() || now.Sub(s.lastReport) < reportBackoff {
		return false
	}
	s.lastReport = now
	return true
}

// raiseTo is the version this node should raise the shard to now, or 0:
// only where it leads and serves, and only once every voter and learner of
// the shard (its Raft membership) has reported a level above the shard's
// version.
func (n *Node) raiseTo(s *shard) uint64 {
	s.mu.Lock()
	serving, current := s.serving && !s.handingOff, s.stats.clusterVersion.Load()
	s.mu.Unlock()
	if !serving || current >= sm.FeatureLevel {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	m, err := n.nh.SyncGetShardMembership(ctx, s.id)
	if err != nil {
		return 0
	}
	// Learners too: they receive the log and snapshots in the formats the
	// version allows, like the voters.
	voters := make([]uint64, 0, len(m.Nodes)+len(m.NonVotings))
	for id := range m.Nodes {
		voters = append(voters, id)
	}
	for id := range m.NonVotings {
		voters = append(voters, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	level := s.lowestLevel(voters)
	if level <= s.stats.clusterVersion.Load() {
		return 0
	}
	return level
}

// lowestLevel is the lowest level among voters, as their reports said:
// this node's is its build's, and a voter without a report counts as 1,
// the level of every build from before reports. Called with s.mu held.
func (s *shard) lowestLevel(voters []uint64) uint64 {
	lowest := uint64(sm.FeatureLevel)
	for _, id := range voters {
		l := s.levels[id]
		if id == s.node.cfg.ID {
			l = sm.FeatureLevel
		}
		lowest = min(lowest, max(l, 1))
	}
	return lowest
}

// levelApplied runs, with s.mu held, when a level report or a raise of the
// shard applies, on every replica.
func (s *shard) levelApplied(h sm.Header) {
	n := s.node
	switch {
	case h.Report:
		s.levels[h.Proposer] = h.Level
		if h.Proposer == n.cfg.ID && h.Level == sm.FeatureLevel {
			s.reportedTerm = s.stats.term.Load()
		}
	case h.Raise:
		v := s.table.ClusterVersion()
		s.stats.clusterVersion.Store(v)
		if v > sm.FeatureLevel {
			n.fail(sm.TooOld(s.id, v))
		}
	}
}

// propose proposes an entry without commands of this node's (a hand-off
// request, a level report, a raise) to the shard, which dragonboat
// forwards to the leader, and reports whether it applied within
// requestTimeout; what names it in the debug line of a failure.
func (n *Node) propose(s *shard, h sm.Header, what string) bool {
	var b sm.Batch
	rs, err := n.nh.Propose(n.sessions[s.id-1], b.Seal(h), requestTimeout)
	if err != nil {
		n.log.Debug(what+" not proposed", "shard", s.id, "err", err)
		return false
	}
	ok, _ := n.completed(rs)
	return ok
}

// clusterVersion is the node's view of the cluster's version: the lowest
// among its shards' (they are raised one by one).
func (n *Node) clusterVersion() uint64 {
	v := uint64(math.MaxUint64)
	for _, s := range n.shards {
		v = min(v, s.stats.clusterVersion.Load())
	}
	return v
}
