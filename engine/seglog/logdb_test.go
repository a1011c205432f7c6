package seglog

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

// The same with segments so small that most saves start a new one and many
// records are larger than a segment: rotation, retirement and recycling
// under every test, power losses included.
func TestLogDBTinySegments(t *testing.T) {
	h := harnessFor(1 << 10)
	h.SkipAllocations = true
	logdbtest.Run(t, h)
}
