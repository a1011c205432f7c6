package engine

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// Defaults of a node started with no flags.
const (
	DefaultClientAddr = "127.0.0.1:7700"
	DefaultRaftAddr   = "127.0.0.1:7701"
	DefaultDataDir    = "baton-data"
	// DefaultShards is 1 because every shard is a Raft group of its own,
	// with its own rounds, messages and syncs: on the machines baton is
	// measured on, 4 shards did 0.6 of what 1 does at 16 x 16 on three
	// nodes and 0.8 on one (BENCHMARKS.md, "How many shards"). More
	// shards spread the apply work and the shard locks over more cores;
	// raise --shards for a new cluster only where a profile shows one
	// shard's apply or lock is the limit.
	DefaultShards = 1
	// DefaultSnapshotEntries is how many applied entries of a shard pass
	// between two Raft snapshots. An on-disk state machine's snapshot
	// carries no table, but dragonboat still writes a snapshot file and
	// compacts the log each time; every 10,000 entries that was about once a
	// second under load and doubled the open-loop p99 (BENCHMARKS.md).
	DefaultSnapshotEntries = 100000
	// DefaultSnapshotBytes is how many bytes of entries a shard's Raft log
	// takes in before a snapshot is requested (snapshots.go), whatever
	// SnapshotEntries says: entries of 1,000 commands made 100,000 of them
	// gigabytes of log, which the log store flushed and compacted over and
	// over before the snapshot let it delete them.
	DefaultSnapshotBytes = 16 << 20
	// DefaultRTT is the Raft tick. Elections come after 10 to 20 ticks
	// without a leader (electionTicks): at 20 ms a killed leader is
	// replaced in about a quarter of a second, and a disk stall must last
	// 200 ms or more to cost a leadership (a leader's heartbeats come from
	// the worker that waits for its fsync). With the disk baton is
	// measured on stalled every second by a writer beside it, 10 ms lost
	// leaderships in 8 runs of 8 and 20 ms in 1 of 8; at 50 ms failover
	// took 0.6-0.8 s. Idle CPU falls with the tick too (BENCHMARKS.md, "The
	// Raft tick").
	DefaultRTT = 20 * time.Millisecond
)

// Peer is one member of the cluster.
type Peer struct {
	RaftAddr   string // host:port Raft traffic goes to
	ClientAddr string // host:port clients connect to (what MOVED names)
}

// String is the --peers spelling of p, RAFT_ADDR/CLIENT_ADDR.
func (p Peer) String() string { return p.RaftAddr + "/" + p.ClientAddr }

// Config is what a node needs to start.
type Config struct {
	// ID is this node's member id: at a cluster's first start, its 1-based
	// position in Peers; for a node that joins, the id `baton member add`
	// gave it.
	ID uint64
	// Peers is every member of the cluster's first start, in leadership
	// priority order (--peers). It bootstraps the cluster and nothing
	// more: from then on the membership is Raft state (members.go), and a
	// node restarts with its data dir's. nil takes the data dir's, or one
	// node on the default addresses for a new data dir; a Peers other
	// than the data dir's is ignored, with a warning.
	Peers []Peer
	// Join, when set, is this node's own addresses as a new member of a
	// running cluster (batond --join): it starts as a learner, with an
	// empty data dir and without Peers, and the cluster's leader reaches
	// it there (join.go).
	Join    *Peer
	DataDir string
	// Shards is the number of Raft groups; 0 means the value stored in
	// DataDir, or DefaultShards for a new one.
	Shards int
	// RaftListen, when set, is the address the Raft transport binds, while
	// the peers reach this node at its RaftAddr in Peers: for NAT, tunnels
	// and the fault-injecting proxies of baton's partition tests.
	RaftListen string
	// RTT is the Raft tick; 0 means DefaultRTT. Elections take 10 ticks
	// (electionTicks), a leader's heartbeats go every 2 (heartbeatTicks).
	RTT time.Duration
	// SnapshotEntries is the number of applied entries of a shard between
	// two snapshots (and log compactions); 0 means DefaultSnapshotEntries.
	SnapshotEntries uint64
	// SnapshotBytes is the size of the entries applied to a shard after
	// which a snapshot (and log compaction) is requested, even before
	// SnapshotEntries; 0 means DefaultSnapshotBytes.
	SnapshotBytes uint64
	// RaftLog is the Raft log store, RaftLogSeglog or RaftLogDragonboat;
	// "" means the one DataDir was created with, or DefaultRaftLog for a
	// new one. It cannot change for an existing data dir.
	RaftLog string
	// RaftTransport is how this node's Raft messages travel,
	// RaftTransportBaton or RaftTransportDragonboat; "" means
	// DefaultRaftTransport. Every node of a cluster must use the same
	// one: the two do not understand each other.
	RaftTransport string
	// Restore, when set, is a backup file (GET /backup, baton backup) a
	// new cluster starts from: Start checks it whole, then writes its
	// tables into the new data dir's lock table before Raft starts. A data
	// dir that has a cluster already is refused, and so is a Shards other
	// than the backup's (0 takes the backup's). Every node of the new
	// cluster starts from the same file.
	Restore string
	// Limits bound what clients can make the node hold; a zero field means
	// its default (DefaultLimits).
	Limits Limits
	Logger *slog.Logger

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

	// joinedVoter is set, from the data dir, for a node that joined and
	// has been promoted since (fromDataDir, runMembership).
	joinedVoter bool
}

// Raft log stores (Config.RaftLog).
const (
	// RaftLogSeglog is engine/seglog: dragonboat's semantics on
	// append-only segment files with an in-memory index, but a change of
	// the commit index alone is not synced (one device flush per request
	// on each node instead of two), and no memtable, flush or compaction
	// work for entries that a snapshot soon deletes (BENCHMARKS.md, "The
	// Raft log"). The default for a new data dir.
	RaftLogSeglog = "seglog"
	// RaftLogDragonboat is dragonboat's own store, in pebble, which syncs
	// every state change; data dirs created before RaftLog existed have
	// it.
	RaftLogDragonboat = "dragonboat"
	// DefaultRaftLog is the store of a new data dir.
	DefaultRaftLog = RaftLogSeglog

	// raftLogDropped is baton's pebble store (engine/raftlog, the default
	// before seglog), which batond no longer has: a data dir made with it
	// is refused (dataDir.reconcile), and so is the flag.
	raftLogDropped = "baton"
)

// CheckRaftLog says whether name is a Raft log store batond has (""
// meaning the data dir's or the default); its error is one line for a
// bad --raft-log.
func CheckRaftLog(name string) error {
	switch name {
	case "", RaftLogSeglog, RaftLogDragonboat:
		return nil
	case raftLogDropped:
		return fmt.Errorf("--raft-log %s: baton's pebble store is no longer part of batond; want %s (the default) or %s", name, RaftLogSeglog, RaftLogDragonboat)
	}
	return fmt.Errorf("--raft-log %q: want %s (the default) or %s", name, RaftLogSeglog, RaftLogDragonboat)
}

// Raft transports (Config.RaftTransport).
const (
	// RaftTransportBaton is engine/raftnet: a frame per message batch,
	// written with one system call and read through a buffer.
	RaftTransportBaton = "baton"
	// RaftTransportDragonboat is dragonboat's own TCP transport, which
	// makes three writes of each batch.
	RaftTransportDragonboat = "dragonboat"
	// DefaultRaftTransport is the transport when none is named.
	DefaultRaftTransport = RaftTransportBaton
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
		out[i] = p.String()
	}
	return out
}

// self is this node's own addresses: its entry of Peers, or Join.
func (c *Config) self() Peer {
	if c.Join != nil {
		return *c.Join
	}
	return c.Peers[c.ID-1]
}

// fromDataDir takes the node's identity from its data dir's settings when
// it has them (a restart needs --id and --data alone: existing), and
// checks the flags of a first start: --join takes an empty data dir and no
// --peers.
func (c *Config) fromDataDir() (existing bool, err error) {
	have, ok, err := peekSettings(c.DataDir)
	if err != nil {
		return false, err
	}
	if !ok {
		switch {
		case c.Join != nil && c.Peers != nil:
			return false, errors.New("--join and --peers: a joining node has its addresses from --join and the cluster's from its leader")
		case c.Join != nil && c.Restore != "":
			return false, errors.New("--join and --restore: a joining node receives the cluster's table from its leader")
		case c.Join == nil && c.Peers == nil:
			c.Peers = []Peer{{RaftAddr: DefaultRaftAddr, ClientAddr: DefaultClientAddr}}
		}
		return false, nil
	}
	switch {
	case c.Join != nil:
		return true, fmt.Errorf("--join: data dir %s has a cluster's data already (%s); a node joins with an empty data dir", c.DataDir, settingsFile)
	case c.ID != have.ID:
		return true, fmt.Errorf("data dir %s belongs to node --id %d; refusing to start as --id %d", c.DataDir, have.ID, c.ID)
	}
	stored, err := ParsePeers(strings.Join(have.Peers, ","))
	if have.Join != "" {
		var join []Peer
		join, err = ParsePeers(have.Join)
		if err == nil {
			c.Join, stored = &join[0], nil
		}
	}
	if err != nil {
		return true, fmt.Errorf("data dir %s: %s is damaged: %v", c.DataDir, settingsFile, err)
	}
	if c.Peers != nil && !slices.Equal(c.peerStrings(), have.Peers) {
		c.Logger.Warn("--peers differs from the data dir's and is ignored: a member restarts on the addresses it was created with (baton member list shows every member's)",
			"given", joinPeers(c.peerStrings()), "data_dir", joinPeers(have.Peers))
	}
	c.Peers, c.joinedVoter = stored, have.Voter
	return true, nil
}

// raftListen is the address the Raft transport binds.
func (c *Config) raftListen() string {
	if c.RaftListen != "" {
		return c.RaftListen
	}
	return c.self().RaftAddr
}

func joinPeers(p []string) string { return strings.Join(p, ",") }

func (c *Config) validate() error {
	switch {
	case c.Join == nil && len(c.Peers) == 0:
		return errors.New("no peers")
	case c.Join == nil && (c.ID < 1 || c.ID > uint64(len(c.Peers))):
		return fmt.Errorf("--id %d is not a position in --peers (1..%d)", c.ID, len(c.Peers))
	case c.Join != nil && c.ID < 1:
		return errors.New("--join needs the --id that baton member add gave the new member")
	case c.Shards < 0 || c.Shards > sm.MaxShards:
		return fmt.Errorf("--shards %d out of range 1..%d", c.Shards, sm.MaxShards)
	case c.DataDir == "":
		return errors.New("--data is empty")
	case CheckRaftLog(c.RaftLog) != nil:
		return CheckRaftLog(c.RaftLog)
	case c.RaftTransport != "" && c.RaftTransport != RaftTransportBaton && c.RaftTransport != RaftTransportDragonboat:
		return fmt.Errorf("--raft-transport %q: want %s or %s", c.RaftTransport, RaftTransportBaton, RaftTransportDragonboat)
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	if c.RaftListen != "" {
		if _, port, err := net.SplitHostPort(c.RaftListen); err != nil || port == "" {
			return fmt.Errorf("--raft-listen: bad address %q", c.RaftListen)
		}
	}
	return c.validateSecurity()
}

// Limits bound what clients can make a node hold, so that no client can
// take its memory. Past each, the request that would go beyond it is
// answered ERR overloaded (a connection past MaxConns is closed at once);
// docs/protocol.md lists them with their flags. Each is checked in one
// place, named beside it.
type Limits struct {
	// MaxConns is the number of client connections open at once, plain
	// and TLS (Node.openConn).
	MaxConns int
	// MaxWaitersPerConn is the number of unanswered acquires of one
	// connection (connState.addWaiter).
	MaxWaitersPerConn int
	// MaxWaitersPerKey is the number of acquires waiting for one key; an
	// acquire whose owner already waits for the key takes no place and is
	// let in (shard.keyFull).
	MaxWaitersPerKey int
	// MaxWaiters is the number of unanswered acquires on the node, over
	// every connection (connState.addWaiter).
	MaxWaiters int
	// MaxPendingQueries is the number of queries of a shard waiting for a
	// ReadIndex (shard.queueRead).
	MaxPendingQueries int
	// MaxProposalsInFlight is the number of proposals of a shard handed to
	// Raft whose outcome the node has not collected; while it is reached,
	// commands wait in the shard's batch (shard.resultsAreFull).
	MaxProposalsInFlight int
	// MaxPendingCommands is the number of commands of a shard not committed
	// yet: batched, or proposed to Raft (shard.batchFull).
	MaxPendingCommands int
	// MaxUnsentPerConn is the number of bytes of answers one connection has
	// not taken; past it the connection is cut off (connState and
	// unsentLedger.settle).
	MaxUnsentPerConn int
	// MaxUnsent is the same over every connection of the node; past it the
	// connections with the most unsent bytes are cut off (unsentLedger).
	MaxUnsent int
	// MaxWatchesPerConn is the number of keys one connection watches
	// (connState.addWatch).
	MaxWatchesPerConn int
	// MaxWatches is the number of watches on the node, over every
	// connection (connState.addWatch).
	MaxWatches int
}

// DefaultLimits are the limits of a node started without limit flags.
func DefaultLimits() Limits {
	return Limits{
		MaxConns:             50_000,
		MaxWaitersPerConn:    100_000,
		MaxWaitersPerKey:     10_000,
		MaxWaiters:           1_000_000,
		MaxPendingQueries:    1 << 16,
		MaxProposalsInFlight: 4096,
		MaxPendingCommands:   1 << 16,
		MaxUnsentPerConn:     4 << 20,
		MaxUnsent:            256 << 20,
		MaxWatchesPerConn:    100_000,
		MaxWatches:           1_000_000,
	}
}

// maxProposalsInFlight caps MaxProposalsInFlight: it is the capacity of a
// channel per shard, allocated at start.
const maxProposalsInFlight = 1 << 20

// limitField is one limit and its flag name.
type limitField struct {
	flag string
	v    *int
}

// limitFields lists every limit with its flag name, in the order of
// limitKind, for validation, the start-up line and the log of limits hit.
func (l *Limits) limitFields() [numLimits]limitField {
	return [numLimits]limitField{
		{"max-conns", &l.MaxConns},
		{"max-waiters-per-conn", &l.MaxWaitersPerConn},
		{"max-waiters-per-key", &l.MaxWaitersPerKey},
		{"max-waiters", &l.MaxWaiters},
		{"max-pending-queries", &l.MaxPendingQueries},
		{"max-proposals-in-flight", &l.MaxProposalsInFlight},
		{"max-pending-commands", &l.MaxPendingCommands},
		{"max-unsent-per-conn", &l.MaxUnsentPerConn},
		{"max-unsent", &l.MaxUnsent},
		{"max-watches-per-conn", &l.MaxWatchesPerConn},
		{"max-watches", &l.MaxWatches},
	}
}

// withDefaults fills every zero limit with its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	dv := d.limitFields()
	for i, f := range l.limitFields() {
		if *f.v == 0 {
			*f.v = *dv[i].v
		}
	}
	return l
}

// Validate reports a limit below 1, or a MaxProposalsInFlight too large, in
// the words of the flags. (Start takes a zero limit for its default; a
// command line must not, as 0 would not mean that to whoever wrote it.)
func (l Limits) Validate() error {
	for _, f := range l.limitFields() {
		if *f.v < 1 {
			return fmt.Errorf("--%s %d: must be at least 1", f.flag, *f.v)
		}
	}
	if l.MaxProposalsInFlight > maxProposalsInFlight {
		return fmt.Errorf("--max-proposals-in-flight %d: at most %d", l.MaxProposalsInFlight, maxProposalsInFlight)
	}
	return nil
}

// LogValue implements slog.LogValuer: the limits as a group of the start-up
// line, by flag name.
func (l Limits) LogValue() slog.Value {
	fields := l.limitFields()
	attrs := make([]slog.Attr, len(fields))
	for i, f := range fields {
		attrs[i] = slog.Int(f.flag, *f.v)
	}
	return slog.GroupValue(attrs...)
}
