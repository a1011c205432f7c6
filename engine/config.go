package engine

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// Defaults of a node started with no flags.
const (
	DefaultClientAddr = "127.0.0.1:7700"
	DefaultRaftAddr   = "127.0.0.1:7701"
	DefaultDataDir    = "baton-data"
	DefaultShards     = 4
	// DefaultSnapshotEntries is how many applied entries of a shard pass
	// between two Raft snapshots. An on-disk state machine's snapshot
	// carries no table, but dragonboat still writes a snapshot file and
	// compacts the log each time; every 10,000 entries that was about once a
	// second under load and doubled the open-loop p99 (BENCHMARKS.md).
	DefaultSnapshotEntries = 100000
)

// Peer is one member of the cluster.
type Peer struct {
	RaftAddr   string // host:port Raft traffic goes to
	ClientAddr string // host:port clients connect to (what MOVED names)
}

// Config is what a node needs to start.
type Config struct {
	ID      uint64 // 1-based position of this node in Peers
	Peers   []Peer // every member, in leadership priority order
	DataDir string
	// Shards is the number of Raft groups; 0 means the value stored in
	// DataDir, or DefaultShards for a new one.
	Shards int
	// RaftListen, when set, is the address the Raft transport binds, while
	// the peers reach this node at its RaftAddr in Peers: for NAT, tunnels
	// and the fault-injecting proxies of baton's partition tests.
	RaftListen string
	// RTT is the Raft tick; elections take 10 ticks, heartbeats 1.
	RTT time.Duration
	// SnapshotEntries is the number of applied entries of a shard between
	// two snapshots (and log compactions); 0 means DefaultSnapshotEntries.
	SnapshotEntries uint64
	// RaftLog is the Raft log store, RaftLogBaton or RaftLogDragonboat;
	// "" means the one DataDir was created with, or DefaultRaftLog for a
	// new one. It cannot change for an existing data dir.
	RaftLog string
	Logger  *slog.Logger

	// Access control and TLS (protocol 1.2; security.go).

	// AuthSecret, when set, is the shared secret every client connection
	// must send first ("H <secret>"); codec.ParseSecret reads it from a
	// file.
	AuthSecret []byte
	// TLSListen, when set, is a second client address, served over TLS,
	// on top of this node's ClientAddr.
	TLSListen string
	// TLS is the server configuration of TLSListen (LoadClientTLS makes
	// one from PEM files).
	TLS *tls.Config
	// TLSPeers, when set, is the TLS client address of every member, in
	// the order of Peers: a request that came over TLS is sent there by
	// MOVED. Without it, MOVED names the members' ClientAddr. TLSListen
	// defaults to this node's entry.
	TLSPeers []string
	// RaftTLS, when set, makes the Raft transport mutual TLS.
	RaftTLS *RaftTLS
}

// Raft log stores (Config.RaftLog).
const (
	// RaftLogBaton is engine/raftlog: dragonboat's semantics, but a change
	// of the commit index alone is not synced (one device flush per request
	// on each node instead of two; BENCHMARKS.md).
	RaftLogBaton = "baton"
	// RaftLogDragonboat is dragonboat's own store, which syncs every state
	// change; data dirs created before RaftLog existed have it.
	RaftLogDragonboat = "dragonboat"
	// DefaultRaftLog is the store of a new data dir.
	DefaultRaftLog = RaftLogBaton
)

// ParsePeers parses the --peers syntax: RAFT_ADDR/CLIENT_ADDR entries,
// comma-separated, in priority order.
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	seen := map[string]bool{}
	for i, entry := range strings.Split(s, ",") {
		raft, client, ok := strings.Cut(strings.TrimSpace(entry), "/")
		if !ok {
			return nil, fmt.Errorf("peer %d %q: want RAFT_ADDR/CLIENT_ADDR", i+1, entry)
		}
		for _, a := range []string{raft, client} {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				return nil, fmt.Errorf("peer %d %q: bad address %q", i+1, entry, a)
			}
			if seen[a] {
				return nil, fmt.Errorf("peer %d %q: address %s appears twice", i+1, entry, a)
			}
			seen[a] = true
		}
		peers = append(peers, Peer{RaftAddr: raft, ClientAddr: client})
	}
	return peers, nil
}

func (c *Config) peerStrings() []string {
	out := make([]string, len(c.Peers))
	for i, p := range c.Peers {
		out[i] = p.RaftAddr + "/" + p.ClientAddr
	}
	return out
}

// raftListen is the address the Raft transport binds.
func (c *Config) raftListen() string {
	if c.RaftListen != "" {
		return c.RaftListen
	}
	return c.Peers[c.ID-1].RaftAddr
}

func joinPeers(p []string) string { return strings.Join(p, ",") }

func (c *Config) validate() error {
	switch {
	case len(c.Peers) == 0:
		return errors.New("no peers")
	case c.ID < 1 || c.ID > uint64(len(c.Peers)):
		return fmt.Errorf("--id %d is not a position in --peers (1..%d)", c.ID, len(c.Peers))
	case c.Shards < 0 || c.Shards > sm.MaxShards:
		return fmt.Errorf("--shards %d out of range 1..%d", c.Shards, sm.MaxShards)
	case c.DataDir == "":
		return errors.New("--data is empty")
	case c.RaftLog != "" && c.RaftLog != RaftLogBaton && c.RaftLog != RaftLogDragonboat:
		return fmt.Errorf("--raft-log %q: want %s or %s", c.RaftLog, RaftLogBaton, RaftLogDragonboat)
	}
	if c.RaftListen != "" {
		if _, port, err := net.SplitHostPort(c.RaftListen); err != nil || port == "" {
			return fmt.Errorf("--raft-listen: bad address %q", c.RaftListen)
		}
	}
	return c.validateSecurity()
}
