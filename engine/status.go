package engine

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
	"github.com/baton-dev/baton/status"
)

// What /status and /healthz say of the node. Both read the shards' atomic
// stats (metrics.go); /status also takes each shard's lock for two plain
// fields, never for a walk of its keys.

// problems lists why this node cannot serve or redirect every request: one
// line per shard whose leader it does not know. None means healthy.
func (n *Node) problems() []string {
	var out []string
	for _, s := range n.shards {
		if s.stats.leaderID.Load() == 0 {
			out = append(out, fmt.Sprintf("shard %d: no leader known", s.id))
		}
	}
	return out
}

// status is the document /status serves.
func (n *Node) status() status.Node {
	me := n.cfg.self()
	b := buildInfo()
	doc := status.Node{
		ID: n.cfg.ID, Version: b.version, Revision: b.revision, Modified: b.modified, GoVersion: runtime.Version(),
		FeatureLevel: sm.FeatureLevel, ClusterVersion: n.clusterVersion(),
		StartedAt: n.started, UptimeSeconds: time.Since(n.started).Seconds(),
		ClientAddr: me.ClientAddr, RaftAddr: me.RaftAddr,
		Problems: n.problems(),
	}
	doc.Healthy = len(doc.Problems) == 0
	members := n.view().Members
	for _, m := range members {
		doc.Peers = append(doc.Peers, status.Peer{ID: m.ID, ClientAddr: m.Client, RaftAddr: m.Raft, Role: m.Role, Self: m.ID == n.cfg.ID, Leads: []uint64{}})
	}
	for _, s := range n.shards {
		ss := status.Shard{
			ID: s.id, LeaderID: s.stats.leaderID.Load(), Role: status.RoleFollower, Term: s.stats.term.Load(),
			AppliedIndex: s.stats.applied.Load(), Held: s.stats.held.Load(), Waiters: s.stats.waiters.Load(),
		}
		if ss.LeaderID == n.cfg.ID {
			ss.Role = status.RoleLeader
		}
		for i := range doc.Peers {
			if p := &doc.Peers[i]; p.ID == ss.LeaderID {
				p.Leads = append(p.Leads, s.id)
			}
		}
		s.mu.Lock()
		ss.Serving, ss.InflightProposals = s.serving, len(s.inflight)
		s.mu.Unlock()
		doc.Held += ss.Held
		doc.Waiters += ss.Waiters
		doc.Shards = append(doc.Shards, ss)
	}
	return doc
}

// build is what the binary's build info says of it.
type build struct {
	version, revision string
	modified          bool
}

// buildInfo reads the build info once: the main module's version and, when
// the build recorded them, its VCS revision and whether the tree was clean.
var buildInfo = sync.OnceValue(func() build {
	b := build{version: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.version = info.Main.Version
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.modified":
			b.modified = s.Value == "true"
		}
	}
	return b
})
