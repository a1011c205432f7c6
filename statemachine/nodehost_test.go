package statemachine

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/logger"
	"github.com/lni/dragonboat/v4/tools"

	"github.com/baton-dev/baton/tools/harness"
)

func init() {
	for _, name := range []string{"raft", "rsm", "transport", "dragonboat", "logdb", "grpc", "config",
		"raftpb", "settings", "tan", "pebblekv", "registry", "server", "gossip", "LogDB", "tools"} {
		logger.GetLogger(name).SetLevel(logger.ERROR)
	}
}

// startNode starts a one-replica NodeHost for shard over the pebble DB in
// dbDir and waits until the replica leads. A restart may pass nil members.
func startNode(t *testing.T, dir, addr string, members map[uint64]string, shard uint64, obs Observer, dbDir string) (*dragonboat.NodeHost, func()) {
	t.Helper()
	nh, stop := startReplica(t, dir, addr, 1, 1, members, shard, obs, dbDir)
	waitForLeader(t, shard, 1, nh)
	return nh, stop
}

// startReplica starts a NodeHost with replica replicaID of shard over the
// pebble DB in dbDir, without waiting for anything. rtt is the NodeHost's
// RTTMillisecond.
func startReplica(t *testing.T, dir, addr string, rtt, replicaID uint64, members map[uint64]string, shard uint64, obs Observer, dbDir string) (*dragonboat.NodeHost, func()) {
	t.Helper()
	db := openTestDB(t, dbDir)
	nh, err := dragonboat.NewNodeHost(config.NodeHostConfig{
		NodeHostDir:    filepath.Join(dir, "nh"),
		WALDir:         filepath.Join(dir, "wal"),
		RTTMillisecond: rtt,
		RaftAddress:    addr,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{
		ShardID:         shard,
		ReplicaID:       replicaID,
		ElectionRTT:     10,
		HeartbeatRTT:    1,
		CheckQuorum:     true,
		SnapshotEntries: 0,
	}
	if err := nh.StartOnDiskReplica(members, false, Factory(db, obs), cfg); err != nil {
		t.Fatal(err)
	}
	return nh, func() {
		nh.Close()
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
}

// waitForLeader waits until every NodeHost of nhs knows the same leader of
// shard, which must be want unless want is 0, and returns it.
func waitForLeader(t *testing.T, shard, want uint64, nhs ...*dragonboat.NodeHost) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var leader uint64
		agreed := true
		for _, nh := range nhs {
			id, _, ok, err := nh.GetLeaderID(shard)
			if err != nil || !ok || (leader != 0 && id != leader) {
				agreed = false
				break
			}
			leader = id
		}
		if agreed && (want == 0 || leader == want) {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInNodeHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dragonboat")
	}
	const shard = 12
	dir, dbDir, addr := t.TempDir(), t.TempDir(), harness.FreeAddr(t)
	obs := newRecorder()
	nh, stop := startNode(t, dir, addr, map[uint64]string{1: addr}, shard, obs, dbDir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	session := nh.GetNoOPSession(shard)

	var b Batch
	propose := func(seq uint64, cmds ...Command) uint64 {
		t.Helper()
		b.Reset()
		for _, c := range cmds {
			b.Append(c)
		}
		res, err := nh.SyncPropose(ctx, session, b.Seal(Header{Proposer: 99, Seq: seq}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Value
	}
	if n := propose(1, grant("a", 100), grant("b", 200), grant("a", 300)); n != 3 {
		t.Fatalf("Result.Value = %d", n)
	}
	if n := propose(2); n != 0 {
		t.Fatalf("barrier Result.Value = %d", n)
	}
	if n := propose(3, release("b", 0), extend("a", 1<<ShardBits|shard, 500), grant("c", 1)); n != 3 {
		t.Fatalf("Result.Value = %d", n)
	}

	var ours []applied
	for _, a := range obs.calls() {
		if a.h.Proposer == 99 {
			ours = append(ours, a)
		}
	}
	want := [][]Result{
		{{Code: Granted, Token: 1<<ShardBits | shard}, {Code: Granted, Token: 2<<ShardBits | shard}, {Code: GrantRejected, Token: 0}},
		nil,
		{{Code: Released, Token: 2<<ShardBits | shard}, {Code: Extended, Token: 1<<ShardBits | shard}, {Code: Granted, Token: 3<<ShardBits | shard}},
	}
	if len(ours) != len(want) {
		t.Fatalf("observer saw %d of our entries: %+v", len(ours), ours)
	}
	for i, a := range ours {
		if a.shard != shard || a.h.Seq != uint64(i+1) || len(a.results) != len(want[i]) {
			t.Fatalf("entry %d: %+v", i, a)
		}
		for j := range want[i] {
			if a.results[j] != want[i][j] {
				t.Errorf("entry %d result %d = %+v, want %+v", i, j, a.results[j], want[i][j])
			}
		}
		if i > 0 && a.index <= ours[i-1].index {
			t.Errorf("indexes not increasing: %d after %d", a.index, ours[i-1].index)
		}
	}
	got, err := nh.SyncRead(ctx, shard, LookupKey("a"))
	if err != nil || got != (LookupResult{Held: true, Token: 1<<ShardBits | shard, LeaseMs: 500}) {
		t.Fatalf("SyncRead = %+v, %v", got, err)
	}
	lastIndex := ours[2].index
	stop()

	// Restart on the same directories: the table is back, the observer is
	// told of it, and tokens continue.
	obs = newRecorder()
	nh, stop = startNode(t, dir, addr, map[uint64]string{1: addr}, shard, obs, dbDir)
	defer stop()
	session = nh.GetNoOPSession(shard)
	held := obs.lastReset(shard)
	if len(held) != 2 || held["a"].Token != 1<<ShardBits|shard || held["a"].LeaseMs != 500 || held["c"].Token != 3<<ShardBits|shard {
		t.Fatalf("after restart Reset told %+v", held)
	}
	if n := propose(4, grant("d", 1)); n != 1 {
		t.Fatalf("Result.Value = %d", n)
	}
	calls := obs.calls()
	last := calls[len(calls)-1]
	if last.index <= lastIndex || last.results[0] != (Result{Code: Granted, Token: 4<<ShardBits | shard}) {
		t.Fatalf("after restart: %+v", last)
	}
	for _, a := range calls[:len(calls)-1] {
		if a.h.Proposer == 99 {
			t.Errorf("entry %d applied again after restart", a.index)
		}
	}
}

// TestSnapshotThroughDragonboat exports a snapshot from one node (dragonboat
// calls PrepareSnapshot and SaveSnapshot with its own writer) and imports it
// into another whose DB already has rows for the shard (dragonboat calls
// RecoverFromSnapshot with its own reader on start).
func TestSnapshotThroughDragonboat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dragonboat")
	}
	const shard = 7
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	dirA, dbDirA, addrA := t.TempDir(), t.TempDir(), harness.FreeAddr(t)
	nh, stop := startNode(t, dirA, addrA, map[uint64]string{1: addrA}, shard, nil, dbDirA)
	var b Batch
	for i := range 300 {
		b.Append(grant(fmt.Sprintf("lock/%d", i), uint32(i+1)))
	}
	if _, err := nh.SyncPropose(ctx, nh.GetNoOPSession(shard), b.Seal(Header{Seq: 1})); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	b.Append(release("lock/0", 0))
	if _, err := nh.SyncPropose(ctx, nh.GetNoOPSession(shard), b.Seal(Header{Seq: 2})); err != nil {
		t.Fatal(err)
	}
	exportDir := t.TempDir()
	if _, err := nh.SyncRequestSnapshot(ctx, shard, dragonboat.SnapshotOption{Exported: true, ExportPath: exportDir}); err != nil {
		t.Fatal(err)
	}
	stop()
	srcDir, err := filepath.Glob(filepath.Join(exportDir, "snapshot-*"))
	if err != nil || len(srcDir) != 1 {
		t.Fatalf("exported snapshot: %v %v", srcDir, err)
	}

	// The imported membership keeps replica 1's address, so node B reuses it.
	dirB, dbDirB, addrB := t.TempDir(), t.TempDir(), addrA
	db := openTestDB(t, dbDirB)
	junk, _ := openSM(t, db, nil, shard)
	update(t, junk, entry(1, grant("junk", 1), grant("lock/0", 1)))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	nhc := config.NodeHostConfig{NodeHostDir: filepath.Join(dirB, "nh"), WALDir: filepath.Join(dirB, "wal"), RTTMillisecond: 1, RaftAddress: addrB}
	if err := tools.ImportSnapshot(nhc, srcDir[0], map[uint64]string{1: addrB}, 1); err != nil {
		t.Fatal(err)
	}
	obs := newRecorder()
	nh, stop = startNode(t, dirB, addrB, nil, shard, obs, dbDirB)
	defer stop()
	held := obs.lastReset(shard)
	if len(held) != 299 || held["lock/7"].LeaseMs != 8 || held["lock/7"].Token != 8<<ShardBits|shard {
		t.Fatalf("after import Reset told %d locks: lock/7 = %+v", len(held), held["lock/7"])
	}
	for _, k := range []string{"junk", "lock/0"} {
		if r, err := nh.SyncRead(ctx, shard, LookupKey(k)); err != nil || r.(LookupResult).Held {
			t.Errorf("%s after import: %+v %v", k, r, err)
		}
	}
	b.Reset()
	b.Append(grant("lock/0", 1))
	if _, err := nh.SyncPropose(ctx, nh.GetNoOPSession(shard), b.Seal(Header{Proposer: 5, Seq: 3})); err != nil {
		t.Fatal(err)
	}
	calls := obs.calls()
	if got := calls[len(calls)-1].results[0]; got != (Result{Code: Granted, Token: 301<<ShardBits | shard}) {
		t.Fatalf("grant after import: %+v", got)
	}
}

// TestFenceThroughAFollower runs the mechanism the fence exists for: a
// batch proposed through a follower's NodeHost, which dragonboat forwards
// to the leader, is appended like the leader's own, so only the fence can
// keep out the batch of a proposer that no longer holds it. After
// proposer a's fence, a batch of b through the follower is answered
// Fenced (on the follower, whose proposal it is, and on every replica:
// the key stays free), and one of a through the same follower applies;
// after b's fence, proposed through the follower too, it is the other way
// round.
func TestFenceThroughAFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dragonboat")
	}
	const shard, replicas = 13, 3
	const a, b = 0xa1, 0xb2
	members := map[uint64]string{}
	for id := uint64(1); id <= replicas; id++ {
		members[id] = harness.FreeAddr(t)
	}
	nhs := make([]*dragonboat.NodeHost, replicas+1) // by replica id
	obs := make([]*recorder, replicas+1)
	for id := uint64(1); id <= replicas; id++ {
		obs[id] = newRecorder()
		// A 5 ms RTT: the machine may be busy, and a spurious election
		// would make the follower the leader.
		nh, stop := startReplica(t, t.TempDir(), members[id], 5, id, members, shard, obs[id], t.TempDir())
		defer stop()
		nhs[id] = nh
	}
	leader := waitForLeader(t, shard, 0, nhs[1:]...)
	follower := leader%replicas + 1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// retry calls request until it succeeds, with a timeout of its own
	// each time: dragonboat may drop a request (while the connections
	// between the nodes come up, say) and report it only as a timeout.
	retry := func(what string, request func(context.Context) error) {
		t.Helper()
		for {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			err := request(rctx)
			rcancel()
			if err == nil {
				return
			}
			if !dragonboat.IsTempError(err) || ctx.Err() != nil {
				t.Fatalf("%s: %v", what, err)
			}
			t.Logf("%s: %v; again", what, err)
		}
	}
	// propose proposes h's batch through replica id's NodeHost until it
	// is applied there, and returns the results of its first application
	// (a retried proposal may apply twice).
	propose := func(id uint64, h Header, cmds ...Command) []Result {
		t.Helper()
		var batch Batch
		for _, c := range cmds {
			batch.Append(c)
		}
		data := batch.Seal(h)
		retry(fmt.Sprintf("propose %+v through replica %d", h, id), func(ctx context.Context) error {
			_, err := nhs[id].SyncPropose(ctx, nhs[id].GetNoOPSession(shard), data)
			return err
		})
		for _, c := range obs[id].calls() {
			if reflect.DeepEqual(c.h, h) {
				return c.results
			}
		}
		t.Fatalf("replica %d applied %+v, its observer was not told", id, h)
		return nil
	}
	// heldOn waits until every replica has applied h's entry, then reads
	// key from each replica's table: a local read once the observer was
	// told, rather than a SyncRead, which dragonboat drops now and then.
	heldOn := func(h Header, key string) []bool {
		t.Helper()
		var out []bool
		for id := uint64(1); id <= replicas; id++ {
			for !slices.ContainsFunc(obs[id].calls(), func(c applied) bool { return reflect.DeepEqual(c.h, h) }) {
				if ctx.Err() != nil {
					t.Fatalf("replica %d never applied %+v", id, h)
				}
				time.Sleep(time.Millisecond)
			}
			r, err := nhs[id].StaleRead(shard, LookupKey(key))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.(LookupResult).Held)
		}
		return out
	}
	all := func(v bool) []bool { return []bool{v, v, v} }
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	fenced := []Result{{Code: Fenced}}

	steps := []struct {
		name    string
		through uint64
		h       Header
		cmds    []Command
		want    []Result
		key     string // read on every replica after the step ("": none)
		held    bool   // what every replica must find
	}{
		{"a's fence, through the leader", leader, Header{Proposer: a, Seq: 1, Fence: true}, nil, nil, "", false},
		{"b's grant is fenced", follower, Header{Proposer: b, Seq: 1}, []Command{grant("stale", 1000)}, fenced, "stale", false},
		{"a's grant applies", follower, Header{Proposer: a, Seq: 2}, []Command{grant("fresh", 1000)}, []Result{{Code: Granted, Token: tok(1)}}, "fresh", true},
		{"b's release is fenced", follower, Header{Proposer: b, Seq: 2}, []Command{release("fresh", 0)}, fenced, "fresh", true},
		{"b's fence, through the follower", follower, Header{Proposer: b, Seq: 3, Fence: true}, nil, nil, "", false},
		{"a's release is fenced", follower, Header{Proposer: a, Seq: 3}, []Command{release("fresh", 0)}, fenced, "fresh", true},
		{"b's release applies", follower, Header{Proposer: b, Seq: 4}, []Command{release("fresh", 0)}, []Result{{Code: Released, Token: tok(1)}}, "fresh", false},
	}
	for _, st := range steps {
		if got := propose(st.through, st.h, st.cmds...); !slices.Equal(got, st.want) {
			t.Fatalf("%s: results %+v, want %+v", st.name, got, st.want)
		}
		if st.key != "" {
			if got := heldOn(st.h, st.key); !slices.Equal(got, all(st.held)) {
				t.Fatalf("%s: %q held on the replicas: %v", st.name, st.key, got)
			}
		}
	}
	// Every replica was told the same of every step, up to the last
	// step's first entry, which heldOn waited for on each (a retried
	// proposal may apply again after it).
	last := steps[len(steps)-1].h
	ours := func(id uint64) (out []applied) {
		for _, c := range obs[id].calls() {
			if c.h.Proposer == a || c.h.Proposer == b {
				out = append(out, c)
			}
			if reflect.DeepEqual(c.h, last) {
				break
			}
		}
		return out
	}
	for id := uint64(2); id <= replicas; id++ {
		if !reflect.DeepEqual(ours(id), ours(1)) {
			t.Fatalf("replicas 1 and %d were told different things:\n%+v\n%+v", id, ours(1), ours(id))
		}
	}
	if now := waitForLeader(t, shard, 0, nhs[1:]...); now != leader {
		// Still a valid run, but not of a follower's proposals throughout.
		t.Logf("leadership moved from replica %d to %d during the test", leader, now)
	}
}
