package raftlog

import (
	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
)

// Options configures Open. The zero value is a store with its WAL beside its
// tables and no busy callback.
type Options struct {
	// WALDir, when not empty and not the store's own directory, is where
	// pebble keeps its write-ahead log: the one file every SaveRaftState
	// writes and syncs, so a low-latency device pays off there. Empty keeps
	// the WAL in the store's directory.
	WALDir string
	// Workers is how many dragonboat step workers call SaveRaftState
	// (NodeHostConfig.Expert.Engine.ExecShards): each gets its own batch
	// and buffers, so saves never allocate them nor contend for them.
	// Zero means dragonboat's default of 16. A worker id beyond it still
	// works, through a shared pool.
	Workers uint64
	// Callback, when not nil, is told when the store turns busy (pebble
	// nears a write stall: memtables almost all full, or level 0 almost
	// at its stop threshold) or stops being busy, so that NodeHost can
	// reject proposals instead of letting them pile up behind a stall.
	// It is what dragonboat's own store reports; Shard is always 0, as
	// there is one pebble instance.
	Callback config.LogDBCallback
	// OnSave, when not nil, is told of every SaveRaftState call that wrote
	// something: synced or not, and how long it took.
	OnSave savecall.Observer

	// fs replaces the operating system's file system; tests use pebble's
	// strict in-memory one to drop unsynced writes as a power loss would.
	fs vfs.FS
	// walPrefill, when not zero, replaces walPrefillSize: tests that open
	// many stores in memory keep their WAL files small.
	walPrefill int
}

const (
	// memTableSize is small on purpose: Raft entries live in the log only
	// until the next snapshot, so most are deleted soon after they are
	// written, and a small memtable pins little memory (outside the Go
	// heap) on a node whose state machine has its own pebble too.
	memTableSize = 4 << 20
	// memTableStopWrites is how many memtables may queue for flushing
	// before writes stall. It also bounds how many old WAL files pebble
	// keeps for recycling (one more than this).
	memTableStopWrites = 4
	// l0StopWrites is level 0's stall threshold; busy is reported one
	// sublevel before it.
	l0StopWrites = 16
)

// pebbleOptions returns the options the store opens pebble with, modelled on
// baton's state machine store (statemachine.OpenDB) and sized for a Raft
// log: a small write-mostly working set that is read only when a replica
// starts or a follower catches up.
//
// Nothing here may disable WAL recycling, which pebble does by default
// (Options.Cleaner left nil means pebble.DeleteCleaner; an archiving
// cleaner would turn recycling off). A recycled WAL file already has its
// blocks allocated and its size recorded, so the fdatasync that commits a
// synced write flushes data only, not file-size metadata too. A new WAL
// file gets the same from prefillFS, which Open wraps around fs.
func pebbleOptions(fs vfs.FS, walDir string, events pebble.EventListener) *pebble.Options {
	opts := &pebble.Options{
		FS:                          fs,
		WALDir:                      walDir,
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: memTableStopWrites,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       l0StopWrites,
		LBaseMaxBytes:               64 << 20,
		MaxOpenFiles:                1024,
		// The node also runs Raft, its state machine's pebble and the
		// network loops on few cores; one compaction at a time keeps
		// this store from taking all of them.
		MaxConcurrentCompactions: func() int { return 1 },
		FormatMajorVersion:       pebble.FormatNewest,
		EventListener:            events,
	}
	opts.Levels = make([]pebble.LevelOptions, 7)
	for i := range opts.Levels {
		l := &opts.Levels[i]
		l.BlockSize = 16 << 10
		l.TargetFileSize = 8 << 20 << i
		// Entries are written once and read rarely; snappy is cheap and
		// cuts the bytes that flushes and compactions move.
		l.Compression = pebble.SnappyCompression
	}
	return opts
}
