package main_test

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// watchLine reads the watch's next line, which must match pattern (a
// regular expression, anchored), and returns its submatches.
func watchLine(t *testing.T, w *harness.Conn, d time.Duration, pattern string) []string {
	t.Helper()
	line, err := w.ReadLine(d)
	if err != nil {
		t.Fatalf("waiting for a watch line like %s: %v", pattern, err)
	}
	m := regexp.MustCompile("^" + pattern + "$").FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("watch line %q, want %s", line, pattern)
	}
	return m
}

// startWatch watches key on the node at addr, retrying while it answers
// ERR unavailable (a node that has just become the leader serves once its
// fence applied), and returns the connection and the watch's first line.
func startWatch(t *testing.T, addr, key string) (*harness.Conn, string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		w := harness.Dial(t, addr)
		line := w.Do(t, "W "+key)
		if !strings.HasPrefix(line, "W "+key+" ERR unavailable") || time.Now().After(deadline) {
			return w, line
		}
		w.Close()
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWatchAcrossFailover (protocol 1.4): a watch on the leader of a
// 3-node cluster sees every grant with its token, releases, a lease
// running out, and no line for an extend; the leader's graceful stop ends
// it with MOVED to the new leader, where it is started again and answers
// the state the old leader's watch left (the grant survives); node 1,
// back, takes its shards back and the watch on node 2 ends with MOVED to
// it.
func TestWatchAcrossFailover(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2})
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	const key = "watch/1"
	w := harness.Dial(t, nodes[0].ClientAddr)
	c := harness.Dial(t, nodes[0].ClientAddr)
	do(t, w, "W "+key, "W "+key+" FREE")

	c.Send("A " + key + " 60000 0 client-a")
	t1 := readGrant(t, c, key, answerWithin)
	watchLine(t, w, answerWithin, fmt.Sprintf(`W %s HELD %d [0-9]+ client-a`, key, t1))
	do(t, c, fmt.Sprintf("K %s %d 60000", key, t1), "K "+key+" OK")
	do(t, c, fmt.Sprintf("R %s %d", key, t1), "R "+key+" OK")
	watchLine(t, w, answerWithin, `W `+key+` FREE`) // the extend showed nothing

	t2 := acquire(t, c, key, 300)
	watchLine(t, w, answerWithin, fmt.Sprintf(`W %s HELD %d [0-9]+`, key, t2))
	watchLine(t, w, 5*time.Second, `W `+key+` FREE`) // its lease ran out
	t3 := acquire(t, c, key, 120000)
	watchLine(t, w, answerWithin, fmt.Sprintf(`W %s HELD %d [0-9]+`, key, t3))
	if !(t1 < t2 && t2 < t3) {
		t.Errorf("tokens %d, %d, %d: want them growing", t1, t2, t3)
	}

	// The leader stops gracefully: it hands its shards over, and the
	// watch ends with MOVED to the new leader.
	if err := nodes[0].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	m := watchLine(t, w, 20*time.Second, `W `+key+` MOVED (\S+)`)
	to := nodes[1]
	if m[1] != to.ClientAddr {
		to = nodes[2]
	}
	if m[1] != to.ClientAddr {
		t.Fatalf("MOVED to %s, which is neither node 2 (%s) nor node 3 (%s)", m[1], nodes[1].ClientAddr, nodes[2].ClientAddr)
	}
	if code, err := nodes[0].Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("node 1 after SIGTERM: exit %d, %v", code, err)
	}
	w2, first := startWatch(t, to.ClientAddr, key)
	if !regexp.MustCompile(fmt.Sprintf(`^W %s HELD %d [0-9]+$`, key, t3)).MatchString(first) {
		t.Fatalf("the watch on the new leader starts with %q; want HELD %d", first, t3)
	}

	// Node 1 comes back and takes its shards back (priority): the watch on
	// the node that led meanwhile ends with MOVED to node 1.
	nodes[0].Start()
	watchLine(t, w2, 30*time.Second, `W `+key+` MOVED `+regexp.QuoteMeta(nodes[0].ClientAddr))
	w3, first := startWatch(t, nodes[0].ClientAddr, key)
	if !regexp.MustCompile(fmt.Sprintf(`^W %s HELD %d [0-9]+$`, key, t3)).MatchString(first) {
		t.Fatalf("the watch on node 1, back, starts with %q; want HELD %d", first, t3)
	}
	c3 := harness.Dial(t, nodes[0].ClientAddr)
	do(t, c3, fmt.Sprintf("R %s %d", key, t3), "R "+key+" OK")
	watchLine(t, w3, answerWithin, `W `+key+` FREE`)
	do(t, w3, "U "+key, "U "+key+" OK")
	acquire(t, c3, key, 1000)
	// The grant committed before this Q: a W line for it would come first.
	if got := w3.Do(t, "Q "+key); !strings.HasPrefix(got, "Q "+key+" HELD ") {
		t.Fatalf("after U, the watching connection got %q; want the answer to its Q", got)
	}
}
