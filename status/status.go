// Package status is the JSON document a batond node serves at /status: who
// the node is, which build it runs, its peers and which of them lead which
// shards, and each shard as this node sees it. batond fills it in (engine)
// and `baton status` prints it, so that both read one definition.
//
// Every figure comes from counters the node keeps as things happen, never
// from a walk of its lock table, so the document costs the same at any size.
package status

import "time"

// Node is the whole document.
type Node struct {
	// ID is this node's 1-based position in --peers.
	ID uint64 `json:"id"`
	// Version is the main module's version from the build info: a tag, or
	// "(devel)" for a build from a checkout.
	Version string `json:"version"`
	// Revision is the VCS revision the binary was built from, when the
	// build recorded one; Modified says the work tree had changes.
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	// FeatureLevel is the highest cluster version the node's build can
	// take part in; ClusterVersion is the cluster's, as this node has
	// applied it: the level of the cluster's oldest voter, agreed through
	// Raft (the lowest among the shards, which are raised one by one).
	// Formats newer than ClusterVersion are not used yet; a build whose
	// FeatureLevel is below it cannot join the cluster.
	FeatureLevel   uint64 `json:"feature_level"`
	ClusterVersion uint64 `json:"cluster_version"`
	// StartedAt is when the node started; UptimeSeconds is how long ago.
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	ClientAddr    string    `json:"client_addr"`
	RaftAddr      string    `json:"raft_addr"`
	// Held and Waiters are the sums over the shards.
	Held    int64 `json:"held"`
	Waiters int64 `json:"waiters"`
	// Healthy is what /healthz answers: a leader is known for every shard,
	// so that this node can serve or redirect every request. Problems says
	// why not, one line per shard.
	Healthy  bool     `json:"healthy"`
	Problems []string `json:"problems,omitempty"`
	Peers    []Peer   `json:"peers"`
	Shards   []Shard  `json:"shards"`
}

// Peer is one member of the cluster, from --peers.
type Peer struct {
	ID         uint64 `json:"id"`
	ClientAddr string `json:"client_addr"`
	RaftAddr   string `json:"raft_addr"`
	// Role is "voter" or "learner" (protocol 1.3).
	Role string `json:"role"`
	// Self marks the node that serves the document.
	Self bool `json:"self,omitempty"`
	// Leads lists the shards this peer leads, as this node knows it.
	Leads []uint64 `json:"leads"`
}

// Roles of a shard's replica on this node (Shard.Role).
const (
	RoleLeader   = "leader"
	RoleFollower = "follower"
)

// Shard is one Raft group as this node sees it.
type Shard struct {
	ID uint64 `json:"id"`
	// LeaderID is the peer that leads the shard, 0 while none is known.
	LeaderID uint64 `json:"leader_id"`
	// Role is RoleLeader when this node leads the shard, else
	// RoleFollower.
	Role string `json:"role"`
	// Serving: this node leads the shard and serves it (the entry that
	// starts its term has applied).
	Serving bool `json:"serving"`
	// Term is the Raft term of the last leader change this node saw.
	Term uint64 `json:"term"`
	// AppliedIndex is the Raft index of the last entry this replica
	// applied since it started (0 before the first).
	AppliedIndex uint64 `json:"applied_index"`
	// Held is the number of locks the shard's table holds, as applied on
	// this replica (followers apply too, so it is right on every node).
	Held int64 `json:"held"`
	// Waiters is the number of acquires on this node's connections that
	// wait for their answer (only a leader has any).
	Waiters int64 `json:"waiters"`
	// InflightProposals is the number of Raft entries this node proposed
	// for the shard and has not seen applied.
	InflightProposals int `json:"inflight_proposals"`
}
