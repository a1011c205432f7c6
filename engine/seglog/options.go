package seglog

import (
	"github.com/cockroachdb/pebble/vfs"

	"github.com/baton-dev/baton/engine/internal/savecall"
)

// Options configures Open. The zero value is a store for dragonboat's
// default number of step workers.
type Options struct {
	// Workers is how many dragonboat step workers call SaveRaftState
	// (NodeHostConfig.Expert.Engine.ExecShards): each gets its own
	// buffer, so saves neither allocate one nor contend for it. Zero
	// means dragonboat's default of 16. A worker id beyond it still
	// works, through a shared pool.
	Workers uint64
	// OnSave, when not nil, is told of every SaveRaftState call that wrote
	// something: synced or not, and how long it took.
	OnSave savecall.Observer

	// fs replaces the operating system's file system; tests use pebble's
	// strict in-memory one to drop unsynced writes as a power loss would.
	fs vfs.FS
	// segmentSize, when not zero, replaces segmentSize: tests rotate,
	// retire and recycle segments with small ones.
	segmentSize int64
}
