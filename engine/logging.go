package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/lni/dragonboat/v4/logger"
)

// gnetLogger sends gnet's logging through the node's slog logger. gnet's
// INFO lines are start-up banners, so they are demoted to debug.
type gnetLogger struct{ log *slog.Logger }

func (g gnetLogger) logf(level slog.Level, format string, args []any) {
	if g.log.Enabled(context.Background(), level) {
		g.log.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "gnet")
	}
}

func (g gnetLogger) Debugf(format string, args ...any) { g.logf(slog.LevelDebug, format, args) }
func (g gnetLogger) Infof(format string, args ...any)  { g.logf(slog.LevelDebug, format, args) }
func (g gnetLogger) Warnf(format string, args ...any)  { g.logf(slog.LevelWarn, format, args) }
func (g gnetLogger) Errorf(format string, args ...any) { g.logf(slog.LevelError, format, args) }
func (g gnetLogger) Fatalf(format string, args ...any) { g.logf(slog.LevelError, format, args) }

// quietDragonboat sends dragonboat's logging through log and keeps it to
// errors: the node logs what an operator needs (leader changes, start,
// stop) itself.
func quietDragonboat(log *slog.Logger) {
	dragonboatSink.Store(log)
	dragonboatOnce.Do(func() {
		logger.SetLoggerFactory(func(pkg string) logger.ILogger { return &dragonboatLogger{pkg: pkg} })
	})
	for _, pkg := range []string{"raft", "rsm", "transport", "dragonboat", "logdb", "grpc", "config", "settings", "tan", "raftpb", "fileutil", "registry", "utils", "vfs"} {
		logger.GetLogger(pkg).SetLevel(logger.ERROR)
	}
}

// dragonboat's loggers are the process's, set up once (SetLoggerFactory
// panics when called again): they write to the logger of the node that
// started last, which is the only one outside tests.
var (
	dragonboatOnce sync.Once
	dragonboatSink atomic.Pointer[slog.Logger]
)

// dragonboatLogger is one dragonboat package's logger, on slog.
type dragonboatLogger struct {
	pkg   string
	level atomic.Int32 // a logger.LogLevel: lines above it are dropped
}

func (d *dragonboatLogger) logf(level logger.LogLevel, to slog.Level, format string, args []any) {
	log := dragonboatSink.Load()
	if logger.LogLevel(d.level.Load()) < level || log == nil || !log.Enabled(context.Background(), to) {
		return
	}
	log.Log(context.Background(), to, fmt.Sprintf(format, args...), "component", "dragonboat", "pkg", d.pkg)
}

func (d *dragonboatLogger) SetLevel(l logger.LogLevel) { d.level.Store(int32(l)) }
func (d *dragonboatLogger) Debugf(format string, args ...any) {
	d.logf(logger.DEBUG, slog.LevelDebug, format, args)
}
func (d *dragonboatLogger) Infof(format string, args ...any) {
	d.logf(logger.INFO, slog.LevelInfo, format, args)
}
func (d *dragonboatLogger) Warningf(format string, args ...any) {
	d.logf(logger.WARNING, slog.LevelWarn, format, args)
}
func (d *dragonboatLogger) Errorf(format string, args ...any) {
	d.logf(logger.ERROR, slog.LevelError, format, args)
}

// Panicf logs and panics, as dragonboat expects.
func (d *dragonboatLogger) Panicf(format string, args ...any) {
	d.logf(logger.CRITICAL, slog.LevelError, format, args)
	panic(fmt.Sprintf(format, args...))
}
