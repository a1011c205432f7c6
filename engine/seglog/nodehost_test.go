package seglog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/engine/internal/logdbtest"
)

// nodeHostSegmentSize is the segment size of the stores NodeHosts run on in
// tests.
const nodeHostSegmentSize = 256 << 10

// Real dragonboat NodeHosts on this store (engine/internal/logdbtest):
// restarts with the whole log and with snapshots and compactions, three
// replicas skipping commit-only syncs, a snapshot import.
func TestNodeHost(t *testing.T) {
	logdbtest.RunNodeHost(t, storeHarness)
}

// nodeHostFiles checks that the segments went to the WAL directory
// NodeHost was given, and nothing to its own directory.
func nodeHostFiles(t *testing.T, dirs, wals []string) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(wals[0], DirName, "*"+segmentSuffix))
	if len(segs) == 0 {
		t.Fatalf("no segment in %s", filepath.Join(wals[0], DirName))
	}
	for _, s := range segs {
		info, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() < nodeHostSegmentSize {
			t.Fatalf("%s is %d bytes", s, info.Size())
		}
	}
	if _, err := os.Stat(filepath.Join(dirs[0], DirName)); err == nil {
		t.Fatalf("a store directory in the NodeHost directory too")
	}
}
