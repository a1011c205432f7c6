package main_test

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/baton-dev/baton/engine/seglog"
	"github.com/baton-dev/baton/tools/harness"
)

// keyRecord is what a client was told about one key, and what it asked
// and was not answered when the cluster died.
type keyRecord struct {
	token    uint64 // the holder's token as last acknowledged; 0 when released (or never granted)
	extended bool   // the last acknowledgement was an extend to extendedLeaseMs
	inFlight byte   // 'A', 'K' or 'R' sent and not answered; 0 for none
	maxSeen  uint64 // the largest token ever granted for the key
}

const (
	durableLeaseMs  = 600000
	extendedLeaseMs = 900000
)

// cycleKeys runs acquire, extend and release cycles on keys over c until
// the connection fails (the cluster was killed) or stop closes, recording
// in recs (owned by this goroutine until it returns) every acknowledgement
// and the request left unanswered.
func cycleKeys(c *harness.Conn, keys []string, recs []*keyRecord, stop <-chan struct{}) {
	ask := func(r *keyRecord, op byte, line string) (string, bool) {
		r.inFlight = op
		c.Send(line)
		got, err := c.ReadLine(5 * time.Second)
		if err != nil {
			return "", false // unanswered: the node died with it in flight
		}
		r.inFlight = 0
		return got, true
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		k, r := keys[i%len(keys)], recs[i%len(keys)]
		if r.token == 0 {
			got, ok := ask(r, 'A', fmt.Sprintf("A %s %d 0", k, durableLeaseMs))
			if !ok {
				return
			}
			if tok, found := strings.CutPrefix(got, "A "+k+" OK "); found {
				r.token, _ = strconv.ParseUint(tok, 10, 64)
				r.extended, r.maxSeen = false, max(r.maxSeen, r.token)
			}
			continue
		}
		if i%3 == 0 {
			got, ok := ask(r, 'K', fmt.Sprintf("K %s %d %d", k, r.token, extendedLeaseMs))
			if !ok {
				return
			}
			r.extended = r.extended || got == "K "+k+" OK"
			continue
		}
		got, ok := ask(r, 'R', fmt.Sprintf("R %s %d", k, r.token))
		if !ok {
			return
		}
		if got == "R "+k+" OK" {
			r.token, r.extended = 0, false
		}
	}
}

// openRaftLog opens the Raft log store (seglog) of a stopped node.
func openRaftLog(t *testing.T, n *harness.Node) raftio.ILogDB {
	t.Helper()
	var db raftio.ILogDB
	_ = filepath.WalkDir(filepath.Join(n.DataDir, "raft"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() != seglog.DirName {
			return nil
		}
		if db, err = seglog.Open(p, seglog.Options{}); err != nil {
			t.Fatalf("node %d: open its Raft log %s: %v", n.ID, p, err)
		}
		return filepath.SkipAll
	})
	if db == nil {
		t.Fatalf("node %d: no %s under %s", n.ID, seglog.DirName, n.DataDir)
	}
	return db
}

// forgetCommits sets the commit index that every shard of a stopped node's
// Raft log store (seglog) kept back to lag entries below the applied index
// its state machine persisted (never below the newest snapshot), as a power
// loss may leave them: the store writes a change of the commit index alone
// without syncing it, while the lock table's checkpoint may have reached
// the disk. It returns how many shards' state machines are then ahead of
// their log's commit index. The applied index is read from the lock table's
// meta by its documented layout ('m' shard(u32 BE) -> applied u64 LE, ...;
// statemachine package doc).
func forgetCommits(t *testing.T, n *harness.Node, replicaID uint64, shards int, lag uint64) (ahead int) {
	t.Helper()
	log := openRaftLog(t, n)
	defer log.Close()
	table, err := pebble.Open(filepath.Join(n.DataDir, "table"), &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("node %d: open its lock table: %v", n.ID, err)
	}
	defer table.Close()
	for shard := uint64(1); shard <= uint64(shards); shard++ {
		rs, err := log.ReadRaftState(shard, replicaID, 0)
		if err != nil {
			t.Fatalf("node %d shard %d: read Raft state: %v", n.ID, shard, err)
		}
		ss, err := log.GetSnapshot(shard, replicaID)
		if err != nil {
			t.Fatalf("node %d shard %d: read snapshot: %v", n.ID, shard, err)
		}
		v, closer, err := table.Get(binary.BigEndian.AppendUint32([]byte{'m'}, uint32(shard)))
		if err != nil {
			continue // no checkpoint yet: nothing can be ahead
		}
		applied := binary.LittleEndian.Uint64(v)
		closer.Close()
		st := rs.State
		st.Commit = max(ss.Index, min(st.Commit, applied-min(applied, lag)))
		if err := log.SaveRaftState([]pb.Update{{ShardID: shard, ReplicaID: replicaID, State: st}}, 1); err != nil {
			t.Fatalf("node %d shard %d: save Raft state: %v", n.ID, shard, err)
		}
		if applied > st.Commit {
			ahead++
		}
	}
	return ahead
}

// TestClusterKillAllUnderLoad stops all three nodes at a random moment of a
// load of acquires, extends and releases on every node's shards: first
// gracefully (SIGTERM, which makes every state machine checkpoint its table
// and applied index), then three times with kill -9 of all three at once.
// After each kill, before the restart, every node's Raft log is made to
// forget the last commit indexes it kept, as a power loss may
// (engine/seglog writes a change of the commit index alone without
// syncing it; forgetCommits): every state machine is then ahead of its
// log's commit index, the restart that this sync policy makes delicate,
// and the test checks that it was. After every restart each key must be as
// the clients were last told, or as the request they were not answered
// would have left it, and every grant after the last kill must have a
// token larger than any before.
func TestClusterKillAllUnderLoad(t *testing.T) {
	t.Parallel()
	const shards, workers, keysPer = 2, 6, 8
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: shards, Args: []string{"--raft-log", "seglog"}})
	recs := make([][]*keyRecord, workers)
	keys := make([][]string, workers)
	for w := range workers {
		for j := range keysPer {
			keys[w] = append(keys[w], fmt.Sprintf("kill/%d/%d", w, j))
			recs[w] = append(recs[w], &keyRecord{})
		}
	}
	for round := range 4 {
		waitLeads(t, nodes, nodes[0], 20*time.Second)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			c := harness.Dial(t, nodes[0].ClientAddr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				cycleKeys(c, keys[w], recs[w], stop)
			}()
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond) // the random moment of the stop
		how := "killed"
		if round == 0 {
			how = "stopped"
			close(stop)
			wg.Wait()
			for _, n := range nodes {
				if code, err := n.Stop(); err != nil || code != 0 {
					t.Fatalf("node %d: SIGTERM: exit %d, %v", n.ID, code, err)
				}
			}
		} else {
			for _, n := range nodes {
				n.Kill()
			}
			close(stop)
			wg.Wait()
			ahead := 0
			for i, n := range nodes {
				ahead += forgetCommits(t, n, uint64(i+1), shards, 3)
			}
			if ahead == 0 {
				t.Fatalf("round %d: no state machine is ahead of its Raft log's commit index: the restart this test is for did not happen", round)
			}
			how = fmt.Sprintf("killed, %d of %d state machines ahead of their log's commit index", ahead, len(nodes)*shards)
		}

		harness.RestartAll(t, nodes...)
		waitLeads(t, nodes, nodes[0], 20*time.Second)
		c := harness.Dial(t, nodes[0].ClientAddr)
		var held int
		for w := range workers {
			for j, k := range keys[w] {
				r := recs[w][j]
				isHeld, tok, remaining := query(t, c, k)
				switch {
				case r.token != 0 && r.inFlight == 'R' && !isHeld:
					r.token, r.extended = 0, false // the release applied; its answer was lost
				case r.token != 0 && (!isHeld || tok != r.token):
					t.Fatalf("round %d: %s was acknowledged to token %d (%c in flight), after the restart held=%v by %d", round, k, r.token, r.inFlight, isHeld, tok)
				case r.token != 0 && r.extended && r.inFlight == 0 && remaining <= durableLeaseMs:
					t.Fatalf("round %d: %s was extended to %d ms, has %d ms left after the restart", round, k, extendedLeaseMs, remaining)
				case r.token == 0 && isHeld && (r.inFlight != 'A' || tok <= r.maxSeen):
					t.Fatalf("round %d: %s released (or never granted; %c in flight, largest token %d), after the restart held by %d", round, k, r.inFlight, r.maxSeen, tok)
				case r.token == 0 && isHeld:
					r.token, r.maxSeen = tok, tok // the acquire applied; its answer was lost
				}
				if r.token != 0 {
					held++
				}
				r.inFlight = 0
			}
		}
		t.Logf("round %d (%s): all %d keys as acknowledged after the restart, %d held", round, how, workers*keysPer, held)
	}
	// Tokens keep growing across the kills: a fresh grant of every key.
	c := harness.Dial(t, nodes[0].ClientAddr)
	for w := range workers {
		for j, k := range keys[w] {
			r := recs[w][j]
			if r.token != 0 {
				do(t, c, fmt.Sprintf("R %s %d", k, r.token), "R "+k+" OK")
			}
			if tok := acquire(t, c, k, 60000); tok <= r.maxSeen {
				t.Fatalf("%s: token %d after the kills, not above %d", k, tok, r.maxSeen)
			}
		}
	}
}
