package raftlog

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4/config"
)

// busyMonitor tells NodeHost (through its LogDBCallback) when pebble nears a
// write stall and when it is clear again, as dragonboat's own store does.
// Pebble's events only poke it: they run inside pebble, some with pebble's
// locks held, where reading metrics (or calling into NodeHost, which takes
// its own lock) could deadlock; the monitor's goroutine does that work.
type busyMonitor struct {
	cb      config.LogDBCallback
	poke    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	stalled atomic.Bool // between pebble's WriteStallBegin and WriteStallEnd
}

func newBusyMonitor(cb config.LogDBCallback) *busyMonitor {
	return &busyMonitor{
		cb:   cb,
		poke: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// events returns the pebble listener that pokes the monitor on every change
// that can move it between busy and not busy.
func (m *busyMonitor) events() pebble.EventListener {
	if m.cb == nil {
		return pebble.EventListener{}
	}
	return pebble.EventListener{
		FlushEnd:      func(pebble.FlushInfo) { m.notify() },
		CompactionEnd: func(pebble.CompactionInfo) { m.notify() },
		WALCreated:    func(pebble.WALCreateInfo) { m.notify() },
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			m.stalled.Store(true)
			m.notify()
		},
		WriteStallEnd: func() {
			m.stalled.Store(false)
			m.notify()
		},
	}
}

// notify never blocks: one pending poke is enough, since the monitor reads
// the state afresh when it wakes.
func (m *busyMonitor) notify() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// start runs the monitor over metrics (pebble's DB.Metrics). The callback is
// called only when the busy state changes (NodeHost starts out assuming not
// busy), which spares NodeHost a log line per flush.
func (m *busyMonitor) start(metrics func() *pebble.Metrics) {
	if m.cb == nil {
		close(m.done)
		return
	}
	go func() {
		defer close(m.done)
		busy := false
		for {
			select {
			case <-m.stop:
				return
			case <-m.poke:
			}
			now := m.busy(metrics())
			if now != busy {
				busy = now
				m.cb(config.LogDBInfo{Shard: 0, Busy: busy})
			}
		}
	}()
}

// busy applies dragonboat's rule: busy within 5% of the memtable limit or one
// sublevel short of level 0's stop threshold, and of course while stalled.
func (m *busyMonitor) busy(mt *pebble.Metrics) bool {
	const memLimit = memTableSize * memTableStopWrites * 19 / 20
	return m.stalled.Load() ||
		mt.MemTable.Size >= memLimit ||
		int(mt.Levels[0].Sublevels) >= l0StopWrites-1
}

// close stops the monitor and waits for it, so that it never reads metrics
// of a closed pebble.
func (m *busyMonitor) close() {
	close(m.stop)
	<-m.done
}
