package engine

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// Backups (GET /backup) and restores (Config.Restore): the file format is
// package backup's, the tables in it statemachine's.

// serveBackup streams a backup file of this node's applied tables, shard
// after shard (statemachine.WriteBackup). One backup at a time: another
// request meanwhile is answered 503, so that backups cannot pile up copies
// of the table. A failure before the first byte is a 503 with the reason;
// one after it breaks the response off, which the reader's checks catch.
func (n *Node) serveBackup(w http.ResponseWriter, _ *http.Request) {
	if !n.backupMu.TryLock() {
		http.Error(w, "a backup of this node is being taken already", http.StatusServiceUnavailable)
		return
	}
	defer n.backupMu.Unlock()
	start := time.Now()
	w.Header().Set("Content-Type", "application/octet-stream")
	info, err := sm.WriteBackup(w, len(n.shards), n.captureShard)
	if err != nil {
		if info.Bytes == 0 {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		n.log.Error("backup cut short", "err", err, "bytes", info.Bytes)
		panic(http.ErrAbortHandler)
	}
	n.log.Info("backup taken", "shards", info.Shards, "locks", info.Locks, "bytes", info.Bytes,
		"took", time.Since(start).Round(time.Millisecond).String())
}

// captureShard is this replica's table of shard id, for a backup.
func (n *Node) captureShard(id uint64) (*sm.ShardBackup, error) {
	v, err := n.nh.StaleRead(id, sm.BackupQuery{})
	if err != nil {
		return nil, err
	}
	b, ok := v.(*sm.ShardBackup)
	if !ok {
		return nil, fmt.Errorf("shard %d answered a backup query with %T", id, v)
	}
	return b, nil
}

// checkRestore reads and checks the backup file cfg.Restore whole, before
// the node touches its data dir, and settles cfg.Shards: 0 takes the
// backup's count, any other count than the backup's is refused.
func checkRestore(cfg *Config) error {
	info, err := readBackupFile(cfg.Restore, sm.CheckBackup)
	if err != nil {
		return err
	}
	switch {
	case cfg.Shards == 0:
		cfg.Shards = info.Shards
	case cfg.Shards != info.Shards:
		return fmt.Errorf("--restore %s is a backup of %d shards; refusing to start with --shards %d", cfg.Restore, info.Shards, cfg.Shards)
	}
	return nil
}

// restoreTable writes the tables of the backup file cfg.Restore into the
// lock table of the new data dir dir (statemachine.RestoreBackup).
func restoreTable(cfg *Config, dir string) error {
	db, err := sm.OpenDB(filepath.Join(dir, tableDir))
	if err != nil {
		return fmt.Errorf("open lock table: %w", err)
	}
	info, err := readBackupFile(cfg.Restore, func(r io.Reader) (sm.BackupInfo, error) { return sm.RestoreBackup(db, r) })
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close lock table: %w", cerr)
	}
	if err != nil {
		return err
	}
	cfg.Logger.Info("lock table restored", "from", cfg.Restore, "shards", info.Shards, "locks", info.Locks, "epoch", info.RestoreEpoch)
	return nil
}

// readBackupFile opens the backup file path and hands it to read.
func readBackupFile(path string, read func(io.Reader) (sm.BackupInfo, error)) (sm.BackupInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return sm.BackupInfo{}, fmt.Errorf("--restore: %w", err)
	}
	defer f.Close()
	info, err := read(f)
	if err != nil {
		return sm.BackupInfo{}, fmt.Errorf("--restore %s: %w", path, err)
	}
	return info, nil
}
