package engine

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dbsm "github.com/lni/dragonboat/v4/statemachine"

	sm "github.com/baton-dev/baton/statemachine"
)

// writeTestBackup writes a backup file of shards tables, shard id holding
// the lock "k<id>", and returns its path.
func writeTestBackup(t *testing.T, shards int) string {
	t.Helper()
	db, err := sm.OpenDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	create := sm.Factory(db, nil)
	replicas := make([]dbsm.IOnDiskStateMachine, shards)
	for i := range replicas {
		s := create(uint64(i+1), 1)
		if _, err := s.Open(nil); err != nil {
			t.Fatal(err)
		}
		var b sm.Batch
		b.Append(sm.Command{Op: sm.OpGrant, Key: fmt.Appendf(nil, "k%d", i+1), LeaseMs: 60000})
		if _, err := s.Update([]dbsm.Entry{{Index: 1, Cmd: b.Seal(sm.Header{Proposer: 1, Seq: 1})}}); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		replicas[i] = s
	}
	path := filepath.Join(t.TempDir(), "backup")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := sm.WriteBackup(f, shards, func(id uint64) (*sm.ShardBackup, error) {
		v, err := replicas[id-1].Lookup(sm.BackupQuery{})
		if err != nil {
			return nil, err
		}
		return v.(*sm.ShardBackup), nil
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

// tableHolds reports whether the lock table of data dir dir holds key on
// shard.
func tableHolds(t *testing.T, dir string, shard uint64, key string) bool {
	t.Helper()
	db, err := sm.OpenDB(filepath.Join(dir, tableDir))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := sm.Factory(db, nil)(shard, 1)
	if _, err := s.Open(nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := s.Lookup(sm.LookupKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return v.(sm.LookupResult).Held
}

// TestRestoreDataDir: --restore settles the shard count from the backup,
// writes the table into a new data dir before its settings, and refuses a
// data dir that has settings; a restore that fails writes no settings, so
// that it can be tried again.
func TestRestoreDataDir(t *testing.T) {
	file := writeTestBackup(t, 2)
	peers := []Peer{{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}}
	config := func(dir, restore string, shards int) Config {
		return Config{ID: 1, Peers: peers, DataDir: dir, Restore: restore, Shards: shards, Logger: slog.New(slog.DiscardHandler)}
	}

	cfg := config("", file, 3)
	if err := checkRestore(&cfg); err == nil || !strings.Contains(err.Error(), "backup of 2 shards; refusing to start with --shards 3") {
		t.Fatalf("--shards 3 with a backup of 2: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	cfg = config(dir, file, 0)
	if err := checkRestore(&cfg); err != nil || cfg.Shards != 2 {
		t.Fatalf("--shards 0: %v, shards %d", err, cfg.Shards)
	}
	d, err := openDataDir(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.close()
	if !tableHolds(t, dir, 1, "k1") || !tableHolds(t, dir, 2, "k2") {
		t.Fatal("the restored table does not hold the backup's locks")
	}
	if settings, err := os.ReadFile(filepath.Join(dir, settingsFile)); err != nil || !strings.Contains(string(settings), `"shards": 2`) {
		t.Fatalf("settings %s, %v", settings, err)
	}
	cfg = config(dir, file, 2)
	if _, err := openDataDir(&cfg); err == nil || !strings.Contains(err.Error(), "has a cluster already") {
		t.Fatalf("restore into a data dir with a cluster: %v", err)
	}

	// The file goes bad between the check and the restore.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, data[:len(data)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "data")
	cfg = config(dir, bad, 2)
	if _, err := openDataDir(&cfg); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("restore of a cut file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, settingsFile)); !os.IsNotExist(err) {
		t.Fatalf("a failed restore wrote settings (%v)", err)
	}
	cfg = config(dir, file, 2)
	d, err = openDataDir(&cfg)
	if err != nil {
		t.Fatalf("restore again after a failed one: %v", err)
	}
	d.close()
	if !tableHolds(t, dir, 2, "k2") {
		t.Fatal("the second restore did not write the table")
	}
}
