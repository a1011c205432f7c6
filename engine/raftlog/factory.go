package raftlog

import (
	"errors"
	"path/filepath"

	"github.com/baton-dev/baton/engine/internal/savecall"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
)

// DirName is the subdirectory of the NodeHost's directory (and of its WAL
// directory, when it has one) that the store lives in. Dragonboat's default
// store uses logdb-N subdirectories, so both can sit in one NodeHost
// directory without touching each other's files (NodeHost itself refuses
// to switch stores on an existing directory, see TypeName).
const DirName = "baton-raftlog"

// Factory creates the store for a NodeHost; it implements
// config.LogDBFactory, to be set as NodeHostConfig.Expert.LogDBFactory. The
// zero value is ready to use.
type Factory struct {
	// OnSave is Options.OnSave of the store it creates.
	OnSave savecall.Observer

	// fs replaces the operating system's file system, for tests.
	fs vfs.FS
}

var _ config.LogDBFactory = (*Factory)(nil)

// Create opens the store in DirName under dirs[0], NodeHost's directory for
// the deployment. When wals[0] is set and is not dirs[0] (NodeHost passes
// the same directory twice when NodeHostConfig.WALDir is empty), pebble's
// WAL goes to DirName under wals[0]: that is the directory an operator puts
// on the low-latency device, and the WAL is the only file synced on the
// save path. Step workers are counted from cfg.Expert.Engine.ExecShards and
// cb receives the busy reports; the rest of cfg.Expert.LogDB (sizes for
// dragonboat's own store) does not apply and is ignored, as is
// cfg.Expert.FS (dragonboat's file system interface, not pebble's).
func (f *Factory) Create(cfg config.NodeHostConfig, cb config.LogDBCallback, dirs []string, wals []string) (raftio.ILogDB, error) {
	if len(dirs) == 0 || dirs[0] == "" {
		return nil, errors.New("raftlog: no directory for the log store")
	}
	fs := f.fs
	if fs == nil {
		fs = vfs.Default
	}
	opts := Options{
		Workers:  cfg.Expert.Engine.ExecShards,
		Callback: cb,
		OnSave:   f.OnSave,
		fs:       fs,
	}
	if len(wals) > 0 && wals[0] != "" && filepath.Clean(wals[0]) != filepath.Clean(dirs[0]) {
		opts.WALDir = fs.PathJoin(wals[0], DirName)
	}
	db, err := Open(fs.PathJoin(dirs[0], DirName), opts)
	if err != nil {
		return nil, err
	}
	return db, nil
}

// Name returns TypeName.
func (f *Factory) Name() string { return TypeName }
