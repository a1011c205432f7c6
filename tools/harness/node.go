package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Timeouts of the node life cycle.
const (
	// DefaultReadyTimeout bounds the wait for a started node to serve.
	DefaultReadyTimeout = 15 * time.Second
	// StopTimeout bounds the wait for a graceful exit after SIGTERM.
	StopTimeout = 15 * time.Second
	// killTimeout bounds the wait for a SIGKILLed process to be reaped.
	killTimeout = 10 * time.Second
	// maxLogDump caps how much of a node's log a failing test prints.
	maxLogDump = 64 << 10
)

// ReadyKey is the key the readiness probe queries, and the prefix of the
// other keys it queries (see Node.probe). Tests should not use these keys.
const ReadyKey = "__ready__"

// Options are the settings of the nodes StartNode and StartCluster start.
type Options struct {
	// Shards is passed as --shards; 0 means 4.
	Shards int
	// HTTP makes the harness pick a free port for --http (Node.HTTPAddr).
	HTTP bool
	// Args are more flags, appended after the harness's own.
	Args []string
	// ReadyTimeout bounds the wait for each start; 0 means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Links, when set, puts every node's Raft port behind a proxy that a
	// test can cut (see Links).
	Links *Links
	// Env are more environment variables (KEY=VALUE) for every process, on
	// top of the test binary's own: e.g. the planted bug a batond built
	// with BuildTags should switch on.
	Env []string
	// NodeArgs, when set, gives more flags to node id alone, after Args:
	// its own certificate, say.
	NodeArgs func(id int) []string
	// Unready lists the nodes (by --id) that StartCluster starts but does
	// not wait for: nodes expected never to serve.
	Unready []int
	// Secret, when set, is written to a file passed as --auth-file. The
	// readiness probe opens with "H <secret>", and so must a test's
	// connections (Node.Secret, Conn.Hello).
	Secret string
	// TLS, when set, makes every node serve clients over TLS as well, with
	// this certificate, on a free port (Node.TLSAddr): --tls-listen, and
	// --tls-peers naming every node's.
	TLS *ServerTLS
}

// ServerTLS is the client TLS of Options.TLS.
type ServerTLS struct {
	Cert Cert
	// ClientCA, when set, is passed as --tls-client-ca: clients must
	// present a certificate it signed.
	ClientCA string
}

func (o Options) shards() int {
	if o.Shards == 0 {
		return 4
	}
	return o.Shards
}

// Node is one batond process: its addresses, its data directory, and the
// process itself while it runs. A Node belongs to the test that created it:
// its methods report failures through that test, so call them from the
// test's goroutine only. A Node is not safe for concurrent use.
type Node struct {
	ID         int    // --id
	ClientAddr string // the address the line protocol is served on
	RaftAddr   string // the Raft address peers dial ("" for a node of NewNode)
	RaftListen string // the Raft address batond binds, when not RaftAddr (Options.Links)
	HTTPAddr   string // --http, "" when off
	TLSAddr    string // --tls-listen, "" when off (Options.TLS)
	Secret     string // what --auth-file holds, "" when off (Options.Secret)
	Peers      string // --peers
	DataDir    string // --data
	LogPath    string // stdout and stderr of every run, appended
	Dir        string // the working directory of the process
	Args       []string
	Env        []string // KEY=VALUE added to the test binary's environment
	// Cmd is the current or last process; nil before the first start.
	Cmd *exec.Cmd

	// ReadyTimeout bounds each start; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration

	t          testing.TB
	bin        string
	shards     int   // --shards as far as the harness knows, for probing
	allowMoved bool  // a cluster member may answer the probe with MOVED
	proc       *proc // nil before the first start
}

// proc is one run of a node's process.
type proc struct {
	cmd       *exec.Cmd
	done      chan struct{} // closed once the process has been reaped
	err       error         // from cmd.Wait, valid after done
	logOffset int64         // where this run's output starts in the log
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// StartNode starts a single-node batond on free ports with a fresh data
// directory, with the flags
//
//	--id 1 --peers RAFT/CLIENT --data DIR --shards N [--http ADDR]
//	[--auth-file FILE] [--tls-listen ADDR --tls-peers ADDR --tls-cert ...]
//	opts.Args... opts.NodeArgs(1)...
//
// and returns once it serves. The test fails if it does not.
func StartNode(t testing.TB, bin string, opts Options) *Node {
	t.Helper()
	return StartCluster(t, bin, 1, opts)[0]
}

// StartCluster starts n batond processes on free ports, each with its own
// data directory and the same --peers list; node i (1-based, nodes[i-1]) is
// started with --id i. It returns once every node serves (but those of
// opts.Unready), which for a follower means answering MOVED. The test
// fails if one does not.
func StartCluster(t testing.TB, bin string, n int, opts Options) []*Node {
	t.Helper()
	if n < 1 {
		t.Fatalf("harness: StartCluster with %d nodes", n)
	}
	root := t.TempDir()
	var authFile string
	if opts.Secret != "" {
		authFile = filepath.Join(root, "secret")
		if err := os.WriteFile(authFile, []byte(opts.Secret+"\n"), 0o600); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	nodes := make([]*Node, n)
	for i := range nodes {
		id := i + 1
		nd := &Node{
			ID:           id,
			DataDir:      filepath.Join(root, fmt.Sprintf("n%d", id)),
			LogPath:      filepath.Join(root, fmt.Sprintf("n%d.log", id)),
			Dir:          root,
			Env:          opts.Env,
			Secret:       opts.Secret,
			ReadyTimeout: opts.ReadyTimeout,
			t:            t,
			shards:       opts.shards(),
			bin:          bin,
			allowMoved:   n > 1,
		}
		nd.registerCleanup()
		nodes[i] = nd
	}
	// One retry on new ports: see FreeAddr for the race it covers.
	for attempt := 1; ; attempt++ {
		assignPorts(t, nodes, opts, authFile)
		var err error
		for _, nd := range nodes {
			if err = nd.spawn(); err != nil {
				break
			}
		}
		if err == nil {
			err = waitAllReady(waitedFor(nodes, opts.Unready))
		}
		if err == nil {
			return nodes
		}
		inUse := false
		for _, nd := range nodes {
			inUse = inUse || nd.addrInUse()
			nd.killQuietly()
		}
		if inUse && attempt == 1 {
			t.Logf("harness: a port was taken before batond bound it; retrying on new ports")
			// The nodes that did start wrote the old --peers into their
			// data dirs, which would refuse the new ones; nothing else is
			// in them yet.
			for _, nd := range nodes {
				if err := os.RemoveAll(nd.DataDir); err != nil {
					t.Fatalf("harness: %v", err)
				}
			}
			continue
		}
		t.Fatalf("harness: %v", err)
	}
}

// waitedFor is nodes without those listed in unready.
func waitedFor(nodes []*Node, unready []int) []*Node {
	var out []*Node
	for _, nd := range nodes {
		if !slices.Contains(unready, nd.ID) {
			out = append(out, nd)
		}
	}
	return out
}

// assignPorts gives every node fresh addresses and the command line that
// goes with them.
func assignPorts(t testing.TB, nodes []*Node, opts Options, authFile string) {
	t.Helper()
	per := 2
	if opts.HTTP {
		per++
	}
	if opts.TLS != nil {
		per++
	}
	addrs := FreeAddrs(t, per*len(nodes))
	peers := make([]string, len(nodes))
	tlsPeers := make([]string, len(nodes))
	for i, nd := range nodes {
		nd.RaftAddr, nd.ClientAddr = addrs[per*i], addrs[per*i+1]
		next := per*i + 2
		if opts.HTTP {
			nd.HTTPAddr = addrs[next]
			next++
		}
		if opts.TLS != nil {
			nd.TLSAddr = addrs[next]
			tlsPeers[i] = nd.TLSAddr
		}
		nd.RaftListen = ""
		if opts.Links != nil {
			nd.RaftListen = nd.RaftAddr
			nd.RaftAddr = opts.Links.listen(t, nd.ID, nd.RaftListen)
		}
		peers[i] = nd.RaftAddr + "/" + nd.ClientAddr
	}
	for _, nd := range nodes {
		nd.Peers = strings.Join(peers, ",")
		nd.Args = []string{
			"--id", strconv.Itoa(nd.ID),
			"--peers", nd.Peers,
			"--data", nd.DataDir,
			"--shards", strconv.Itoa(opts.shards()),
		}
		if nd.HTTPAddr != "" {
			nd.Args = append(nd.Args, "--http", nd.HTTPAddr)
		}
		if nd.RaftListen != "" {
			nd.Args = append(nd.Args, "--raft-listen", nd.RaftListen)
		}
		if authFile != "" {
			nd.Args = append(nd.Args, "--auth-file", authFile)
		}
		if opts.TLS != nil {
			nd.Args = append(nd.Args, "--tls-listen", nd.TLSAddr, "--tls-peers", strings.Join(tlsPeers, ","),
				"--tls-cert", opts.TLS.Cert.CertFile, "--tls-key", opts.TLS.Cert.KeyFile)
			if opts.TLS.ClientCA != "" {
				nd.Args = append(nd.Args, "--tls-client-ca", opts.TLS.ClientCA)
			}
		}
		nd.Args = append(nd.Args, opts.Args...)
		if opts.NodeArgs != nil {
			nd.Args = append(nd.Args, opts.NodeArgs(nd.ID)...)
		}
	}
}

// waitAllReady waits for every node under one shared deadline: the nodes of
// a cluster come up together, so the slowest sets the pace.
func waitAllReady(nodes []*Node) error {
	if len(nodes) == 0 {
		return nil
	}
	deadline := time.Now().Add(nodes[0].readyTimeout())
	for _, nd := range nodes {
		if err := nd.waitReady(deadline); err != nil {
			return err
		}
	}
	return nil
}

// NewNode describes a batond process with a command line of the caller's
// choosing (args, run in dir) whose readiness is probed on clientAddr. It is
// not started: call Start. Use it for what StartNode cannot express, such as
// batond with no flags at all. The process's output goes to dir/batond.log.
func NewNode(t testing.TB, bin, dir, clientAddr string, args ...string) *Node {
	t.Helper()
	nd := &Node{
		ClientAddr: clientAddr,
		LogPath:    filepath.Join(dir, "batond.log"),
		Dir:        dir,
		Args:       args,
		t:          t,
		bin:        bin,
	}
	nd.registerCleanup()
	return nd
}

// registerCleanup kills the process when the test ends, then shows its log
// if the test failed. It is registered after the temporary directories the
// node lives in, so it runs before they are removed.
func (n *Node) registerCleanup() {
	n.t.Cleanup(func() {
		n.killQuietly()
		log := n.Log()
		if strings.Contains(log, "WARNING: DATA RACE") {
			n.t.Errorf("harness: node %d (%s): the race detector reported a data race in batond", n.ID, n.ClientAddr)
		}
		if n.t.Failed() && log != "" {
			n.t.Logf("harness: output of node %d (%s), %s:\n%s", n.ID, n.ClientAddr, n.LogPath, clip(log, maxLogDump))
		}
	})
}

func (n *Node) readyTimeout() time.Duration {
	if n.ReadyTimeout > 0 {
		return n.ReadyTimeout
	}
	return DefaultReadyTimeout
}

// Start starts the process and waits until it serves; the test fails if it
// does not (the failure shows what the process printed).
func (n *Node) Start() {
	n.t.Helper()
	if n.Running() {
		n.t.Fatalf("harness: node %d started twice", n.ID)
	}
	if err := n.spawn(); err != nil {
		n.t.Fatalf("harness: %v", err)
	}
	if err := n.waitReady(time.Now().Add(n.readyTimeout())); err != nil {
		n.killQuietly()
		n.t.Fatalf("harness: %v", err)
	}
}

// AllowMoved makes the readiness probe take MOVED as ready: for a node of
// NewNode that is a member of a cluster it does not lead (a node that
// joins, say).
func (n *Node) AllowMoved() { n.allowMoved = true }

// SetBin makes the node's next starts run bin instead of the batond it
// ran so far, with the same flags and data directory: a rolling upgrade
// (or a downgrade) of one node. It does not touch a running process.
func (n *Node) SetBin(bin string) { n.bin = bin }

// Restart starts the node again with the same flags and data directory, and
// waits until it serves. A process that still runs is killed first
// (SIGKILL), so Restart right after a test's work is a crash and restart.
func (n *Node) Restart() {
	n.t.Helper()
	if n.Running() {
		n.Kill()
	}
	n.Start()
}

// RestartAll restarts several nodes at once (killing those still running)
// and waits until all serve: a node that needs the others for a quorum
// cannot become ready on its own, as Restart would wait for.
func RestartAll(t testing.TB, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		if n.Running() {
			n.Kill()
		}
		if err := n.spawn(); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	if err := waitAllReady(nodes); err != nil {
		for _, n := range nodes {
			n.killQuietly()
		}
		t.Fatalf("harness: %v", err)
	}
}

// spawn starts the process without waiting for it to serve. Each run's
// output is appended to LogPath after a header line.
func (n *Node) spawn() error {
	if err := os.MkdirAll(filepath.Dir(n.LogPath), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child holds its own descriptor
	fmt.Fprintf(f, "=== harness %s: %s %s\n", time.Now().Format("15:04:05.000"), n.bin, strings.Join(n.Args, " "))
	off, err := f.Seek(0, 2)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.bin, n.Args...)
	cmd.Dir = n.Dir
	if len(n.Env) > 0 {
		cmd.Env = append(os.Environ(), n.Env...)
	}
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %d: start %s: %v", n.ID, n.bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), logOffset: off}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	n.proc = p
	n.Cmd = cmd
	return nil
}

// waitReady probes the client address until the node answers the
// readiness query, the process exits, or the deadline passes.
func (n *Node) waitReady(deadline time.Time) error {
	last := "no answer yet"
	for {
		if n.proc.exited() {
			return fmt.Errorf("node %d (%s) exited before serving: %v\n%s",
				n.ID, n.ClientAddr, n.proc.err, clip(n.runLog(), maxLogDump))
		}
		ok, answer := n.probe()
		if ok {
			return nil
		}
		last = answer
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d (%s) not serving after %v (last probe: %s)\n%s",
				n.ID, n.ClientAddr, n.readyTimeout(), last, clip(n.runLog(), maxLogDump))
		}
		select {
		case <-n.proc.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probe sends the readiness queries on a fresh connection and reports
// whether every one was answered as by a serving node. "ERR unavailable" (no
// leader yet) and connection errors mean "not yet".
//
// One key lives on one shard, and the shards of a node elect their leaders
// one by one, so a single "Q __ready__" can succeed while other shards still
// answer ERR unavailable. The probe therefore queries ReadyKey and enough
// keys "__ready__/<i>" that, keys hashing evenly, every shard is hit (with
// 32 keys per shard the chance of missing one is below 1e-15 per shard).
func (n *Node) probe() (ok bool, answer string) {
	nc, err := net.DialTimeout("tcp", n.ClientAddr, 500*time.Millisecond)
	if err != nil {
		return false, err.Error()
	}
	defer nc.Close()
	if err := nc.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return false, err.Error()
	}
	keys := n.probeKeys()
	var req []byte
	if n.Secret != "" {
		req = append(req, "H "+n.Secret+"\n"...)
	}
	for _, k := range keys {
		req = append(req, "Q "+k+"\n"...)
	}
	if _, err := nc.Write(req); err != nil {
		return false, err.Error()
	}
	r := bufio.NewReader(nc)
	if n.Secret != "" {
		line, err := r.ReadString('\n')
		if err != nil {
			return false, err.Error()
		}
		if line != "H - OK\n" {
			return false, strconv.Quote(line)
		}
	}
	for range keys {
		line, err := r.ReadString('\n')
		if err != nil {
			return false, err.Error()
		}
		line = strings.TrimSuffix(line, "\n")
		if !n.readyAnswer(line) {
			return false, strconv.Quote(line)
		}
	}
	return true, ""
}

// probeKeys returns the keys the readiness probe queries.
func (n *Node) probeKeys() []string {
	count := max(64, 32*n.shards)
	keys := make([]string, 1, count)
	keys[0] = ReadyKey
	for i := 1; i < count; i++ {
		keys = append(keys, ReadyKey+"/"+strconv.Itoa(i))
	}
	return keys
}

// readyAnswer reports whether line is the answer of a serving node to a
// readiness query.
func (n *Node) readyAnswer(line string) bool {
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "Q" || !strings.HasPrefix(f[1], ReadyKey) {
		return false
	}
	switch f[2] {
	case "FREE", "HELD":
		return true
	case "MOVED":
		return n.allowMoved
	}
	return false
}

// Running reports whether the process has been started and not yet reaped.
func (n *Node) Running() bool {
	return n.proc != nil && !n.proc.exited()
}

// Signal sends sig to the running process.
func (n *Node) Signal(sig os.Signal) error {
	if n.proc == nil {
		return fmt.Errorf("node %d was never started", n.ID)
	}
	return n.proc.cmd.Process.Signal(sig)
}

// Wait waits up to timeout for the process to exit and returns its exit
// code (-1 when a signal killed it). The error is non-nil only when the
// process did not exit in time or was never started.
func (n *Node) Wait(timeout time.Duration) (int, error) {
	if n.proc == nil {
		return -1, fmt.Errorf("node %d was never started", n.ID)
	}
	select {
	case <-n.proc.done:
		return n.proc.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("node %d (%s) still running after %v", n.ID, n.ClientAddr, timeout)
	}
}

// Kill sends SIGKILL and waits until the process is reaped: a crash. The
// test fails if the process cannot be killed in time.
func (n *Node) Kill() {
	n.t.Helper()
	if err := n.kill(); err != nil {
		n.t.Fatalf("harness: %v", err)
	}
}

func (n *Node) kill() error {
	if !n.Running() {
		return nil
	}
	// Killing a process that exits on its own meanwhile fails harmlessly.
	_ = n.proc.cmd.Process.Kill()
	_, err := n.Wait(killTimeout)
	return err
}

// killQuietly is kill for cleanup paths, where nothing more can be done.
func (n *Node) killQuietly() {
	if err := n.kill(); err != nil {
		n.t.Logf("harness: %v", err)
	}
}

// Stop shuts the node down gracefully: SIGTERM, then a wait of up to
// StopTimeout. It returns the exit code. When the process does not exit in
// time it is killed, and the error says so; a non-zero exit code alone is
// not an error, so check the code.
func (n *Node) Stop() (int, error) {
	if !n.Running() {
		return -1, fmt.Errorf("node %d is not running", n.ID)
	}
	if err := n.Signal(syscall.SIGTERM); err != nil {
		return -1, err
	}
	code, err := n.Wait(StopTimeout)
	if err != nil {
		n.killQuietly()
		return -1, fmt.Errorf("%v after SIGTERM; killed", err)
	}
	return code, nil
}

// Pause stops the process with SIGSTOP: it keeps its sockets but does
// nothing, like a node that hangs. It returns once every thread of the
// process has stopped; the test fails if that does not happen.
func (n *Node) Pause() {
	n.t.Helper()
	if err := n.Signal(syscall.SIGSTOP); err != nil {
		n.t.Fatalf("harness: pause node %d: %v", n.ID, err)
	}
	if err := waitStopped(n.proc.cmd.Process.Pid, 5*time.Second); err != nil {
		n.t.Fatalf("harness: pause node %d: %v", n.ID, err)
	}
}

// Resume continues a paused process with SIGCONT.
func (n *Node) Resume() {
	n.t.Helper()
	if err := n.Signal(syscall.SIGCONT); err != nil {
		n.t.Fatalf("harness: resume node %d: %v", n.ID, err)
	}
}

// Log returns everything the node's processes printed so far, with one
// header line per start.
func (n *Node) Log() string {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// runLog returns what the current run printed.
func (n *Node) runLog() string {
	log := n.Log()
	if n.proc != nil && n.proc.logOffset <= int64(len(log)) {
		return log[n.proc.logOffset:]
	}
	return log
}

// addrInUse reports whether the current run failed because an address it
// should bind was taken.
func (n *Node) addrInUse() bool {
	return n.proc != nil && n.proc.exited() &&
		strings.Contains(strings.ToLower(n.runLog()), "address already in use")
}

// clip shortens s to about limit bytes, keeping the start (how the process
// started) and mostly the end (why it stopped).
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	head := limit / 8
	tail := limit - head
	return s[:head] + fmt.Sprintf("\n... %d bytes left out ...\n", len(s)-limit) + s[len(s)-tail:]
}

// Result is how a process run by Run ended.
type Result struct {
	Code     int // exit code; -1 when killed by a signal
	Stdout   string
	Stderr   string
	TimedOut bool // it was still running at the timeout and was killed
}

// Run runs batond with args in dir until it exits, for command lines that
// are expected to end by themselves (--help, bad flags, refusals to start).
// An empty dir means a fresh temporary directory, so that a stray default
// ./baton-data never lands in the source tree. A process still running after
// timeout is killed and reported with TimedOut.
func Run(t testing.TB, bin, dir string, timeout time.Duration, args ...string) Result {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("harness: start %s: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var res Result
	select {
	case <-done:
	case <-time.After(timeout):
		res.TimedOut = true
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(killTimeout):
			t.Fatalf("harness: %s %s: cannot kill it", bin, strings.Join(args, " "))
		}
	}
	res.Code = cmd.ProcessState.ExitCode()
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	t.Logf("harness: batond %s: exit %d, timed out %v\nstdout:\n%s\nstderr:\n%s",
		strings.Join(args, " "), res.Code, res.TimedOut, clip(res.Stdout, maxLogDump), clip(res.Stderr, maxLogDump))
	return res
}
