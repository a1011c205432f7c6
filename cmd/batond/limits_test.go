package main_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/bench"
	"github.com/baton-dev/baton/tools/harness"
)

// End-to-end tests of the limits (docs/protocol.md, Limits) and of the log:
// each limit is exceeded on a real batond, which answers ERR overloaded (or
// closes the connection), logs it, and goes on serving the other clients.

// waitForLog waits up to d for a line of n's log that matches pattern, and
// returns it. Limits hit are logged within about a second.
func waitForLog(t *testing.T, n *harness.Node, d time.Duration, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(d)
	for {
		for _, line := range strings.Split(n.Log(), "\n") {
			if re.MatchString(line) {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line matching %s after %v", pattern, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// served dials n and returns the connection once the node answers on it;
// a connection the node closes at once (it still counts one that just
// closed) is tried again, for up to d.
func served(t *testing.T, n *harness.Node, d time.Duration) *harness.Conn {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		c := harness.Dial(t, n.ClientAddr)
		_, _ = c.Write([]byte("Q conns/k\n"))
		line, err := c.ReadLine(harness.DefaultTimeout)
		if err == nil {
			if line != "Q conns/k FREE" {
				t.Fatalf("Q conns/k: %q", line)
			}
			return c
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no connection served within %v: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Past --max-conns a new connection is closed at once and logged; the
// connections open are served, and once one closes a new one is let in.
func TestConnLimit(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1, Args: []string{"--max-conns", "3"}})
	var open []*harness.Conn
	for range 3 {
		open = append(open, served(t, n, 10*time.Second))
	}
	refused := harness.Dial(t, n.ClientAddr)
	_, _ = refused.Write([]byte("Q conns/k\n"))
	if line, err := refused.ReadLine(harness.DefaultTimeout); err == nil || harness.IsTimeout(err) {
		t.Fatalf("a fourth connection: got %q, %v; want it closed at once", line, err)
	}
	for _, c := range open {
		do(t, c, "Q conns/k", "Q conns/k FREE")
	}
	waitForLog(t, n, 5*time.Second, `msg="limit hit" limit=max-conns value=3 count=[1-9]`)
	open[0].Close()
	served(t, n, 10*time.Second)
}

// The acquire limits: per key (an acquire of an owner that already waits
// takes no place), per connection and on the node. Each refused acquire is
// answered ERR overloaded at once, and the node goes on serving: once
// acquires are answered there is room again.
func TestWaiterLimits(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1, Args: []string{
		"--max-waiters-per-key", "2", "--max-waiters-per-conn", "3", "--max-waiters", "6"}})
	h := harness.Dial(t, n.ClientAddr)
	tokens := map[string]uint64{}
	for _, k := range []string{"w/a", "w/b", "w/c", "w/d", "w/e"} {
		tokens[k] = acquire(t, h, k, 60000)
	}
	c1, c2, c3, c4, c5 := harness.Dial(t, n.ClientAddr), harness.Dial(t, n.ClientAddr),
		harness.Dial(t, n.ClientAddr), harness.Dial(t, n.ClientAddr), harness.Dial(t, n.ClientAddr)

	// Per key: two wait, a third place is refused, o1's second acquire
	// shares o1's place.
	c1.Send("A w/a 60000 0 o1")
	queryHeld(t, c1, "w/a", tokens["w/a"]) // the acquire waits, the query is answered
	c2.Send("A w/a 60000 0")
	queryHeld(t, c2, "w/a", tokens["w/a"])
	do(t, c3, "A w/a 60000 0", "A w/a ERR overloaded too many acquires wait for this key (2), retry later")
	c3.Send("A w/a 60000 0 o1")
	queryHeld(t, c3, "w/a", tokens["w/a"])

	// Per connection: 3 wait, the fourth is refused.
	c4.Send("A w/b 60000 0", "A w/c 60000 0", "A w/d 60000 0")
	do(t, c4, "A w/e 60000 0", "A w/e ERR overloaded too many unanswered acquires on this connection (3)")

	// On the node: 6 wait (3 for w/a, 3 on c4), one more is refused, even
	// of a free key; queries are served all the same.
	do(t, c5, "A w/free 60000 0", "A w/free ERR overloaded too many acquires wait on this node (6), retry later")
	queryFree(t, c5, "w/free")

	// w/a goes to o1: both of its acquires are answered, with one token;
	// that makes room on the node.
	do(t, h, fmt.Sprintf("R w/a %d", tokens["w/a"]), "R w/a OK")
	tok := readGrant(t, c1, "w/a", answerWithin)
	if got := readGrant(t, c3, "w/a", answerWithin); got != tok {
		t.Fatalf("o1's acquires got tokens %d and %d, want one grant", tok, got)
	}
	fresh := acquire(t, c5, "w/free", 60000)
	do(t, c5, fmt.Sprintf("R w/free %d", fresh), "R w/free OK")
	waitForLog(t, n, 5*time.Second, `msg="limit hit" limit=max-waiters-per-key value=2 count=1 `)
	waitForLog(t, n, 5*time.Second, `msg="limit hit" limit=max-waiters-per-conn value=3 count=1 `)
	waitForLog(t, n, 5*time.Second, `msg="limit hit" limit=max-waiters value=6 count=1 `)
}

// In a cluster every Q waits for a ReadIndex; past --max-pending-queries a
// Q is answered ERR overloaded, the others are answered, and the leader goes
// on serving queries.
func TestPendingQueriesLimit(t *testing.T) {
	t.Parallel()
	// The harness's readiness probe pipelines 64 queries.
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 1, Args: []string{"--max-pending-queries", "100"}})
	c := harness.Dial(t, nodes[0].ClientAddr)
	eventually(t, c, "pq/k", "Q pq/k FREE", 15*time.Second) // node 1 leads
	const n = 5000
	c.Send(slices.Repeat([]string{"Q pq/k"}, n)...)
	lines, err := c.ReadLines(n, 10*time.Second)
	if err != nil {
		t.Fatalf("answers: %v", err)
	}
	var free, overloaded int
	for _, l := range lines {
		switch l {
		case "Q pq/k FREE":
			free++
		case "Q pq/k ERR overloaded too many queries wait for the leader to confirm its leadership, retry later":
			overloaded++
		default:
			t.Fatalf("answer %q", l)
		}
	}
	t.Logf("%d queries pipelined: %d answered FREE, %d ERR overloaded", n, free, overloaded)
	if free == 0 || overloaded == 0 {
		t.Fatalf("%d FREE and %d ERR overloaded: want some of each", free, overloaded)
	}
	queryFree(t, c, "pq/k")
	waitForLog(t, nodes[0], 5*time.Second, `msg="limit hit" limit=max-pending-queries value=100 count=[1-9]`)
}

// flood sends line on c over and over without ever reading the answers,
// until the server cuts the connection off (nil) or limit bytes were sent.
func flood(c *harness.Conn, line string, limit int) error {
	chunk := []byte(strings.Repeat(line, (64<<10)/len(line)))
	for sent := 0; sent < limit; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			if harness.IsTimeout(err) {
				return fmt.Errorf("the server stopped reading after %d bytes: %v", sent, err)
			}
			return nil
		}
	}
	return fmt.Errorf("still connected after %d bytes of requests", limit)
}

// neverReading runs clients that flood n with queries of a key held with a
// 64-byte owner (each 8-byte query is answered with about 90 bytes), and
// returns by how much n's RSS grew once all of them were cut off. Another
// client is served meanwhile and after.
func neverReading(t testing.TB, n *harness.Node, clients int) (growth int64) {
	t.Helper()
	h := harness.Dial(t, n.ClientAddr)
	owner := strings.Repeat("o", 64)
	h.Send("A rss/k 600000 0 " + owner)
	tok := readGrant(t, h, "rss/k", answerWithin)
	rss := bench.ProcRSS(n.Cmd.Process.Pid)
	before, err := rss()
	if err != nil {
		t.Fatalf("RSS: %v", err)
	}
	done := make(chan error, clients)
	for range clients {
		c := harness.Dial(t, n.ClientAddr)
		go func() { done <- flood(c, "Q rss/k\n", 1<<30) }()
	}
	for range clients {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		heldBy(t, h, "rss/k", tok, owner)
	}
	after, err := rss()
	if err != nil {
		t.Fatalf("RSS: %v", err)
	}
	t.Logf("%d clients that never read: RSS %d MiB before, %d MiB after", clients, before>>20, after>>20)
	return after - before
}

// A client that never reads is cut off at --max-unsent-per-conn (default
// 4 MiB) and the server's memory stays bounded. Measured on 2 cores: RSS
// grew by 20 MiB for 4 clients (69 MiB with -race), by 206 MiB with the
// limit at 64 MiB as it was before.
func TestNeverReadingClientCutOff(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1})
	const clients, bound = 4, rssFactor * 64 << 20
	if growth := neverReading(t, n, clients); growth > bound {
		t.Fatalf("RSS grew by %d MiB for %d clients, want at most %d MiB", growth>>20, clients, bound>>20)
	}
	waitForLog(t, n, 5*time.Second, `msg="limit hit" limit=max-unsent-per-conn value=4194304 count=[1-9]`)
}

// BenchmarkNeverReadingClients reports by how much a node's RSS grows for
// 4 clients that never read their answers, with the default limits, with
// the per-connection limit at 64 MiB as it was before the limits, and with
// that but 8 MiB over all connections: the figures of BENCHMARKS.md, each
// setting on a fresh node, in one run.
//
//	go test -run '^$' -bench NeverReadingClients -benchtime 1x -count 3 ./cmd/batond
func BenchmarkNeverReadingClients(b *testing.B) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"per-conn=64MiB", []string{"--max-unsent-per-conn", "64MiB"}},
		{"per-conn=64MiB,total=8MiB", []string{"--max-unsent-per-conn", "64MiB", "--max-unsent", "8MiB"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var growth int64
			for b.Loop() {
				b.StopTimer()
				n := harness.StartNode(b, harness.Bin(b), harness.Options{Shards: 1, Args: c.args})
				b.StartTimer()
				growth = neverReading(b, n, 4)
			}
			b.ReportMetric(float64(growth)/(1<<20), "MiB-RSS-growth")
		})
	}
}

// Past --max-unsent over all connections, the connections with the most
// unsent answers are cut off, long before any reaches its own limit (64 MiB
// here, which alone would let RSS grow by about 200 MiB; measured with 8 MiB
// in all: 18 MiB, 58 MiB with -race).
func TestUnsentTotalCutsOff(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1, Args: []string{
		"--max-unsent-per-conn", "64MiB", "--max-unsent", "8MiB"}})
	const clients, bound = 4, rssFactor * 64 << 20
	if growth := neverReading(t, n, clients); growth > bound {
		t.Fatalf("RSS grew by %d MiB for %d clients, want at most %d MiB", growth>>20, clients, bound>>20)
	}
	waitForLog(t, n, 5*time.Second, `msg="limit hit" limit=max-unsent value=8388608 count=[1-9]`)
}

// With --log-format json every line batond writes is a JSON object: the
// start-up line carries the settings, and a limit hit a thousand times in
// a burst is one line (or two, across a poll of the log) counting them all.
func TestLogFormatJSON(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1, Args: []string{
		"--log-format", "json", "--max-waiters-per-key", "1"}})
	h := harness.Dial(t, n.ClientAddr)
	tok := acquire(t, h, "json/k", 60000)
	waiting := harness.Dial(t, n.ClientAddr)
	waiting.Send("A json/k 60000 0")
	queryHeld(t, waiting, "json/k", tok)
	c := harness.Dial(t, n.ClientAddr)
	const hits = 1000
	c.Send(slices.Repeat([]string{"A json/k 60000 0"}, hits)...)
	lines, err := c.ReadLines(hits, 10*time.Second)
	if err != nil {
		t.Fatalf("answers: %v", err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "A json/k ERR overloaded ") {
			t.Fatalf("answer %q, want ERR overloaded", l)
		}
	}
	waitForLog(t, n, 5*time.Second, `"msg":"limit hit"`)
	if code, err := n.Stop(); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v", code, err)
	}

	var started, floor map[string]any
	counted := 0
	limitLines := 0
	for _, line := range strings.Split(n.Log(), "\n") {
		if line == "" || strings.HasPrefix(line, "=== harness ") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q (%v)", line, err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("line without %q: %q", k, line)
			}
		}
		switch m["msg"] {
		case "batond started":
			started = m
		case "heap floor":
			floor = m
		case "limit hit":
			if m["limit"] != "max-waiters-per-key" || m["level"] != "WARN" {
				t.Fatalf("limit line %q", line)
			}
			limitLines++
			counted += int(m["count"].(float64))
		}
	}
	if started == nil {
		t.Fatal("no start-up line")
	}
	if floor == nil || floor["bytes"] != float64(64<<20) { // --heap-floor's default
		t.Fatalf("heap floor line %v, want bytes %d", floor, 64<<20)
	}
	limits, _ := started["limits"].(map[string]any)
	if limits["max-waiters-per-key"] != 1.0 || limits["max-conns"] != 50000.0 || started["shards"] != 1.0 {
		t.Fatalf("start-up line: %v", started)
	}
	if counted != hits || limitLines > 2 {
		t.Fatalf("%d lines counting %d hits, want %d hits in one or two lines", limitLines, counted, hits)
	}
}
