package statemachine

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/logger"
	"github.com/lni/dragonboat/v4/tools"
)

func init() {
	for _, name := range []string{"raft", "rsm", "transport", "dragonboat", "logdb", "grpc", "config",
		"raftpb", "settings", "tan", "pebblekv", "registry", "server", "gossip", "LogDB", "tools"} {
		logger.GetLogger(name).SetLevel(logger.ERROR)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startNode starts a one-replica NodeHost for shard over the pebble DB in
// dbDir and waits until the replica leads. A restart may pass nil members.
func startNode(t *testing.T, dir, addr string, members map[uint64]string, shard uint64, obs Observer, dbDir string) (*dragonboat.NodeHost, func()) {
	t.Helper()
	db := openTestDB(t, dbDir)
	nh, err := dragonboat.NewNodeHost(config.NodeHostConfig{
		NodeHostDir:    filepath.Join(dir, "nh"),
		WALDir:         filepath.Join(dir, "wal"),
		RTTMillisecond: 1,
		RaftAddress:    addr,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{
		ShardID:         shard,
		ReplicaID:       1,
		ElectionRTT:     10,
		HeartbeatRTT:    1,
		CheckQuorum:     true,
		SnapshotEntries: 0,
	}
	if err := nh.StartOnDiskReplica(members, false, Factory(db, obs), cfg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if id, _, ok, err := nh.GetLeaderID(shard); err == nil && ok && id == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nh, func() {
		nh.Close()
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestInNodeHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dragonboat")
	}
	const shard = 12
	dir, dbDir, addr := t.TempDir(), t.TempDir(), freeAddr(t)
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
		{{Granted, 1<<ShardBits | shard}, {Granted, 2<<ShardBits | shard}, {GrantRejected, 0}},
		nil,
		{{Released, 2<<ShardBits | shard}, {Extended, 1<<ShardBits | shard}, {Granted, 3<<ShardBits | shard}},
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
	if last.index <= lastIndex || last.results[0] != (Result{Granted, 4<<ShardBits | shard}) {
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

	dirA, dbDirA, addrA := t.TempDir(), t.TempDir(), freeAddr(t)
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
	if got := calls[len(calls)-1].results[0]; got != (Result{Granted, 301<<ShardBits | shard}) {
		t.Fatalf("grant after import: %+v", got)
	}
}
