package engine

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/VictoriaMetrics/metrics"
)

// nodeMetrics are the node's Prometheus counters. They live in a Set of the
// node's own so that several nodes in one process (tests) do not collide.
type nodeMetrics struct {
	set       *metrics.Set
	requests  [4]*metrics.Counter // by op: A R K Q
	badReqs   *metrics.Counter
	proposals *metrics.Counter
	commands  *metrics.Counter
	failed    *metrics.Counter
}

func newNodeMetrics(n *Node) *nodeMetrics {
	set := metrics.NewSet()
	m := &nodeMetrics{
		set:       set,
		badReqs:   set.NewCounter(`baton_bad_requests_total`),
		proposals: set.NewCounter(`baton_proposals_total`),
		commands:  set.NewCounter(`baton_proposed_commands_total`),
		failed:    set.NewCounter(`baton_failed_proposals_total`),
	}
	for i, op := range []string{"A", "R", "K", "Q"} {
		m.requests[i] = set.NewCounter(`baton_requests_total{op="` + op + `"}`)
	}
	set.NewGauge(`baton_held_locks`, func() float64 { return float64(n.status().held()) })
	set.NewGauge(`baton_waiters`, func() float64 { return float64(n.status().waiters()) })
	set.NewGauge(`baton_shards_served`, func() float64 { return float64(n.status().served()) })
	return m
}

// countRequest counts a parsed request by its op.
func (m *nodeMetrics) countRequest(op byte) {
	switch op {
	case 'A':
		m.requests[0].Inc()
	case 'R':
		m.requests[1].Inc()
	case 'K':
		m.requests[2].Inc()
	case 'Q':
		m.requests[3].Inc()
	}
}

// ShardStatus is one shard as /status shows it.
type ShardStatus struct {
	ID       uint64 `json:"id"`
	LeaderID uint64 `json:"leader_id"`
	Serving  bool   `json:"serving"`
	Held     int    `json:"held"`
	Waiters  int    `json:"waiters"`
	Inflight int    `json:"inflight_proposals"`
}

// Status is the node as /status shows it.
type Status struct {
	ID         uint64        `json:"id"`
	ClientAddr string        `json:"client_addr"`
	RaftAddr   string        `json:"raft_addr"`
	Shards     []ShardStatus `json:"shards"`
}

func (st Status) held() (n int) {
	for _, s := range st.Shards {
		n += s.Held
	}
	return n
}

func (st Status) waiters() (n int) {
	for _, s := range st.Shards {
		n += s.Waiters
	}
	return n
}

func (st Status) served() (n int) {
	for _, s := range st.Shards {
		if s.Serving {
			n++
		}
	}
	return n
}

// status takes a snapshot of every shard. It walks the key maps, so it is
// for operators and scrapes, not for the request path.
func (n *Node) status() Status {
	me := n.cfg.Peers[n.cfg.ID-1]
	st := Status{ID: n.cfg.ID, ClientAddr: me.ClientAddr, RaftAddr: me.RaftAddr}
	for _, s := range n.shards {
		s.mu.Lock()
		ss := ShardStatus{ID: s.id, LeaderID: s.leaderID, Serving: s.serving, Inflight: len(s.inflight)}
		for _, ks := range s.keys {
			if ks.token != 0 {
				ss.Held++
			}
			for w := ks.head; w != nil; w = w.next {
				ss.Waiters++
			}
		}
		s.mu.Unlock()
		st.Shards = append(st.Shards, ss)
	}
	return st
}

// HTTPHandler serves /metrics (Prometheus text), /healthz (200 when every
// shard has a leader, else 503), /status (JSON) and Go's profiler under
// /debug/pprof/.
func (n *Node) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		n.metrics.set.WritePrometheus(w)
		metrics.WriteProcessMetrics(w)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		for _, s := range n.status().Shards {
			if s.LeaderID == 0 {
				http.Error(w, "shard without a leader", http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n.status())
	})
	return mux
}
