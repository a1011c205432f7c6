package main_test

import (
	"fmt"
	"io/fs"
	"path/filepath"
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
	c.AwaitSharedHolds(t, key, 3)

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
	eventually(t, c2, key, "Q "+key+" SHARED 2 3", 10*time.Second)
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

// TestSharedHoldsKillRestart: shared holds survive a kill -9 of a single
// node, once from the Raft log and once from a snapshot (the node takes one
// every 20 entries), with their own tokens, permits, owners and leases
// (each starts afresh at the restart); a key whose holders all left stays
// free, and new grants continue every key's token sequence.
func TestSharedHoldsKillRestart(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1, Args: []string{"--snapshot-entries", "20"}})
	c := harness.Dial(t, n.ClientAddr)
	c.AwaitSharedHolds(t, "sr/a", 3)
	t1 := acquireShared(t, c, "sr/a", 3, 60000, "o1")
	t2 := acquireShared(t, c, "sr/a", 3, 60000, "")
	t3 := acquireShared(t, c, "sr/gone", 2, 60000, "")
	do(t, c, fmt.Sprintf("R sr/gone %d", t3), "R sr/gone OK")
	last := t3
	for round := range 2 {
		n.Kill()
		n.Restart()
		c = harness.Dial(t, n.ClientAddr)
		do(t, c, "Q sr/a", "Q sr/a SHARED 2 3")
		do(t, c, "Q sr/gone", "Q sr/gone FREE")
		// The owner's retry gets its grant back; the permits stay the key's.
		do(t, c, "S sr/a 3 60000 0 o1", fmt.Sprintf("S sr/a OK %d", t1))
		do(t, c, "S sr/a 2 60000 -1", "S sr/a ERR badrequest permits 2 differ from the key's 3")
		tok := acquireShared(t, c, "sr/gone", 2, 60000, "")
		if tok <= last {
			t.Fatalf("round %d: token %d after a restart, not above %d", round, tok, last)
		}
		do(t, c, fmt.Sprintf("R sr/gone %d", tok), "R sr/gone OK")
		last = tok
		// Enough entries for a snapshot before the next kill.
		for range 25 {
			do(t, c, fmt.Sprintf("K sr/a %d 60000", t2), "K sr/a OK")
		}
	}
	snapshots := 0
	filepath.WalkDir(n.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "snapshot-") {
			snapshots++
		}
		return nil
	})
	if snapshots == 0 {
		t.Fatalf("no snapshot in %s: the restarts did not load one", n.DataDir)
	}
}

// TestBackupRestoreShared: a backup of a node whose keys have shared
// holders starts a new node (--restore) on which they hold with their
// tokens, permits and owners: Q shows them, an owner's retry gets its
// grant back, a permits that differs is refused, and a new grant's token
// is above every token of the old node.
func TestBackupRestoreShared(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	old := harness.StartNode(t, bin, harness.Options{Shards: 2, HTTP: true})
	oc := harness.Dial(t, old.ClientAddr)
	oc.AwaitSharedHolds(t, "bs/a", 3)
	oc.AwaitSharedHolds(t, "bs/b", 2) // the other shard's version rises on its own
	t1 := acquireShared(t, oc, "bs/a", 3, 600000, "o1")
	acquireShared(t, oc, "bs/a", 3, 600000, "")
	file := takeBackup(t, old)
	top := acquireShared(t, oc, "bs/b", 2, 600000, "") // after the backup
	if code, err := old.Stop(); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v", code, err)
	}

	n := harness.StartNode(t, bin, harness.Options{Shards: 2, HTTP: true, Args: []string{"--restore", file}})
	c := harness.Dial(t, n.ClientAddr)
	eventually(t, c, "bs/a", "Q bs/a SHARED 2 3", 15*time.Second)
	c.AwaitSharedHolds(t, "bs/b", 3)
	do(t, c, "Q bs/b", "Q bs/b FREE")
	do(t, c, "S bs/a 3 600000 0 o1", fmt.Sprintf("S bs/a OK %d", t1))
	do(t, c, "S bs/a 4 1000 -1", "S bs/a ERR badrequest permits 4 differ from the key's 3")
	for _, k := range []string{"bs/a", "bs/b"} {
		if tok := acquireShared(t, c, k, 3, 600000, ""); tok <= top {
			t.Fatalf("%s: token %d after the restore, not above %d", k, tok, top)
		}
	}
}
