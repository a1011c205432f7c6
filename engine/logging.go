package engine

import (
	"context"
	"fmt"
	"log/slog"

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

// quietDragonboat keeps dragonboat's own logging to errors: the node logs
// what an operator needs (leader changes, start, stop) itself.
func quietDragonboat() {
	for _, pkg := range []string{"raft", "rsm", "transport", "dragonboat", "logdb", "grpc", "config", "settings", "tan", "raftpb", "fileutil", "registry", "utils", "vfs"} {
		logger.GetLogger(pkg).SetLevel(logger.ERROR)
	}
}
