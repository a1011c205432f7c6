package raftlog

import (
	"testing"

	"github.com/baton-dev/baton/engine/internal/logdbtest"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/raftio"
)

func TestNameAndFormat(t *testing.T) {
	db := openStore(t, vfs.NewMem())
	if db.Name() != TypeName || (&Factory{}).Name() != TypeName {
		t.Fatalf("names %q, %q", db.Name(), (&Factory{}).Name())
	}
	if db.BinaryFormat() != raftio.PlainLogDBBinVersion {
		t.Fatalf("BinaryFormat = %d", db.BinaryFormat())
	}
}

// The behaviour every baton Raft log store shares (engine/internal/logdbtest):
// each ILogDB method, the sync policy under power loss, concurrency.
func TestLogDB(t *testing.T) {
	logdbtest.Run(t, storeHarness)
}
