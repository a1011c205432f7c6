package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Data dir layout.
const (
	lockFile     = "LOCK"       // flock'ed while a batond uses the dir
	settingsFile = "baton.json" // the settings the cluster was created with
	raftDir      = "raft"       // dragonboat's NodeHost dir (log, snapshots)
	tableDir     = "table"      // the pebble lock table shared by all shards
)

// settings are fixed when a node's data dir is created; starting with other
// values would route keys to other shards or replicas to other members.
type settings struct {
	Version int      `json:"version"`
	Shards  int      `json:"shards"`
	ID      uint64   `json:"id"`
	Peers   []string `json:"peers"`
	// RaftLog is the Raft log store (RaftLogSeglog, RaftLogDragonboat,
	// or raftLogDropped in a data dir that batond refuses); a data dir
	// from before it was recorded has dragonboat's, and dragonboat refuses
	// to open a NodeHost dir with another store than it was made by.
	RaftLog string `json:"raft_log,omitempty"`
	// Join is the node's own RAFT_ADDR/CLIENT_ADDR when it joined a running
	// cluster (batond --join) rather than being one of its first --peers;
	// Peers is then empty, and Shards 0 until the node has learned the
	// cluster's from its directory (join.go).
	Join string `json:"join,omitempty"`
	// Voter records that a node that joined has been promoted: dragonboat
	// must be told at start whether a replica is a learner, and starting a
	// learner as a voter panics (lni/dragonboat#373).
	Voter bool `json:"voter,omitempty"`
}

// peekSettings reads the settings of the data dir at path, without locking
// it; ok is false for a data dir that has none (a new one).
func peekSettings(path string) (have settings, ok bool, err error) {
	raw, err := os.ReadFile(filepath.Join(path, settingsFile))
	if errors.Is(err, os.ErrNotExist) {
		return settings{}, false, nil
	}
	if err != nil {
		return settings{}, false, fmt.Errorf("data dir %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, &have); err != nil {
		return settings{}, false, fmt.Errorf("data dir %s: %s is damaged: %v", path, settingsFile, err)
	}
	if have.RaftLog == "" {
		have.RaftLog = RaftLogDragonboat
	}
	return have, true, nil
}

// dataDir is an opened, locked data directory.
type dataDir struct {
	path string
	lock *os.File
}

// openDataDir creates (if needed) and locks dir, and reconciles cfg with the
// settings stored there: a zero cfg.Shards takes the stored value; any
// explicit difference is an error that names the stored value.
func openDataDir(cfg *Config) (*dataDir, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	// A data dir just made must survive a power loss with the files that
	// will be written into it.
	if err := syncDir(filepath.Dir(filepath.Clean(cfg.DataDir))); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	f, err := os.OpenFile(filepath.Join(cfg.DataDir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another batond", cfg.DataDir)
		}
		return nil, fmt.Errorf("data dir %s: lock: %w", cfg.DataDir, err)
	}
	d := &dataDir{path: cfg.DataDir, lock: f}
	if err := d.reconcile(cfg); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *dataDir) reconcile(cfg *Config) error {
	want := settings{Version: 1, Shards: cfg.Shards, ID: cfg.ID, Peers: cfg.peerStrings(), RaftLog: cfg.RaftLog}
	if cfg.Join != nil {
		want.Peers, want.Join = nil, cfg.Join.String()
	}
	path := filepath.Join(d.path, settingsFile)
	have, ok, err := peekSettings(d.path)
	if err != nil {
		return err
	}
	if !ok {
		if want.Shards == 0 && cfg.Join == nil {
			want.Shards = DefaultShards
		}
		if want.RaftLog == "" {
			want.RaftLog = DefaultRaftLog
		}
		cfg.Shards, cfg.RaftLog = want.Shards, want.RaftLog
		// The settings come after the restored table, so that a data dir
		// with settings is never one half restored.
		if cfg.Restore != "" {
			if err := restoreTable(cfg, d.path); err != nil {
				return err
			}
		}
		return writeFileSync(path, want)
	}
	if cfg.Restore != "" {
		return fmt.Errorf("data dir %s has a cluster already (%s); --restore starts a new one, in an empty data dir", d.path, settingsFile)
	}
	// Refused before anything in the dir is touched: the data is whole for
	// an older batond to back up.
	if have.RaftLog == raftLogDropped {
		return fmt.Errorf("data dir %s was made with --raft-log %s, a Raft log store this batond no longer has; to keep its locks, start it with an older batond (with --http), take a backup (baton backup), and start a new cluster from that file with --restore in empty data dirs (docs/operations.md)", d.path, raftLogDropped)
	}
	switch {
	case want.RaftLog != "" && want.RaftLog != have.RaftLog:
		return fmt.Errorf("data dir %s was created with --raft-log %s; refusing to start with --raft-log %s", d.path, have.RaftLog, want.RaftLog)
	case want.Shards != 0 && have.Shards != 0 && want.Shards != have.Shards:
		return fmt.Errorf("data dir %s was created with --shards %d; refusing to start with --shards %d", d.path, have.Shards, want.Shards)
	}
	cfg.Shards, cfg.RaftLog = have.Shards, have.RaftLog
	return nil
}

// update changes the settings of a node that joined as it learns the
// cluster's shard count and is promoted.
func (d *dataDir) update(change func(*settings)) error {
	have, _, err := peekSettings(d.path)
	if err != nil {
		return err
	}
	change(&have)
	return writeFileSync(filepath.Join(d.path, settingsFile), have)
}

func (d *dataDir) close() {
	d.lock.Close() // closing the descriptor drops the flock
}

// writeFileSync writes v as JSON durably: a crash leaves the old file or the
// new one, never a torn one.
func writeFileSync(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename is in the directory, not the file: until the directory is
	// synced a power loss can undo it, while raft/, created next, survives;
	// a restart without --shards would then route keys to other shards.
	return syncDir(filepath.Dir(path))
}

// syncDir makes the entries of dir durable. A variable, so that a test can
// see that it is called once the new name is in place.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
