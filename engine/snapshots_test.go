package engine

import (
	"testing"
	"time"
)

func TestSnapshotOverhead(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name                   string
		since                  logSince
		snapBytes, snapEntries uint64
		want                   uint64
	}{
		{"a quarter of the bytes at the mean entry size", logSince{bytes: 16 * mib, entries: 400}, 16 * mib, 100000, 100},
		{"small entries: capped at a fifth of snapshot entries", logSince{bytes: 16 * mib, entries: 1 << 20}, 16 * mib, 100000, 20000},
		{"entries bigger than the whole quarter: one kept", logSince{bytes: 64 * mib, entries: 4}, 16 * mib, 100000, 1},
		{"nothing counted: a fifth of snapshot entries", logSince{}, 16 * mib, 100000, 20000},
		{"tiny snapshot entries: at least one", logSince{}, 16 * mib, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := snapshotOverhead(tt.since, tt.snapBytes, tt.snapEntries); got != tt.want {
				t.Fatalf("snapshotOverhead(%+v, %d, %d) = %d, want %d", tt.since, tt.snapBytes, tt.snapEntries, got, tt.want)
			}
		})
	}
}

// The snapshotter is woken once the count reaches the limit, not before.
func TestCountLoggedKicksAtTheLimit(t *testing.T) {
	s := testShard(t)
	s.node.cfg.SnapshotBytes = 1000
	kicked := func() bool {
		select {
		case <-s.snapKick:
			return true
		default:
			return false
		}
	}
	s.countLogged(600)
	if kicked() {
		t.Fatal("kicked at 600 of 1000 bytes")
	}
	s.countLogged(400)
	if !kicked() {
		t.Fatal("not kicked at 1000 of 1000 bytes")
	}
	if s.logged != (logSince{bytes: 1000, entries: 2}) {
		t.Fatalf("counted %+v, want 1000 bytes in 2 entries", s.logged)
	}
}

// A shard whose entries are big takes a snapshot, and compacts its log, once
// they add up to SnapshotBytes, long before SnapshotEntries; with the byte
// bound out of reach it does not.
func TestSnapshotBySize(t *testing.T) {
	for _, tt := range []struct {
		name      string
		snapBytes uint64
		want      bool
	}{
		{"bound reached", 256 << 10, true},
		{"bound out of reach", 1 << 40, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := startTestNode(t, func(c *Config) {
				c.Shards = 1
				c.SnapshotEntries = 1_000_000
				c.SnapshotBytes = tt.snapBytes
			})
			lr, err := n.nh.GetLogReader(1)
			if err != nil {
				t.Fatal(err)
			}
			// Two entries of 10,000 Grants, over 256 KiB together.
			holdLocks(t, n, 20_000)
			compacted := func() bool {
				first, _ := lr.GetRange()
				return lr.Snapshot().Index > 0 && first > 1
			}
			if !tt.want {
				// The snapshotter has had the time it takes when it is due.
				time.Sleep(time.Second)
				if compacted() {
					t.Fatalf("a snapshot at index %d with the bound out of reach", lr.Snapshot().Index)
				}
				return
			}
			for deadline := time.Now().Add(10 * time.Second); !compacted(); {
				if time.Now().After(deadline) {
					first, last := lr.GetRange()
					t.Fatalf("no snapshot and compaction after 500 KiB of entries: snapshot index %d, log %d..%d", lr.Snapshot().Index, first, last)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
