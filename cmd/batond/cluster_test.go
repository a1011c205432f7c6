package main_test

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// Cluster tests: real batond processes with the same --peers, killed,
// restarted and stopped. Leadership follows --peers order (priority), so in
// steady state node 1 answers and the others answer MOVED.

// clusterKeys spread over every shard of a 4-shard cluster.
var clusterKeys = []string{"c/a", "c/b", "c/c", "c/d", "c/e", "c/f", "c/g", "c/h", "c/i", "c/j"}

// waitLeads waits until leader serves every key and every other live node
// answers MOVED to it, and returns how long that took.
func waitLeads(t *testing.T, live []*harness.Node, leader *harness.Node, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < d {
		if last = leadsEverything(live, leader); last == "" {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("node %d does not lead every shard after %v: %s", leader.ID, d, last)
	return 0
}

// leadsEverything returns "" when leader serves every key and the other
// nodes send clients to it, else what is still wrong.
func leadsEverything(live []*harness.Node, leader *harness.Node) string {
	for _, n := range live {
		for _, k := range clusterKeys {
			got := ask(n.ClientAddr, "Q "+k)
			switch {
			case n == leader && !(got == "Q "+k+" FREE" || strings.HasPrefix(got, "Q "+k+" HELD ")):
				return fmt.Sprintf("node %d answers %q", n.ID, got)
			case n != leader && got != "Q "+k+" MOVED "+leader.ClientAddr:
				return fmt.Sprintf("node %d answers %q", n.ID, got)
			}
		}
	}
	return ""
}

// ask sends one line on a fresh connection and returns the answer, or the
// error as text. It does not fail the test: callers poll.
func ask(addr, line string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err.Error()
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err.Error()
	}
	return strings.TrimSuffix(got, "\n")
}

func TestClusterPriorityAndFailover(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 4})
	waitLeads(t, nodes, nodes[0], 15*time.Second)

	c1 := harness.Dial(t, nodes[0].ClientAddr)
	held := acquire(t, c1, "c/held", 60000)
	released := acquire(t, c1, "c/released", 60000)
	do(t, c1, fmt.Sprintf("R c/released %d", released), "R c/released OK")
	// A holder that dies with the leader and never comes back: its short
	// lease must still run out after the failover and pass the lock on.
	orphan := acquire(t, c1, "c/orphan", 1000)

	nodes[0].Kill()
	gap := waitLeads(t, nodes[1:], nodes[1], 10*time.Second)
	t.Logf("kill -9 of the leader: node 2 serves every key %v after the kill", gap)

	c2 := harness.Dial(t, nodes[1].ClientAddr)
	queryHeld(t, c2, "c/held", held)
	if tok := acquire(t, c2, "c/released", 60000); tok <= released {
		t.Fatalf("token %d after failover, not above %d", tok, released)
	}
	c2.Send("A c/orphan 60000 0")
	if tok := readGrant(t, c2, "c/orphan", 5*time.Second); tok <= orphan {
		t.Fatalf("orphaned lock passed on with token %d, not above %d", tok, orphan)
	}

	restarted := time.Now()
	nodes[0].Restart()
	back := waitLeads(t, nodes, nodes[0], 15*time.Second)
	t.Logf("restarted node 1 leads again %v after its restart returned (%v after the restart began)",
		back, time.Since(restarted))
	queryHeld(t, harness.Dial(t, nodes[0].ClientAddr), "c/held", held)
}

// TestClusterPullBackUnderLoad restarts node 1 while clients keep node 2,
// the leader meanwhile, busy on every shard. Node 1 asks for its shards back
// (priority), and node 2 hands them over quiet, as a leaving node does: no
// shard drops the proposals of an election timeout on a transfer that
// fails. Before, node 1 asked Raft for the transfers itself, which under
// load skipped about half of them, and each one skipped cost its shard's
// clients about 200 ms of ERR unavailable (thousands of answers here).
func TestClusterPullBackUnderLoad(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 4})
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	nodes[0].Kill()
	waitLeads(t, nodes[1:], nodes[1], 10*time.Second)

	stop := make(chan struct{})
	var served, unavailable atomic.Int64
	loads := make(chan loadResult, len(clusterKeys))
	for _, k := range clusterKeys {
		go func() {
			longest, err := cycleFollowingMoved(nodes[1].ClientAddr, "p/"+k, stop, &served, &unavailable)
			loads <- loadResult{longest, err}
		}()
	}
	before := served.Load()
	nodes[0].Restart()
	back := waitLeads(t, nodes, nodes[0], 20*time.Second)
	atBack := served.Load()
	deadline := time.Now().Add(5 * time.Second)
	for served.Load() < atBack+100 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // node 1 serves the load, too
	}
	close(stop)
	var longest time.Duration
	for range clusterKeys {
		r := <-loads
		if r.err != nil {
			t.Fatalf("load: %v", r.err)
		}
		longest = max(longest, r.longestUnavailable)
	}
	t.Logf("restarted node 1 leads again %v after its restart returned; %d cycles meanwhile, %d answers ERR unavailable, the longest run of them from node 2 %v",
		back, atBack-before, unavailable.Load(), longest)
	if n := served.Load() - atBack; n < 100 {
		t.Fatalf("%d cycles once node 1 led again, want 100", n)
	}
	if !strings.Contains(nodes[1].Log(), `msg="handed leadership over" to=1`) {
		t.Errorf("node 2 did not hand a shard over to node 1; its log:\n%s", nodes[1].Log())
	}
	// Node 2 answers a key ERR unavailable while it knows no leader of the
	// key's shard, a moment in a hand-off; a transfer that failed made it
	// the 10 ticks (200 ms) Raft waits before giving a transfer up, with
	// every proposal dropped. (Node 1's own moments, between its election
	// and its fence's commit, are not counted: they are not the hand-off's.)
	if longest >= 100*time.Millisecond {
		t.Errorf("node 2 answered a key only ERR unavailable for %v while node 1 took its shards back, want under 100ms", longest)
	}
}

// loadResult is how one load goroutine of TestClusterPullBackUnderLoad
// ended.
type loadResult struct {
	longestUnavailable time.Duration
	err                error
}

// cycleFollowingMoved acquires and releases key, starting at addr and
// following MOVED, until stop, counting the cycles done and the answers ERR
// unavailable (retried at once), and returns the longest time addr, the
// first node, answered nothing else. The acquire names an owner, so that
// its retry gets back a grant whose answer was lost. Answers other than OK,
// MOVED and ERR unavailable are errors.
func cycleFollowingMoved(addr, key string, stop <-chan struct{}, served, unavailable *atomic.Int64) (time.Duration, error) {
	first := addr
	var nc net.Conn
	var r *bufio.Reader
	var longest time.Duration
	var since time.Time // the first of first's ERR unavailable answers in a row
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	roundTrip := func(line string) ([]string, error) {
		if nc == nil {
			var err error
			if nc, err = net.DialTimeout("tcp", addr, time.Second); err != nil {
				return nil, err
			}
			r = bufio.NewReader(nc)
		}
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(nc, "%s\n", line); err != nil {
			return nil, err
		}
		got, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		f := strings.Fields(got)
		isUnavailable := len(f) > 3 && f[2] == "ERR" && f[3] == "unavailable"
		if isUnavailable && addr == first {
			if since.IsZero() {
				since = time.Now()
			}
		} else if !since.IsZero() {
			longest = max(longest, time.Since(since))
			since = time.Time{}
		}
		switch {
		case len(f) == 4 && f[2] == "MOVED":
			addr = f[3]
			nc.Close()
			nc = nil
		case isUnavailable:
			unavailable.Add(1)
		case len(f) < 3 || f[2] != "OK":
			return nil, fmt.Errorf("%s answered %q", line, got)
		}
		return f, nil
	}
	for i := 0; i < 1_000_000; i++ { // bounded: stop ends it long before
		select {
		case <-stop:
			return longest, nil
		default:
		}
		f, err := roundTrip(fmt.Sprintf("A %s 10000 0 owner-%s", key, key))
		if err != nil {
			return longest, err
		}
		if len(f) != 4 || f[2] != "OK" {
			continue
		}
		for {
			f, err := roundTrip(fmt.Sprintf("R %s %s", key, f[3]))
			if err != nil {
				return longest, err
			}
			if f[2] == "OK" {
				break
			}
		}
		served.Add(1)
	}
	return longest, nil
}

// TestClusterGracefulHandOff stops the leader with SIGTERM during a steady
// stream of acquires: it exits 0, node 2 takes over, and every acquire that
// was answered OK is still held, with its token, on node 2.
func TestClusterGracefulHandOff(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 4})
	waitLeads(t, nodes, nodes[0], 15*time.Second)

	type grant struct {
		key   string
		token uint64
		at    time.Time
	}
	var grants []grant
	addr := nodes[0].ClientAddr
	signalled := false
	deadline := time.Now().Add(30 * time.Second)
	for len(grants) < 600 && time.Now().Before(deadline) {
		if len(grants) == 200 && !signalled {
			if err := nodes[0].Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
		key := fmt.Sprintf("h/%d", len(grants))
		got := ask(addr, "A "+key+" 60000 -1")
		switch {
		case strings.HasPrefix(got, "A "+key+" OK "):
			tok := parseU64(t, strings.TrimPrefix(got, "A "+key+" OK "))
			grants = append(grants, grant{key, tok, time.Now()})
		case strings.HasPrefix(got, "A "+key+" MOVED "):
			addr = strings.TrimPrefix(got, "A "+key+" MOVED ")
		default: // unavailable, refused, timed out: the hand-off is under way
			if addr == nodes[0].ClientAddr && signalled {
				addr = nodes[1].ClientAddr // node 1 is gone; ask the next one
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if len(grants) < 600 {
		t.Fatalf("only %d grants in 30s", len(grants))
	}
	if code, err := nodes[0].Wait(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("node 1 after SIGTERM: exit %d, %v; want exit 0", code, err)
	}
	// Every shard goes to the next node in priority order, node 2, at the
	// first try: none is left for node 3 after node 2's turn ran out.
	if log := nodes[0].Log(); !strings.Contains(log, `msg="handed leadership over" to=2 shards=4`) {
		t.Errorf("node 1 did not hand all 4 shards to node 2; its log:\n%s", log)
	}
	var maxGap time.Duration
	for i := 1; i < len(grants); i++ {
		maxGap = max(maxGap, grants[i].at.Sub(grants[i-1].at))
	}
	t.Logf("graceful hand-off: longest time without a grant %v", maxGap)

	waitLeads(t, nodes[1:], nodes[1], 10*time.Second)
	c := harness.Dial(t, nodes[1].ClientAddr)
	for _, g := range grants {
		queryHeld(t, c, g.key, g.token)
	}
}

// TestClusterQuorum: five nodes serve with two dead, answer ERR unavailable
// (in bounded time) with three dead, and serve again when one comes back.
func TestClusterQuorum(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 5, harness.Options{Shards: 2})
	waitLeads(t, nodes, nodes[0], 20*time.Second)

	nodes[0].Kill()
	nodes[1].Kill()
	waitLeads(t, nodes[2:], nodes[2], 10*time.Second)
	c := harness.Dial(t, nodes[2].ClientAddr)
	acquire(t, c, "q/two-dead", 60000)

	nodes[2].Kill()
	start := time.Now()
	var got string
	for time.Since(start) < 20*time.Second {
		if got = ask(nodes[3].ClientAddr, "A q/three-dead 60000 -1"); strings.HasPrefix(got, "A q/three-dead ERR unavailable") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(got, "A q/three-dead ERR unavailable") {
		t.Fatalf("with 3 of 5 nodes dead, node 4 answers %q, want ERR unavailable", got)
	}
	t.Logf("3 of 5 dead: ERR unavailable %v after the third kill", time.Since(start))

	nodes[2].Restart()
	waitLeads(t, nodes[2:], nodes[2], 20*time.Second)
	held, _, _ := query(t, harness.Dial(t, nodes[2].ClientAddr), "q/two-dead")
	if !held {
		t.Fatal("the lock granted with two nodes dead was lost")
	}
}

// TestClusterPartition cuts the leader's Raft links (through the harness's
// proxies) while a client still talks to it: it grants nothing and shows no
// unconfirmed state, the other two elect a leader and serve, and once the
// links heal exactly one node serves again, node 1 by priority.
func TestClusterPartition(t *testing.T) {
	t.Parallel()
	links := harness.NewLinks()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2, Links: links})
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	c1 := harness.Dial(t, nodes[0].ClientAddr)
	held := acquire(t, c1, "p/held", 60000)

	links.Isolate(1)
	c1.Send("A p/cut 60000 -1", "Q p/held")
	until := time.Now().Add(3 * time.Second)
	for time.Now().Before(until) {
		line, err := c1.ReadLine(time.Until(until))
		if err != nil {
			break // nothing more said: fine
		}
		if !strings.Contains(line, " ERR unavailable") && !strings.Contains(line, " MOVED ") {
			t.Fatalf("node 1, cut off from the others, answered %q", line)
		}
	}

	waitLeads(t, nodes[1:], nodes[1], 10*time.Second)
	c2 := harness.Dial(t, nodes[1].ClientAddr)
	queryHeld(t, c2, "p/held", held)
	majority := acquire(t, c2, "p/majority", 60000)

	links.Heal()
	back := waitLeads(t, nodes, nodes[0], 20*time.Second)
	t.Logf("after healing, node 1 leads again in %v", back)
	c1 = harness.Dial(t, nodes[0].ClientAddr)
	queryHeld(t, c1, "p/majority", majority)
	queryHeld(t, c1, "p/held", held)
	queryFree(t, c1, "p/cut")
}

// TestClusterFullRestart kills every node at once and restarts them all:
// everything acknowledged is still there and tokens keep growing.
func TestClusterFullRestart(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2})
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	c := harness.Dial(t, nodes[0].ClientAddr)
	held := acquire(t, c, "r/held", 600000)
	released := acquire(t, c, "r/released", 600000)
	do(t, c, fmt.Sprintf("R r/released %d", released), "R r/released OK")
	c.Send("A r/owned 600000 0 owner-r")
	owned := readGrant(t, c, "r/owned", answerWithin)

	for _, n := range nodes {
		n.Kill()
	}
	harness.RestartAll(t, nodes...)
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	c = harness.Dial(t, nodes[0].ClientAddr)
	queryHeld(t, c, "r/held", held)
	queryFree(t, c, "r/released")
	heldBy(t, c, "r/owned", owned, "owner-r")
	c.Send("A r/owned 600000 -1 owner-r") // a retry after the restart: its own grant
	if tok := readGrant(t, c, "r/owned", answerWithin); tok != owned {
		t.Fatalf("retry after a full restart got token %d, want %d", tok, owned)
	}
	if tok := acquire(t, c, "r/released", 600000); tok <= released {
		t.Fatalf("token %d after a full restart, not above %d", tok, released)
	}
}

// TestClusterSnapshotInstallThenLeads: node 2 is cut off while the others
// commit far more entries than their logs keep (--snapshot-entries 20), so
// it catches up from a snapshot; then node 1 dies under load and node 2
// takes over. The locks held before are held with their tokens, a key
// granted again gets a larger token than before, node 2 serves the load,
// and nothing crashes.
func TestClusterSnapshotInstallThenLeads(t *testing.T) {
	t.Parallel()
	links := harness.NewLinks()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{
		Shards: 2, Links: links, Args: []string{"--snapshot-entries", "20"},
	})
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	c1 := harness.Dial(t, nodes[0].ClientAddr)
	held := map[string]uint64{}
	for _, k := range clusterKeys[:4] {
		held["s/"+k] = acquire(t, c1, "s/"+k, 120000)
	}

	links.Isolate(2)
	// Nodes 1 and 3 carry on alone: a moment without a heartbeat between
	// them on a loaded machine makes node 1 step down, which the load
	// rides out as a client would.
	majority := []*harness.Node{nodes[0], nodes[2]}
	last := map[string]uint64{} // the last token of each key granted and released
	for i := range 300 {
		k := fmt.Sprintf("s/load/%d", i%20)
		tok := acquireOnLeader(t, majority, c1, k, 60000)
		releaseKey(t, c1, k, tok)
		last[k] = tok
	}
	for _, k := range clusterKeys[4:8] {
		// Only a snapshot brings these to node 2, with their owners.
		held["s/"+k] = acquireOnLeader(t, majority, c1, "s/"+k, 120000)
	}
	startLoads := strings.Count(nodes[1].Log(), "shard table loaded")
	links.Heal()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(nodes[1].Log(), "shard table loaded") == startLoads {
		if time.Now().After(deadline) {
			t.Fatal("node 2 did not recover a shard from a snapshot within 20 s of the heal")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Load on node 2 (MOVED to node 1 until it leads) while node 1 dies.
	stop := make(chan struct{})
	var served atomic.Int64
	loadDone := make(chan error, 1)
	go func() { loadDone <- snapshotLoad(nodes[1].ClientAddr, stop, &served) }()
	nodes[0].Kill()
	waitLeads(t, nodes[1:], nodes[1], 10*time.Second)
	before := served.Load()
	deadline = time.Now().Add(10 * time.Second)
	for served.Load() < before+50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	if err := <-loadDone; err != nil {
		t.Fatalf("load on node 2: %v", err)
	}
	if n := served.Load() - before; n < 50 {
		t.Fatalf("node 2 granted %d try-locks in 10 s after taking over, want 50", n)
	}

	c2 := harness.Dial(t, nodes[1].ClientAddr)
	for i, k := range clusterKeys[:8] {
		key, tok := "s/"+k, held["s/"+k]
		if i < 4 {
			queryHeld(t, c2, key, tok)
			continue
		}
		heldBy(t, c2, key, tok, "owner-"+key)
		c2.Send(fmt.Sprintf("A %s 120000 -1 owner-%s", key, key))
		if again := readGrant(t, c2, key, answerWithin); again != tok {
			t.Fatalf("%s: a retry of its owner on the new leader got %d, want %d", key, again, tok)
		}
	}
	for k, tok := range last {
		if again := acquire(t, c2, k, 60000); again <= tok {
			t.Fatalf("%s granted again with token %d, not above %d", k, again, tok)
		}
	}
	for k, tok := range held {
		do(t, c2, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
	}
	for _, n := range nodes[1:] {
		if !n.Running() {
			t.Fatalf("node %d exited", n.ID)
		}
	}
}

// snapshotLoad sends try-locks and releases of a few keys to addr until
// stop, counting the grants; answers other than OK, TIMEOUT, MOVED and ERR
// unavailable are errors.
func snapshotLoad(addr string, stop <-chan struct{}, served *atomic.Int64) error {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		k := fmt.Sprintf("s/busy/%d", i%8)
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(nc, "A %s 10000 -1\n", k); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[2] == "OK":
			served.Add(1)
			if _, err := fmt.Fprintf(nc, "R %s %s\n", k, f[3]); err != nil {
				return err
			}
			if line, err = r.ReadString('\n'); err != nil {
				return err
			}
			if !strings.Contains(line, " OK") && !strings.Contains(line, " MOVED ") && !strings.Contains(line, " ERR unavailable") {
				return fmt.Errorf("release answered %q", line)
			}
		case len(f) >= 3 && (f[2] == "TIMEOUT" || f[2] == "MOVED" || (f[2] == "ERR" && len(f) > 3 && f[3] == "unavailable")):
			if f[2] != "TIMEOUT" {
				time.Sleep(5 * time.Millisecond) // not serving yet
			}
		default:
			return fmt.Errorf("acquire answered %q", line)
		}
	}
}

// TestClusterResumedLeaderChangesNothing pauses the leader past its holders'
// leases while the new leader renews them, then resumes it. In the moment
// before it hears of the new term, the resumed node still serves in its own
// view, and its lease timers propose an Expire for every lease it saw run
// out; dragonboat forwards those to the new leader. They must change
// nothing (the fence: statemachine package doc). Before the fence, the
// sixth 30-minute chaos run lost renewed leases this way, and this test
// failed about one run in two (the nodes log at debug level, as in the
// chaos runs: the time each trace line takes widens the window).
func TestClusterResumedLeaderChangesNothing(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{
		Shards: 2, Args: []string{"--log-level", "debug"},
	})
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	c1 := harness.Dial(t, nodes[0].ClientAddr)
	const lease = 2500 * time.Millisecond
	held := map[string]uint64{}
	for i := range 40 {
		k := fmt.Sprintf("z/%d", i)
		held[k] = acquireOnLeader(t, nodes, c1, k, int(lease/time.Millisecond))
	}
	ranOut := time.Now().Add(lease + 100*time.Millisecond)

	nodes[0].Pause()
	paused := true
	defer func() {
		if paused {
			nodes[0].Resume()
		}
	}()
	waitLeads(t, nodes[1:], nodes[1], 10*time.Second)
	c2 := harness.Dial(t, nodes[1].ClientAddr)
	for k, tok := range held {
		do(t, c2, fmt.Sprintf("K %s %d 60000", k, tok), "K "+k+" OK")
	}
	// Resume node 1 once every lease it knows of has run out in its view
	// (a wait for a deadline, which no event announces).
	time.Sleep(time.Until(ranOut))
	nodes[0].Resume()
	paused = false

	// Node 1 takes its leadership back (priority), after applying whatever
	// the others committed meanwhile, forwarded Expires of its own included.
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	c1 = harness.Dial(t, nodes[0].ClientAddr)
	for k, tok := range held {
		if left := heldBy(t, c1, k, tok, "owner-"+k); left < 30000 {
			t.Fatalf("%s: %d ms left of the lease renewed to 60 s", k, left)
		}
	}
}

// acquireOnLeader takes a free key through c, a connection to nodes[0], and
// rides out a leadership change meanwhile (an overloaded machine makes a
// leader miss its quorum now and then): the acquire names an owner, so a
// retry of one whose answer was ERR unavailable gets the grant back if it
// was made after all, and it is retried once node 1 leads again.
func acquireOnLeader(t *testing.T, nodes []*harness.Node, c *harness.Conn, key string, leaseMs int) uint64 {
	t.Helper()
	for range 5 {
		got := c.Do(t, fmt.Sprintf("A %s %d 0 owner-%s", key, leaseMs, key))
		if m := regexp.MustCompile(grantPattern(key)).FindStringSubmatch(got); m != nil {
			return parseU64(t, m[1])
		}
		if !leaderless(got) {
			t.Fatalf("acquire of %s: %q", key, got)
		}
		waitLeads(t, nodes, nodes[0], 10*time.Second)
	}
	t.Fatalf("acquire of %s: no grant in 5 tries", key)
	return 0
}
