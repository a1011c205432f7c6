package seglog

import (
	"errors"
	"path/filepath"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
)

// DirName is the subdirectory of the NodeHost's directory (or of its WAL
// directory, when it has one) that the store lives in, apart from the
// other stores' directories (logdb-N for dragonboat's; baton-raftlog for
// baton's earlier pebble store, which batond no longer opens).
const DirName = "baton-seglog"

// Factory creates the store for a NodeHost; it implements
// config.LogDBFactory, to be set as NodeHostConfig.Expert.LogDBFactory. The
// zero value is ready to use.
type Factory struct {
	// OnSave is Options.OnSave of the store it creates.
	OnSave savecall.Observer

	// fs replaces the operating system's file system, for tests.
	fs vfs.FS
	// segmentSize, when not zero, replaces segmentSize, for tests.
	segmentSize int64
}

var _ config.LogDBFactory = (*Factory)(nil)

// Create opens the store in DirName under wals[0] when that is set and is
// not dirs[0] (NodeHost passes the same directory twice when
// NodeHostConfig.WALDir is empty), else under dirs[0]: the segments are
// the store's only files and are synced on the save path, so they go where
// the operator put the low-latency device. Step workers are counted from
// cfg.Expert.Engine.ExecShards. The store never reports itself busy, so cb
// is not called; the rest of cfg.Expert.LogDB (sizes for dragonboat's own
// store) does not apply, nor does cfg.Expert.FS (dragonboat's file system
// interface, not pebble's).
func (f *Factory) Create(cfg config.NodeHostConfig, cb config.LogDBCallback, dirs []string, wals []string) (raftio.ILogDB, error) {
	if len(dirs) == 0 || dirs[0] == "" {
		return nil, errors.New("seglog: no directory for the log store")
	}
	fs := f.fs
	if fs == nil {
		fs = vfs.Default
	}
	dir := dirs[0]
	if len(wals) > 0 && wals[0] != "" && filepath.Clean(wals[0]) != filepath.Clean(dirs[0]) {
		dir = wals[0]
	}
	db, err := Open(fs.PathJoin(dir, DirName), Options{
		Workers:     cfg.Expert.Engine.ExecShards,
		OnSave:      f.OnSave,
		fs:          fs,
		segmentSize: f.segmentSize,
	})
	if err != nil {
		return nil, err
	}
	return db, nil
}

// Name returns TypeName.
func (f *Factory) Name() string { return TypeName }
