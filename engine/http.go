package engine

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strings"
)

// HTTPHandler serves /metrics (Prometheus text, every family with its help
// text: the node's series, then dragonboat's, the Go runtime's and the
// process's; metrics.go), /healthz (200 when a leader is known for
// every shard, else 503 with the reasons), /status (JSON, package status)
// and Go's profiler and execution tracer under /debug/pprof/. None of them walks the lock table.
// GET /backup streams a backup of the lock table (serveBackup), which does.
//
// With a secret (Config.AuthSecret), /status, /backup and /debug/pprof/
// answer only a request that carries it (adminOnly): they show every key
// and owner, the topology, or cost CPU. /healthz and /metrics stay open,
// for load balancers and scrapers that hold no secret.
func (n *Node) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", n.adminOnly(pprof.Index))
	mux.HandleFunc("/debug/pprof/profile", n.adminOnly(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", n.adminOnly(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", n.adminOnly(pprof.Trace))
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { n.metrics.handler.ServeHTTP(w, r) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if problems := n.problems(); len(problems) > 0 {
			http.Error(w, strings.Join(problems, "\n"), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /backup", n.adminOnly(n.serveBackup))
	mux.HandleFunc("/status", n.adminOnly(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n.status())
	}))
	return mux
}

// adminOnly lets a request through to h only if it carries the node's
// secret as "Authorization: Bearer <secret>", when the node has one; any
// other is answered 401, and counted with the client port's refusals in
// the log (at most a line every 10 s).
func (n *Node) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n.secretHash == nil {
			h(w, r)
			return
		}
		secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok && n.rightSecret([]byte(secret)) {
			h(w, r)
			return
		}
		if n.refusals.allow() {
			n.log.Warn("refused an HTTP request without the right secret", "remote", r.RemoteAddr, "path", r.URL.Path,
				"refused_since_last_line", n.refusals.take())
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
		http.Error(w, "this node needs its secret: Authorization: Bearer <the secret of batond's --auth-file>", http.StatusUnauthorized)
	}
}
