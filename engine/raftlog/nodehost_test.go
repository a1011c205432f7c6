package raftlog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/engine/internal/logdbtest"
)

// Real dragonboat NodeHosts on this store (engine/internal/logdbtest):
// restarts with the whole log and with snapshots and compactions, three
// replicas skipping commit-only syncs, a snapshot import.
func TestNodeHost(t *testing.T) {
	logdbtest.RunNodeHost(t, storeHarness)
}

// nodeHostFiles checks that pebble's WAL went to the WAL directory
// NodeHost was given.
func nodeHostFiles(t *testing.T, dirs, wals []string) {
	t.Helper()
	wal := filepath.Join(wals[0], DirName)
	if _, err := os.Stat(wal); err != nil {
		t.Fatalf("WAL directory: %v", err)
	}
	if logs, _ := filepath.Glob(filepath.Join(wal, "*.log")); len(logs) == 0 {
		t.Fatalf("no WAL file in %s", wal)
	}
}
