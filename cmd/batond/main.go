// Command batond is the baton lock server. Run with no flags it is a
// single-node cluster on 127.0.0.1:7700 with its data in ./baton-data; see
// batond --help and docs/protocol.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/baton-dev/baton/codec"
	"github.com/baton-dev/baton/engine"
)

// Exit statuses.
const (
	exitOK       = 0
	exitFailed   = 1 // could not start, or stopped with an error
	exitBadUsage = 2 // a flag is wrong
)

const usage = `batond: the baton distributed lock server.

Usage:
  batond [flags]

With no flags, batond runs a single-node cluster: clients on 127.0.0.1:7700,
Raft on 127.0.0.1:7701, data in ./baton-data.

A cluster: start every node with the same --peers, each with its own --id:
  batond --id 2 --data DIR \
    --peers 127.0.0.1:7701/127.0.0.1:7700,127.0.0.1:7711/127.0.0.1:7710,127.0.0.1:7721/127.0.0.1:7720
From then on the membership is the cluster's (baton member list): a node
restarts with --id and --data alone, and --peers given again is ignored.
A new member (baton member add RAFT_ADDR/CLIENT_ADDR prints its id):
  batond --id N --join RAFT_ADDR/CLIENT_ADDR --data EMPTY_DIR

Flags:
  --id N          this node's member id: its 1-based position in --peers
                  at the cluster's first start, or the id baton member add
                  gave it (default 1)
  --peers LIST    every node as RAFT_ADDR/CLIENT_ADDR, comma-separated, in
                  leadership priority order: the first live one leads.
                  Used at a cluster's first start only (default
                  127.0.0.1:7701/127.0.0.1:7700)
  --join RAFT_ADDR/CLIENT_ADDR
                  start as a new member of a running cluster, on these
                  addresses (those given to baton member add), with an
                  empty --data: the cluster's leader reaches it, it
                  catches up as a learner and is promoted to voter
  --data DIR      where the node keeps its Raft log and lock table; restart
                  with the same DIR to resume (default ./baton-data)
  --shards N      number of Raft groups keys are spread over, fixed when the
                  cluster is first started; 0 takes the value stored in DIR
                  (default 0, meaning 1 for a new data dir)
  --http ADDR     serve /metrics (Prometheus), /healthz, /status (JSON) and
                  /backup (the lock table, for baton backup) on ADDR, e.g.
                  127.0.0.1:7780 (default off). With --auth-file, /status,
                  /backup and /debug/pprof/ answer only requests with
                  "Authorization: Bearer <secret>"; /healthz and /metrics
                  stay open
  --http-tls      serve --http over TLS, with the certificate of the TLS
                  client listener (--tls-cert, --tls-key; and with
                  --tls-client-ca, only to clients with a certificate)
  --restore FILE  start a new cluster from a backup (baton backup): check
                  FILE whole, then write its locks into DIR before Raft
                  starts, with token counters in the next restore epoch
                  (every new token above every token the backed-up
                  cluster issued, before the backup or after). DIR must
                  not hold a cluster yet, and --shards must be 0 or the
                  backup's. Start every node of the new cluster with the
                  same FILE, once: later starts go without it (default
                  off)
  --raft-listen ADDR
                  bind Raft here instead of this node's RAFT_ADDR in
                  --peers, which stays the address peers dial (for NAT,
                  tunnels or fault-injection proxies; default: RAFT_ADDR)
  --rtt DURATION  Raft tick: a leader's heartbeats every other tick,
                  elections after 10 (default 20ms)
  --snapshot-entries N
                  take a Raft snapshot and compact the log every N applied
                  entries of a shard (default 100000); a follower further
                  behind than the log kept catches up from a snapshot
  --snapshot-bytes N
                  take one sooner, once the entries applied to a shard since
                  the last one reach N bytes (default 16777216)
  --raft-log NAME the Raft log store, fixed when the data dir is created:
                  seglog (segment files; syncs term, vote, entries and
                  snapshots, not a change of the commit index alone) or
                  dragonboat (its own store, in pebble, which syncs every
                  change); "" takes the one stored in DIR (default "",
                  meaning seglog for a new data dir and dragonboat for one
                  created before this flag). A data dir made with baton's
                  pebble store (--raft-log baton, no longer in batond) is
                  refused: take a backup with an older batond (baton
                  backup) and start a new cluster from it (--restore)
  --raft-transport NAME
                  how Raft messages travel between nodes: baton (a frame
                  per batch, one write each) or dragonboat (its own TCP
                  transport); every node of a cluster must use the same
                  one (default baton)
  --heap-floor SIZE
                  heap the garbage collector counts as in use without its
                  being touched: it collects after about half of SIZE of
                  garbage instead of after a few MB, for steadier latency,
                  and RSS may grow by up to half of SIZE; 0 for none
                  (default 64MiB; units B, KiB, MiB, GiB)
  --log-level L   debug, info, warn or error (default info)
  --log-format F  text (key=value lines) or json (one JSON object a line)
                  (default text)
  --help          show this text

Limits (docs/protocol.md): past each, the request that would go beyond it
is answered ERR overloaded, and a line "limit hit" with a count is logged,
at most once per limit every 10s.
  --max-conns N   client connections open at once; one more is closed at
                  once (default 50000)
  --max-waiters-per-conn N
                  unanswered acquires of one connection (default 100000)
  --max-waiters-per-key N
                  acquires waiting for one key; one whose owner already
                  waits for the key takes no place (default 10000)
  --max-waiters N unanswered acquires on this node (default 1000000)
  --max-pending-queries N
                  queries of a shard waiting for the leader to confirm its
                  leadership (a cluster's Q) (default 65536)
  --max-proposals-in-flight N
                  Raft proposals of a shard not yet committed; past it
                  commands wait to be proposed (default 4096)
  --max-pending-commands N
                  commands of a shard not committed yet, batched or
                  proposed (default 65536)
  --max-unsent-per-conn SIZE
                  answers a client has not taken; past it the connection is
                  closed (default 4MiB; units B, KiB, MiB, GiB)
  --max-unsent SIZE
                  the same over all connections; past it the connections
                  with the most unsent answers are closed (default 256MiB)
  --max-watches-per-conn N
                  keys one connection watches (W) (default 100000)
  --max-watches N watches on this node, over all connections (default
                  1000000)

Access control and TLS (docs/protocol.md, version 1.2):
  --auth-file FILE
                  FILE holds a shared secret (a trailing newline is not part
                  of it); every client connection must then start with
                  "H <secret>", or it is answered "H - ERR auth" and closed
  --tls-listen ADDR
                  also serve clients over TLS on ADDR (needs --tls-cert and
                  --tls-key); the port of --peers stays plain
  --tls-cert FILE, --tls-key FILE
                  the PEM certificate and key of the TLS client listener
  --tls-client-ca FILE
                  ask TLS clients for a certificate signed by the CA in FILE
                  and refuse the handshake without one (default: none asked)
  --tls-peers LIST
                  every node's TLS client address, comma-separated, in the
                  order of --peers: MOVED on a TLS connection names these
                  (default: MOVED names the plain addresses of --peers);
                  --tls-listen defaults to this node's entry
  --raft-tls-ca FILE, --raft-tls-cert FILE, --raft-tls-key FILE
                  all three or none: Raft traffic is mutual TLS, and only
                  nodes whose certificates the CA signed can join. Each
                  node's certificate must name the host of its RAFT_ADDR and
                  allow server and client authentication

Every listener binds 127.0.0.1 unless told otherwise. A client listener
bound to another address logs a warning at start when it lets anyone in:
the plain one without --auth-file, the TLS one without --auth-file or
--tls-client-ca.

SIGINT or SIGTERM stops the node gracefully and exits 0.
`

type options struct {
	id            uint64
	peers         string
	join          string
	data          string
	shards        int
	http          string
	httpTLS       bool
	raftListen    string
	rtt           time.Duration
	snapEvery     uint64
	snapBytes     uint64
	logLevel      string
	logFormat     string
	raftLog       string
	raftTransport string
	restore       string
	heapFloor     int
	limits        engine.Limits

	authFile    string
	tlsListen   string
	tlsCert     string
	tlsKey      string
	tlsClientCA string
	tlsPeers    string
	raftTLSCA   string
	raftTLSCert string
	raftTLSKey  string
}

// defaultGCPercent is batond's GOGC unless the environment sets one. The
// live heap of a lock server is mostly its lock table, and the default of
// 100 lets RSS reach twice that; 50 took RSS per held lock from 530 to 480
// bytes (medians of 3) with no measurable loss of throughput (BENCHMARKS.md).
const defaultGCPercent = 50

// defaultHeapFloor is --heap-floor's default (heapfloor.go): the collector
// then runs about once per 32 MiB of garbage at least.
const defaultHeapFloor = 64 << 20

// maxHeapFloor bounds --heap-floor: past a few GiB the floor is no longer
// small beside the machine, and Go may refuse to reserve it.
const maxHeapFloor = 4 << 30

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "batond: %v (see batond --help)\n", err)
		return exitBadUsage
	}
	defer runtime.KeepAlive(holdHeapFloor(opts.heapFloor))
	log, err := newLogger(stderr, opts.logLevel, opts.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "batond: %v\n", err)
		return exitBadUsage
	}
	slog.SetDefault(log)    // and the log package's lines (pebble's) with it
	var peers []engine.Peer // nil: the data dir's, or the default (engine.Config.Peers)
	if opts.peers != "" {
		if peers, err = engine.ParsePeers(opts.peers); err != nil {
			fmt.Fprintf(stderr, "batond: --peers: %v\n", err)
			return exitBadUsage
		}
	}
	var join *engine.Peer
	if opts.join != "" {
		p, err := engine.ParsePeers(opts.join)
		if err != nil || len(p) != 1 {
			fmt.Fprintf(stderr, "batond: --join %s: want this node's RAFT_ADDR/CLIENT_ADDR\n", opts.join)
			return exitBadUsage
		}
		join = &p[0]
	}

	// Bind the HTTP port first so that a taken port fails before the node
	// touches its data dir.
	var httpLn net.Listener
	if opts.http != "" {
		if httpLn, err = net.Listen("tcp", opts.http); err != nil {
			fmt.Fprintf(stderr, "batond: --http: %v\n", err)
			return exitFailed
		}
	}
	cfg := engine.Config{
		ID: opts.id, Peers: peers, Join: join, RaftListen: opts.raftListen, DataDir: opts.data, Shards: opts.shards, RTT: opts.rtt,
		SnapshotEntries: opts.snapEvery, SnapshotBytes: opts.snapBytes, RaftLog: opts.raftLog, RaftTransport: opts.raftTransport, Restore: opts.restore, Limits: opts.limits, Logger: log,
	}
	if err := opts.security(&cfg); err != nil {
		fmt.Fprintf(stderr, "batond: %s\n", oneLine(err))
		return exitFailed
	}
	if opts.httpTLS {
		if opts.http == "" || cfg.TLS == nil {
			fmt.Fprintf(stderr, "batond: --http-tls needs --http, and --tls-cert and --tls-key for its certificate\n")
			return exitBadUsage
		}
		httpLn = tls.NewListener(httpLn, cfg.TLS.Clone())
	}
	node, err := engine.Start(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "batond: %s\n", oneLine(err))
		return exitFailed
	}
	log.Info("heap floor", "bytes", opts.heapFloor) // the engine's start-up line does not know it
	if httpLn != nil {
		srv := &http.Server{Handler: node.HTTPHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(httpLn) }()
		defer srv.Close()
		log.Info("serving http", "addr", httpLn.Addr().String())
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var failed error
	select {
	case got := <-sig:
		log.Info("stopping", "signal", got.String())
	case failed = <-node.Failed():
		log.Info("stopping", "reason", failed.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.Stop(ctx); err != nil {
		fmt.Fprintf(stderr, "batond: stop: %s\n", oneLine(err))
		return exitFailed
	}
	log.Info("stopped")
	if failed != nil {
		// Last, so that it is the line an operator sees.
		fmt.Fprintf(stderr, "batond: %s\n", oneLine(failed))
		return exitFailed
	}
	return exitOK
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("batond", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by run
	fs.Uint64Var(&o.id, "id", 1, "")
	fs.StringVar(&o.peers, "peers", "", "")
	fs.StringVar(&o.join, "join", "", "")
	fs.StringVar(&o.data, "data", engine.DefaultDataDir, "")
	fs.IntVar(&o.shards, "shards", 0, "")
	fs.StringVar(&o.http, "http", "", "")
	fs.BoolVar(&o.httpTLS, "http-tls", false, "")
	fs.StringVar(&o.raftListen, "raft-listen", "", "")
	fs.DurationVar(&o.rtt, "rtt", engine.DefaultRTT, "")
	fs.Uint64Var(&o.snapEvery, "snapshot-entries", engine.DefaultSnapshotEntries, "")
	fs.Uint64Var(&o.snapBytes, "snapshot-bytes", engine.DefaultSnapshotBytes, "")
	o.heapFloor = defaultHeapFloor
	fs.Var((*byteSize)(&o.heapFloor), "heap-floor", "")
	fs.StringVar(&o.logLevel, "log-level", "info", "")
	fs.StringVar(&o.logFormat, "log-format", "text", "")
	fs.StringVar(&o.raftLog, "raft-log", "", "")
	fs.StringVar(&o.raftTransport, "raft-transport", engine.DefaultRaftTransport, "")
	fs.StringVar(&o.authFile, "auth-file", "", "")
	fs.StringVar(&o.tlsListen, "tls-listen", "", "")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "")
	fs.StringVar(&o.tlsKey, "tls-key", "", "")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "")
	fs.StringVar(&o.tlsPeers, "tls-peers", "", "")
	fs.StringVar(&o.raftTLSCA, "raft-tls-ca", "", "")
	fs.StringVar(&o.raftTLSCert, "raft-tls-cert", "", "")
	fs.StringVar(&o.raftTLSKey, "raft-tls-key", "", "")
	fs.StringVar(&o.restore, "restore", "", "")
	limitFlags(fs, &o.limits)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := o.limits.Validate(); err != nil {
		return o, err
	}
	if err := engine.CheckRaftLog(o.raftLog); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.shards < 0:
		return o, fmt.Errorf("--shards %d: must be at least 1", o.shards)
	case o.rtt < time.Millisecond:
		return o, fmt.Errorf("--rtt %v: must be at least 1ms", o.rtt)
	case o.heapFloor > maxHeapFloor:
		return o, fmt.Errorf("--heap-floor %d: must be at most 4GiB", o.heapFloor)
	}
	return o, nil
}

// security reads the files of the access control and TLS flags into cfg;
// engine.Start checks that the flags go together.
func (o *options) security(cfg *engine.Config) error {
	if o.authFile != "" {
		data, err := os.ReadFile(o.authFile)
		if err != nil {
			return fmt.Errorf("--auth-file: %w", err)
		}
		if cfg.AuthSecret, err = codec.ParseSecret(data); err != nil {
			return fmt.Errorf("--auth-file %s: %w", o.authFile, err)
		}
	}
	cfg.TLSListen = o.tlsListen
	if o.tlsPeers != "" {
		cfg.TLSPeers = strings.Split(o.tlsPeers, ",")
	}
	if o.tlsCert != "" || o.tlsKey != "" || o.tlsClientCA != "" {
		var err error
		if cfg.TLS, err = engine.LoadClientTLS(o.tlsCert, o.tlsKey, o.tlsClientCA); err != nil {
			return err
		}
	}
	if o.raftTLSCA != "" || o.raftTLSCert != "" || o.raftTLSKey != "" {
		cfg.RaftTLS = &engine.RaftTLS{CAFile: o.raftTLSCA, CertFile: o.raftTLSCert, KeyFile: o.raftTLSKey}
	}
	return nil
}

// newLogger is the node's logger: format text or json, at level.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// oneLine keeps a start error to one line, as the command-line contract
// promises.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
