package main_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// acquireShared sends an S for one of permits shared holds of key (wait
// forever), with owner if not "", and returns its token.
func acquireShared(t *testing.T, c *harness.Conn, key string, permits, leaseMs int, owner string) uint64 {
	t.Helper()
	line := fmt.Sprintf("S %s %d %d 0 %s", key, permits, leaseMs, owner)
	got := c.Do(t, strings.TrimSpace(line))
	return parseU64(t, match(t, got, `^S `+regexp.QuoteMeta(key)+` OK ([1-9][0-9]*)$`)[1])
}

// waitQuery asks Q key on c until the answer is want, for at most d.
func waitQuery(t *testing.T, c *harness.Conn, key, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := c.Do(t, "Q "+key)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Q %s: %q after %v, want %q", key, got, d, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSharedHoldsAcrossFailover (protocol 1.4): shared holds of a 3-node
// cluster's leader survive a kill -9 of it: the new leader shows the same
// holders, runs each grant's lease on its own (the orphan's short one runs
// out, the others hold), gives an owner's retry its grant back, keeps a
// writer's A waiting until every shared holder is gone, and the tokens
// keep growing; node 1, restarted, takes the lead back with the writer's
// grant.
func TestSharedHoldsAcrossFailover(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2})
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	const key = "sem/1"
	c := harness.Dial(t, nodes[0].ClientAddr)
	// The cluster version rises to 4 once every member reported its build:
	// until then S is ERR unavailable, with the reason.
	deadline := time.Now().Add(20 * time.Second)
	for {
		probe := c.Do(t, "S "+key+" 3 60000 -1")
		if m := regexp.MustCompile(`^S \S+ OK (\d+)$`).FindStringSubmatch(probe); m != nil {
			do(t, c, "R "+key+" "+m[1], "R "+key+" OK")
			break
		}
		if !strings.Contains(probe, "cluster version") || time.Now().After(deadline) {
			t.Fatalf("S before the cluster version rose: %q", probe)
		}
		time.Sleep(100 * time.Millisecond)
	}

	t1 := acquireShared(t, c, key, 3, 60000, "o1")
	t2 := acquireShared(t, c, key, 3, 60000, "o2")
	t3 := acquireShared(t, c, key, 3, 1500, "o3") // an orphan: nobody extends it
	if !(t1 < t2 && t2 < t3) {
		t.Fatalf("tokens %d, %d, %d: want each grant its own, growing", t1, t2, t3)
	}
	do(t, c, "Q "+key, "Q "+key+" SHARED 3 3")
	do(t, c, "S "+key+" 4 1000 -1", "S "+key+" ERR badrequest permits 4 differ from the key's 3")
	do(t, c, "S "+key+" 3 1000 -1", "S "+key+" TIMEOUT")

	nodes[0].Kill()
	waitLeads(t, nodes[1:], nodes[1], 15*time.Second)
	c2 := harness.Dial(t, nodes[1].ClientAddr)
	// Every lease starts afresh on the new leader: the orphan's runs out
	// 1.5 s after it serves, the others' do not.
	waitQuery(t, c2, key, "Q "+key+" SHARED 2 3", 10*time.Second)
	// The retry of o1 (its answer lost, say) gets its grant back.
	do(t, c2, "S "+key+" 3 60000 0 o1", fmt.Sprintf("S %s OK %d", key, t1))

	w := harness.Dial(t, nodes[1].ClientAddr)
	w.Send("A " + key + " 60000 0 writer")
	do(t, c2, fmt.Sprintf("R %s %d", key, t1), "R "+key+" OK")
	if line, err := w.ReadLine(300 * time.Millisecond); err == nil {
		t.Fatalf("the writer got %q while o2 still held a shared grant", line)
	}
	do(t, c2, fmt.Sprintf("R %s %d", key, t2), "R "+key+" OK")
	tw := readGrant(t, w, key, answerWithin)
	if tw <= t3 {
		t.Fatalf("the writer's token %d is not above the shared grants' (%d)", tw, t3)
	}

	nodes[0].Restart()
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	got := harness.Dial(t, nodes[0].ClientAddr).Do(t, "Q "+key)
	match(t, got, fmt.Sprintf(`^Q %s HELD %d [0-9]+ writer$`, regexp.QuoteMeta(key), tw))
}
