// Package engine is everything between the network and Raft: the gnet event
// handler that parses pipelined requests, routing of keys to shards, the
// per-shard batching of commands into Raft proposals, the leader-local FIFO
// wait queues, wait and lease timers, and leadership (MOVED).
//
// A request's path: OnTraffic (server.go) splits and parses lines in place
// with codec, routes each by key to a shard (route.go) and hands it to the
// shard (shard.go), which answers at once (Q, MOVED, try-lock TIMEOUT) or
// appends a command to the shard's pending batch. The shard's proposer
// goroutine proposes the batch as one Raft entry. When the entry applies,
// the state machine calls the node's Observer methods on every replica; the
// shard updates its view of the table and, on the node that proposed the
// entry, answers the requesters: the apply goroutine writes each
// connection's answers of the entry to its socket itself, in one write,
// and leaves to the connection's event loop only what the socket does not
// take (conn.go).
//
// The shard's view of the table is the table itself: one index of held keys
// per shard, the state machine's (statemachine.Table), which the shard reads
// under its mu. The state machine changes the table only with that mu held
// (Node.Locker), from the change of each entry to the end of its Applied,
// so the shard never sees a change it has not been told of, nor is told of
// one it cannot see. What the engine adds per held key is its lease
// deadline, by the table's slot (leases.go: 12 bytes, and 4 in the heap on
// the leader); the working state of a key (keys.go: its queue of waiters,
// its commands in flight) exists only while the key is busy, and for a
// while after if it is held (at most 4,096 such per shard: busy.go).
// Followers keep the committed holders too (they are the table) and their
// deadlines, from which a new leader restarts every lease (startServing).
//
// Lock order: proposeMu, then shard.mu, then the state machine's own table
// lock (statemachine's onDisk.mu, which Update takes inside shard.mu), then
// a connState's mu, then the unsent ledger's mu (unsentLedger).
//
// A shard serves (leadership.go) while this node leads it and holds its
// fence: a new leader proposes a fence and serves once it applies, and
// stops when another node's fence applies or a batch of its own comes back
// Fenced (statemachine: The fence). So a deposed leader that has not heard
// the news yet cannot change the table from its stale view, even though
// dragonboat forwards what it proposes to the new leader.
//
// Every queue a client can fill is bounded by Config.Limits: admission.go
// holds the limits and the node-wide counts, limitlog.go logs the limits
// hit, unsent.go bounds the answers clients do not take.
//
// Dragonboat keeps each shard's Raft log in the store Config.RaftLog names:
// engine/seglog, baton's own (segment files; it does not sync a change of
// the commit index alone), or dragonboat's, in pebble
// (raftStorageConfig); snapshots.go keeps that log short in bytes as well
// as in entries. Raft messages travel
// by the transport Config.RaftTransport names: engine/raftnet, baton's own
// (a frame per message batch, one write system call each), or
// dragonboat's TCP transport.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/baton-dev/baton/engine/raftnet"
	"github.com/baton-dev/baton/engine/seglog"
	"github.com/baton-dev/baton/engine/stagetrace"
	sm "github.com/baton-dev/baton/statemachine"
)

// Node is one running batond: its data dir, its replicas of every shard and
// its client listener.
type Node struct {
	cfg        Config
	log        *slog.Logger
	tracing    bool // the log takes debug lines: the shards trace lease decisions (trace.go)
	dir        *dataDir
	db         *pebble.DB
	nh         *dragonboat.NodeHost
	raft       proposer    // nh, where proposals go
	snapshots  snapshotter // nh, which takes snapshots on request
	shards     []*shard    // shards[id-1]
	proposerID uint64      // random per start: tells our entries from replays
	sessions   []*client.Session
	server     *server
	tlsServer  *tlsServer // nil without Config.TLSListen
	metrics    *nodeMetrics
	adm        *admission // the limits, and the counts they bound
	started    time.Time
	backupMu   sync.Mutex    // held while GET /backup streams (serveBackup)
	lastHeard  sync.Map      // member id -> *atomic.Int64, monoNow of its last Raft message (heard)
	logdb      raftio.ILogDB // the NodeHost's log store when it is one of baton's (keptLogDB), else nil
	freshStart bool          // this run bootstrapped an empty data dir from --peers (heard)

	// Access control (serve.go).
	secretHash        []byte   // hashSecret(Config.AuthSecret); nil: no H needed
	refusals          logLimit // H refused
	handshakeFailures logLimit // TLS handshakes that failed

	draining atomic.Bool         // stopping: hand leadership off, never pull it
	leaving  atomic.Bool         // removed or being removed from the cluster: answer ERR unavailable (membership.go)
	failed   chan error          // why the node cannot go on (fail), buffered for the first
	handOffs chan handOffRequest // applied hand-off requests for runHandOffs: a slot per shard (cluster.go)

	// Membership (members.go, membership.go, join.go).
	members    atomic.Pointer[directory] // the view: shard 1's applied directory, or the bootstrap one
	dirChanged chan struct{}             // a slot: the view changed, for runMembership
	changing   chan struct{}             // a slot, held by the coordinator while it carries out or checks a change (lockChange); taken before any shard's mu
	stopOnce   sync.Once
	stopC      chan struct{}
	loops      sync.WaitGroup // timer, proposer and snapshotter goroutines (and the others that stop with stopC)
	watchers   sync.WaitGroup // result watchers, which outlive Raft's close
}

// Start opens the data dir, starts this node's replica of every shard and
// listens for clients. It returns once the client port is bound, or an
// error that says in one line why the node cannot start.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RTT <= 0 {
		cfg.RTT = DefaultRTT
	}
	if cfg.SnapshotEntries == 0 {
		cfg.SnapshotEntries = DefaultSnapshotEntries
	}
	if cfg.SnapshotBytes == 0 {
		cfg.SnapshotBytes = DefaultSnapshotBytes
	}
	if cfg.RaftTransport == "" {
		cfg.RaftTransport = DefaultRaftTransport
	}
	cfg.Limits = cfg.Limits.withDefaults()
	existing, err := cfg.fromDataDir()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.TLSListen = cfg.tlsListen()
	// A data dir that holds a node is locked first, so that a second
	// batond on it is told so rather than that its ports are taken.
	var dir *dataDir
	if existing {
		if dir, err = openDataDir(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.checkPorts(); err != nil {
		if dir != nil {
			dir.close()
		}
		return nil, err
	}
	if !existing {
		// Checked before any state is touched, so that a refused first
		// start leaves no data dir behind.
		if cfg.Restore != "" {
			if err := checkRestore(&cfg); err != nil {
				return nil, err
			}
		}
		if cfg.Join == nil && len(cfg.Peers) > 1 {
			if err := (&Node{cfg: cfg}).probePeers(); err != nil {
				return nil, err
			}
		}
		if dir, err = openDataDir(&cfg); err != nil {
			return nil, err
		}
	}
	n := &Node{cfg: cfg, log: cfg.Logger, dir: dir, freshStart: !existing && cfg.Join == nil, stopC: make(chan struct{}), failed: make(chan error, 1), started: time.Now(),
		secretHash: hashSecret(cfg.AuthSecret)}
	n.tracing = n.log.Enabled(context.Background(), slog.LevelDebug)
	n.adm = newAdmission(cfg.Limits, n.log)
	n.metrics = newNodeMetrics()
	if err := n.start(); err != nil {
		n.closeStorage()
		return nil, err
	}
	return n, nil
}

func (n *Node) start() error {
	var err error
	var b [8]byte
	_, _ = rand.Read(b[:])
	n.proposerID = binary.LittleEndian.Uint64(b[:]) | 1 // never 0
	if stagetrace.On {
		stagetrace.SetNode(n.cfg.ID)
		sm.SetUpdateHook(stagetrace.Updating)
	}

	if n.db, err = sm.OpenDB(filepath.Join(n.cfg.DataDir, tableDir)); err != nil {
		return fmt.Errorf("open lock table: %w", err)
	}
	// Before any replica starts: a build too old for the data dir must
	// not apply a single entry of it.
	if _, err := sm.StoredClusterVersion(n.db); err != nil {
		return fmt.Errorf("data dir %s: %w", n.cfg.DataDir, err)
	}
	quietDragonboat(n.log)
	if n.cfg.Join != nil && n.cfg.Shards == 0 {
		if err := n.learnShards(); err != nil {
			return err
		}
	}
	for id := 1; id <= n.cfg.Shards; id++ {
		n.shards = append(n.shards, newShard(n, uint64(id)))
	}
	n.handOffs = make(chan handOffRequest, len(n.shards))
	n.dirChanged = make(chan struct{}, 1)
	n.changing = make(chan struct{}, 1)
	n.members.Store(n.bootstrapView())
	n.registerGauges()
	me := n.cfg.self()
	n.nh, err = newNodeHost(n.nodeHostConfig(true))
	if err != nil {
		return fmt.Errorf("start raft on %s: %w", n.cfg.raftListen(), err)
	}
	n.raft = n.nh
	n.snapshots = n.nh
	create := sm.Factory(n.db, n)
	for _, s := range n.shards {
		members, join, learner := n.replicaStart(s.id)
		if err := n.nh.StartOnDiskReplica(members, join, create, n.replicaConfig(s.id, learner)); err != nil {
			return fmt.Errorf("start shard %d: %w", s.id, err)
		}
		n.sessions = append(n.sessions, n.nh.GetNoOPSession(s.id))
	}
	for _, s := range n.shards {
		n.loops.Add(3)
		go func() { defer n.loops.Done(); s.runTimers(n.stopC) }()
		go func() { defer n.loops.Done(); n.runProposer(s) }()
		go func() { defer n.loops.Done(); n.runSnapshots(s) }()
		n.watchers.Add(1)
		go func() { defer n.watchers.Done(); n.watchResults(s) }()
		// Even on a single node: members can be added while it runs.
		n.loops.Add(1)
		go func() { defer n.loops.Done(); n.runReads(s) }()
	}
	n.loops.Add(6)
	go func() { defer n.loops.Done(); n.runPriority() }()
	go func() { defer n.loops.Done(); n.runHandOffs() }()
	go func() { defer n.loops.Done(); n.runMembership() }()
	go func() { defer n.loops.Done(); n.runVersion() }()
	go func() { defer n.loops.Done(); n.adm.hits.run(n.stopC) }()
	go func() { defer n.loops.Done(); n.adm.unsent.runSweeper(n.stopC) }()
	n.server = newServer(n)
	if err := n.server.start(me.ClientAddr); err != nil {
		return fmt.Errorf("cannot listen on %s: %w", me.ClientAddr, unwrapSyscall(err))
	}
	if n.cfg.TLSListen != "" {
		if n.tlsServer, err = startTLS(n, n.cfg.TLSListen, n.cfg.TLS); err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = n.server.stop(ctx)
			cancel()
			return fmt.Errorf("cannot listen on %s: %w", n.cfg.TLSListen, unwrapSyscall(err))
		}
	}
	n.logStarted()
	n.warnIfOpen()
	return nil
}

// newNodeHost is dragonboat.NewNodeHost.
var newNodeHost = dragonboat.NewNodeHost

// nodeHostConfig is the configuration of the node's NodeHost; metrics
// says whether it registers dragonboat's series (once per process: a
// second registration of a name panics).
func (n *Node) nodeHostConfig(metrics bool) config.NodeHostConfig {
	nhc := config.NodeHostConfig{
		NodeHostDir:         filepath.Join(n.cfg.DataDir, raftDir),
		RTTMillisecond:      uint64(n.cfg.RTT / time.Millisecond),
		RaftAddress:         n.cfg.self().RaftAddr,
		ListenAddress:       n.cfg.raftListen(),
		RaftEventListener:   n,
		SystemEventListener: snapshotSends{n},
		EnableMetrics:       metrics, // dragonboat's series, in the library's default set (/metrics)
		Expert:              raftStorageConfig(n.cfg.RaftLog, n.metrics.raftLogSaved),
	}
	if f := nhc.Expert.LogDBFactory; f != nil {
		nhc.Expert.LogDBFactory = &keptLogDB{LogDBFactory: f, node: n}
	}
	if n.cfg.RaftTransport == RaftTransportBaton {
		nhc.Expert.TransportFactory = &raftnet.Factory{Log: n.log, Heard: n.heard}
	}
	if n.cfg.RaftTLS != nil {
		n.cfg.RaftTLS.apply(&nhc)
	}
	return nhc
}

// keptLogDB keeps the log store a NodeHost opens with a factory of
// baton's (n.logdb), so that the node can read a shard's last snapshot
// before it starts its replica (startsAsLearner).
type keptLogDB struct {
	config.LogDBFactory
	node *Node
}

func (k *keptLogDB) Create(cfg config.NodeHostConfig, cb config.LogDBCallback, dirs, wals []string) (raftio.ILogDB, error) {
	db, err := k.LogDBFactory.Create(cfg, cb, dirs, wals)
	k.node.logdb = db
	return db, err
}

// replicaConfig is the configuration of this node's replica of shard, a
// learner's or a voter's.
func (n *Node) replicaConfig(shard uint64, learner bool) config.Config {
	return config.Config{
		ReplicaID:    n.cfg.ID,
		ShardID:      shard,
		IsNonVoting:  learner,
		ElectionRTT:  electionTicks,
		HeartbeatRTT: heartbeatTicks,
		CheckQuorum:  true,
		// A node cut off from the others must not disrupt them with ever
		// higher terms when it comes back.
		PreVote: true,
		// A membership change names the one it follows, so that two
		// racing changes cannot both apply (membership.go).
		OrderedConfigChange: true,
		// The engine takes every snapshot itself, after SnapshotEntries
		// entries as after SnapshotBytes, and none while it streams one to
		// a replica that catches up (snapshots.go): 0 turns dragonboat's
		// own off. The overhead is what a replica keeps of its log after
		// it recovered from a snapshot.
		SnapshotEntries:    0,
		CompactionOverhead: keptAfterSnapshot(n.cfg.SnapshotEntries),
	}
}

// checkPorts fails fast, with one line, when a port the node is to bind
// is taken.
func (c *Config) checkPorts() error {
	for _, a := range []string{c.self().ClientAddr, c.raftListen(), c.TLSListen} {
		if a == "" {
			continue
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("cannot listen on %s: %w", a, unwrapSyscall(err))
		}
		l.Close()
	}
	return nil
}

// logStarted logs the node's settings once, as it starts serving.
func (n *Node) logStarted() {
	me := n.cfg.self()
	n.log.Info("batond started", "id", n.cfg.ID, "client", me.ClientAddr, "raft", me.RaftAddr,
		"raft_listen", n.cfg.raftListen(), "data", n.cfg.DataDir, "shards", n.cfg.Shards,
		"members", n.view().list(), "rtt", n.cfg.RTT.String(), "snapshot_entries", n.cfg.SnapshotEntries, "snapshot_bytes", n.cfg.SnapshotBytes,
		"raft_log", n.cfg.RaftLog, "raft_transport", n.cfg.RaftTransport, "limits", n.cfg.Limits,
		"tls", n.cfg.TLSListen, "raft_tls", n.cfg.RaftTLS != nil, "auth", n.secretHash != nil)
}

// Stop shuts the node down gracefully: a leader first hands every shard to
// the next live node in priority order (its waiters are answered MOVED),
// what remains is answered ERR unavailable, client connections are closed,
// then Raft and the table.
func (n *Node) Stop(ctx context.Context) error {
	var err error
	n.stopOnce.Do(func() {
		n.transferLeadership(ctx)
		n.awaitLeaders(ctx)
		for _, s := range n.shards {
			s.mu.Lock()
			s.stopping = true
			s.stopServing()
			s.mu.Unlock()
		}
		if n.server != nil {
			err = n.server.stop(ctx)
		}
		if n.tlsServer != nil {
			err = errors.Join(err, n.tlsServer.stop(ctx))
		}
		n.closeStorage()
	})
	return err
}

// Failed delivers, once, why the node cannot go on serving: the cluster
// raised its version above this build's (statemachine.FeatureLevel). The
// node keeps running until it is stopped; the caller should Stop it and
// exit with the reason.
func (n *Node) Failed() <-chan error { return n.failed }

// fail reports err on Failed, unless a reason was reported already. It
// never blocks (it runs on the apply goroutine).
func (n *Node) fail(err error) {
	select {
	case n.failed <- err:
		n.log.Error("cannot go on", "err", err)
	default:
	}
}

// closeStorage stops everything below the client listener, in dependency
// order: goroutines that propose, Raft, then the table Raft applies to.
func (n *Node) closeStorage() {
	close(n.stopC)
	n.loops.Wait() // proposers and timers: nothing proposes any more
	if n.nh != nil {
		n.nh.Close() // terminates in-flight proposals, so watchers drain
	}
	for _, s := range n.shards {
		close(s.results)
	}
	n.watchers.Wait()
	if n.db != nil {
		if err := n.db.Close(); err != nil {
			n.log.Error("close lock table", "err", err)
		}
	}
	n.dir.close()
}

// completed waits for rs, a request to dragonboat, to finish, and reports
// whether it completed; stopped if the node stopped first (rs is then left
// unreleased, to dragonboat's close).
func (n *Node) completed(rs *dragonboat.RequestState) (ok, stopped bool) {
	select {
	case r := <-rs.ResultC():
		rs.Release()
		return r.Completed(), false
	case <-n.stopC:
		return false, true
	}
}

// ClientAddr is the address this node serves clients on.
func (n *Node) ClientAddr() string { return n.cfg.self().ClientAddr }

// clientAddrOf is the client address of member id, or "" if unknown.
func (n *Node) clientAddrOf(id uint64) string {
	m, _ := n.view().member(id)
	return m.Client
}

// movedAddr is where MOVED sends a client of cs to reach member id: its
// TLS address when cs came over TLS and the member has one, else its
// client address; "" if unknown.
func (n *Node) movedAddr(cs *connState, id uint64) string {
	m, _ := n.view().member(id)
	if _, ok := cs.t.(*tlsConn); ok && m.TLS != "" {
		return m.TLS
	}
	return m.Client
}

// shardFor routes a key.
func (n *Node) shardFor(key []byte) *shard {
	return n.shards[ShardOf(key, len(n.shards))-1]
}

// ---- Raft and state machine callbacks ----

// Locker implements statemachine.Observer: the shard's mu guards the
// table the engine reads (shard.table).
func (n *Node) Locker(shardID uint64) sync.Locker { return &n.shards[shardID-1].mu }

// Reset implements statemachine.Observer.
func (n *Node) Reset(shardID uint64, t sm.Table) {
	n.shards[shardID-1].reset(t)
	if shardID == 1 {
		n.loadDirectory(t)
	}
}

// Applied implements statemachine.Observer.
func (n *Node) Applied(shardID, index uint64, h sm.Header, cmds []sm.Command, results []sm.Result) {
	s := n.shards[shardID-1]
	s.stats.applied.Store(index)
	if stagetrace.On && len(cmds) > 0 && stagetrace.Sampled(h.Seq) {
		t := stagetrace.Now()
		s.applied(h, cmds, results)
		stagetrace.Applied(shardID, index, h.Proposer, h.Seq, t, stagetrace.Now())
		return
	}
	s.applied(h, cmds, results)
}

// LeaderUpdated implements raftio.IRaftEventListener.
func (n *Node) LeaderUpdated(info raftio.LeaderInfo) {
	if info.ShardID < 1 || info.ShardID > uint64(len(n.shards)) {
		return
	}
	n.log.Info("leader updated", "shard", info.ShardID, "leader", info.LeaderID, "term", info.Term)
	s := n.shards[info.ShardID-1]
	s.stats.leaderID.Store(info.LeaderID)
	s.stats.term.Store(info.Term)
	s.leaderUpdated(info.LeaderID)
}

// Raft timing, in ticks of Config.RTT. A follower that hears nothing from
// its leader for electionTicks (to twice that, randomized) starts an
// election, and a leader that hears from no majority for as long steps down
// (CheckQuorum). The leader's heartbeats go every heartbeatTicks: five to
// an election timeout, so that a few late or lost ones cost no leadership.
// Every other tick rather than every tick, because heartbeats are most of
// what an idle node does: at a 10 ms tick, 200 messages a second sent by an
// idle leader of one shard, each waking goroutines on both sides. Measured
// on an idle 3-node cluster, a quarter less CPU on the leader (8 % of a
// core down to 6) and a tenth to a fifth less on the followers
// (BENCHMARKS.md, "What an idle node costs").
const (
	electionTicks  = 10
	heartbeatTicks = 2
)

// raftStorageConfig puts the Raft log of every shard in one pebble instance
// written by one step worker, so that one fsync makes a whole round of
// every shard's entries durable. With a log (and a worker) per shard, each
// shard pays its own fsync and adding shards on a node costs throughput
// instead of adding it: measured on 2 cores, 4 shards did 43k
// acquire+release cycles/s with one log per shard and 75k with one shared
// log. Both counts are recorded in the data dir by dragonboat and cannot
// change for an existing one.
//
// The log's memtables are 4 MiB (dragonboat's smallest preset has 16): they
// live outside the Go heap, up to four at once, and a lock server's memory
// should grow with the locks it holds, not with its write buffers.
//
// With RaftLogSeglog the store is engine/seglog (one log of segment files
// for every shard), plugged in through Expert.LogDBFactory and telling
// onSave of its saves (the node's metrics); the LogDB sizes above are then
// dragonboat's only.
func raftStorageConfig(raftLog string, onSave savecall.Observer) config.ExpertConfig {
	logdb := config.GetSmallMemLogDBConfig()
	logdb.KVWriteBufferSize = 4 << 20
	logdb.Shards = 1
	engine := config.GetDefaultEngineConfig()
	engine.ExecShards = 1
	expert := config.ExpertConfig{LogDB: logdb, Engine: engine}
	if raftLog == RaftLogSeglog {
		expert.LogDBFactory = &seglog.Factory{OnSave: onSave}
	}
	return expert
}

// unwrapSyscall shortens "listen tcp 127.0.0.1:7700: bind: address already
// in use" to its last part, for one-line start errors.
func unwrapSyscall(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
