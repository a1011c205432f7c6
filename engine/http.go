package engine

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// HTTPHandler serves /metrics (Prometheus text: the node's series, then
// dragonboat's and the process's), /healthz (200 when a leader is known for
// every shard, else 503 with the reasons), /status (JSON, package status)
// and Go's profiler and execution tracer under /debug/pprof/. None of them walks the lock table.
// GET /backup streams a backup of the lock table (serveBackup), which does.
func (n *Node) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		n.metrics.set.WritePrometheus(w)
		// The default set holds dragonboat's series (EnableMetrics).
		metrics.WritePrometheus(w, true)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if problems := n.problems(); len(problems) > 0 {
			http.Error(w, strings.Join(problems, "\n"), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /backup", n.serveBackup)
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n.status())
	})
	return mux
}
