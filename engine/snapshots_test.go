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

// The snapshotter is woken once the count reaches either limit, bytes or
// entries, not before.
func TestCountLoggedKicksAtTheLimit(t *testing.T) {
	for _, tt := range []struct {
		name             string
		bytes, entries   uint64
		sizes            []int
		kickedAfterEvery []bool
	}{
		{"bytes", 1000, 100, []int{600, 400}, []bool{false, true}},
		{"entries", 1 << 30, 3, []int{1, 1, 1}, []bool{false, false, true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := testShard(t)
			s.node.cfg.SnapshotBytes, s.node.cfg.SnapshotEntries = tt.bytes, tt.entries
			for i, size := range tt.sizes {
				s.countLogged(size)
				kicked := false
				select {
				case <-s.snapKick:
					kicked = true
				default:
				}
				if kicked != tt.kickedAfterEvery[i] {
					t.Fatalf("after entry %d (%+v counted, bounds %d bytes, %d entries): kicked %v", i+1, s.logged, tt.bytes, tt.entries, kicked)
				}
			}
		})
	}
}

// A snapshot stream to a replica holds the log while it runs and, once
// received, for minSendHold or twice as long as it took; a failed one holds it
// no longer; a stream whose end never comes holds it for maxSendHold.
func TestSnapshotSendsHoldTheLog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		do   func(s *shard)
		at   time.Duration
		held bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"received quickly: held minSendHold after", []step{
			{func(s *shard) { s.sendStarted(4, at(0)) }, time.Second, true},
			{func(s *shard) { s.sendEnded(4, true, at(time.Second)) }, time.Second + minSendHold - 1, true},
			{nil, time.Second + minSendHold, false},
		}},
		{"received slowly: held twice as long again", []step{
			{func(s *shard) { s.sendStarted(4, at(0)) }, time.Minute, true},
			{func(s *shard) { s.sendEnded(4, true, at(time.Minute)) }, 3*time.Minute - 1, true},
			{nil, 3 * time.Minute, false},
		}},
		{"failed: not held", []step{
			{func(s *shard) { s.sendStarted(4, at(0)) }, time.Second, true},
			{func(s *shard) { s.sendEnded(4, false, at(2*time.Second)) }, 2 * time.Second, false},
		}},
		{"two streams: held until both are done", []step{
			{func(s *shard) { s.sendStarted(4, at(0)); s.sendStarted(5, at(0)) }, time.Second, true},
			{func(s *shard) { s.sendEnded(4, false, at(time.Second)) }, time.Second, true},
			{func(s *shard) { s.sendEnded(5, false, at(time.Second)) }, time.Second, false},
		}},
		{"an end never reported: held maxSendHold", []step{
			{func(s *shard) { s.sendStarted(4, at(0)) }, maxSendHold, true},
			{nil, maxSendHold + 1, false},
		}},
		{"an end without a start: not held", []step{
			{func(s *shard) { s.sendEnded(4, true, at(0)) }, time.Second, false},
		}},
		{"a learner catching up: held until it is ready, maxSendHold at most", []step{
			{func(s *shard) { s.node.members.Store(withLearner(false)); s.sendStarted(4, at(0)) }, time.Second, true},
			{func(s *shard) { s.sendEnded(4, true, at(time.Second)) }, time.Minute, true},
			{nil, time.Second + maxSendHold, false},
		}},
		{"a learner that said it caught up: no longer held", []step{
			{func(s *shard) { s.node.members.Store(withLearner(false)); s.sendStarted(4, at(0)) }, time.Second, true},
			{func(s *shard) { s.sendEnded(4, true, at(time.Second)) }, time.Minute, true},
			{func(s *shard) { s.node.members.Store(withLearner(true)) }, time.Minute, false},
		}},
		{"a learner catching up holds nothing without a stream", []step{
			{func(s *shard) { s.node.members.Store(withLearner(false)) }, time.Second, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testShard(t)
			for i, st := range tt.steps {
				if st.do != nil {
					st.do(s)
				}
				if got := s.holdsLog(at(st.at)); got != st.held {
					t.Fatalf("step %d: held at %v: %v, want %v", i, st.at, got, st.held)
				}
			}
		})
	}
}

// A shard that streams a snapshot to a replica puts off its own snapshot,
// and the compaction of its log, until the stream is over.
func TestSnapshotPutOffWhileStreaming(t *testing.T) {
	n := startTestNode(t, func(c *Config) {
		c.Shards = 1
		c.SnapshotEntries = 1_000_000
		c.SnapshotBytes = 256 << 10
	})
	lr, err := n.nh.GetLogReader(1)
	if err != nil {
		t.Fatal(err)
	}
	s := n.shards[0]
	s.sendStarted(2, time.Now())
	holdLocks(t, n, 20_000) // over 256 KiB of entries
	// The snapshotter has had the time it takes when it is due.
	time.Sleep(time.Second)
	if ss := lr.Snapshot().Index; ss > 0 {
		t.Fatalf("a snapshot at index %d while a stream held the log", ss)
	}
	s.sendEnded(2, false, time.Now())
	for deadline := time.Now().Add(10 * time.Second); lr.Snapshot().Index == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no snapshot within 10 s of the stream's end")
		}
		time.Sleep(10 * time.Millisecond)
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

// withLearner is a directory of voter 1 and learner 4, ready or not.
func withLearner(ready bool) *directory {
	d := &directory{Shards: 1, Members: []member{{ID: 1, Role: roleVoter}, {ID: 4, Role: roleLearner, Ready: ready}}}
	d.count()
	return d
}
