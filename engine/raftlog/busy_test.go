package raftlog

import (
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

func TestBusyRule(t *testing.T) {
	tests := []struct {
		name      string
		mem       uint64
		sublevels int32
		stalled   bool
		want      bool
	}{
		{"idle", 0, 0, false, false},
		{"memtables filling", memTableSize * 3, 3, false, false},
		{"memtables almost full", memTableSize * memTableStopWrites * 19 / 20, 0, false, true},
		{"level 0 one short of its stop", 0, l0StopWrites - 1, false, true},
		{"level 0 two short", 0, l0StopWrites - 2, false, false},
		{"stalled", 0, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newBusyMonitor(func(config.LogDBInfo) {})
			m.stalled.Store(tt.stalled)
			var mt pebble.Metrics
			mt.MemTable.Size = tt.mem
			mt.Levels[0].Sublevels = tt.sublevels
			if got := m.busy(&mt); got != tt.want {
				t.Fatalf("busy = %v, want %v", got, tt.want)
			}
		})
	}
}

// The monitor reports changes of the busy state, not every event.
func TestBusyMonitorReportsChanges(t *testing.T) {
	reports := make(chan config.LogDBInfo, 10)
	m := newBusyMonitor(func(info config.LogDBInfo) { reports <- info })
	var mu sync.Mutex
	var mt pebble.Metrics
	set := func(sublevels int32) {
		mu.Lock()
		defer mu.Unlock()
		mt.Levels[0].Sublevels = sublevels
	}
	m.start(func() *pebble.Metrics {
		mu.Lock()
		defer mu.Unlock()
		c := mt
		return &c
	})
	defer m.close()
	next := func() config.LogDBInfo {
		t.Helper()
		select {
		case info := <-reports:
			return info
		case <-time.After(10 * time.Second):
			t.Fatal("no report")
			return config.LogDBInfo{}
		}
	}
	events := m.events()
	events.FlushEnd(pebble.FlushInfo{}) // not busy, as NodeHost assumes: no report
	set(l0StopWrites)
	events.CompactionEnd(pebble.CompactionInfo{})
	if info := next(); !info.Busy || info.Shard != 0 {
		t.Fatalf("report %+v, want busy", info)
	}
	events.WALCreated(pebble.WALCreateInfo{}) // still busy: no report
	set(0)
	events.FlushEnd(pebble.FlushInfo{})
	if info := next(); info.Busy {
		t.Fatalf("report %+v, want not busy (and no repeated busy report)", info)
	}
	events.WriteStallBegin(pebble.WriteStallBeginInfo{})
	if info := next(); !info.Busy {
		t.Fatalf("report %+v during a stall, want busy", info)
	}
	events.WriteStallEnd()
	if info := next(); info.Busy {
		t.Fatalf("report %+v after the stall, want not busy", info)
	}
}

// A store opened with a callback runs the monitor and stops it on Close.
func TestOpenWithCallback(t *testing.T) {
	db, err := Open(testDir, Options{fs: vfs.NewMem(), Callback: func(config.LogDBInfo) {}})
	if err != nil {
		t.Fatal(err)
	}
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1}, EntriesToSave: makeEntries(1, 1, 3)})
	if err := db.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
