package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/baton-dev/baton/engine"
	"github.com/baton-dev/baton/status"
	"github.com/baton-dev/baton/tools/harness"
)

// Tests of --http: /metrics parsed by Prometheus's own text parser, each
// series moved by the requests that should move it, /status beside it;
// /healthz and /status through the loss of a quorum and back.

// httpGet GETs path on a node's --http address and returns the status code
// and body; it fails t only if there is no HTTP answer at all, or one
// without the Content-Type of path.
func httpGet(t *testing.T, n *harness.Node, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + n.HTTPAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	want := map[string]string{"/metrics": "text/plain; version=0.0.4", "/status": "application/json", "/healthz": "text/plain", "/backup": "application/octet-stream"}[path]
	if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, want) {
		t.Fatalf("GET %s: Content-Type %q, want %q", path, got, want)
	}
	return resp.StatusCode, string(body)
}

// getStatus reads and decodes /status.
func getStatus(t *testing.T, n *harness.Node) status.Node {
	t.Helper()
	code, body := httpGet(t, n, "/status")
	var doc status.Node
	if err := json.Unmarshal([]byte(body), &doc); code != http.StatusOK || err != nil {
		t.Fatalf("/status: %d, %v\n%s", code, err, body)
	}
	return doc
}

// scrape reads /metrics with expfmt's parser, which fails t on anything
// Prometheus would reject, and returns every sample by series (seriesKey)
// and every family's type. A histogram gives its _count and _sum.
func scrape(t *testing.T, n *harness.Node) (map[string]float64, map[string]dto.MetricType) {
	t.Helper()
	code, body := httpGet(t, n, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %q", code, body)
	}
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	values, types := map[string]float64{}, map[string]dto.MetricType{}
	for name, f := range families {
		types[name] = f.GetType()
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				values[seriesKey(name, labels...)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				values[seriesKey(name, labels...)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				values[seriesKey(name+"_count", labels...)] = float64(m.GetHistogram().GetSampleCount())
				values[seriesKey(name+"_sum", labels...)] = m.GetHistogram().GetSampleSum()
			default:
				values[seriesKey(name, labels...)] = m.GetUntyped().GetValue()
			}
		}
	}
	return values, types
}

// seriesKey names one series: name{k1="v1",k2="v2"} with the labels (name,
// value pairs) in name order.
func seriesKey(name string, labels ...string) string {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+`="`+labels[i+1]+`"`)
	}
	if len(pairs) == 0 {
		return name
	}
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func answers(op, answer string) string {
	return seriesKey("baton_answers_total", "op", op, "answer", answer)
}

func errAnswers(op, code string) string {
	return seriesKey("baton_answers_total", "op", op, "answer", "ERR", "code", code)
}

func requests(op string) string { return seriesKey("baton_requests_total", "op", op) }

// metricsSession is what the steps of TestMetrics share.
type metricsSession struct {
	n                *harness.Node
	holder, other    *harness.Conn
	token, nextToken uint64
	extra            *harness.Conn
}

// TestMetrics makes requests one step at a time on a single node and checks
// that each step moves exactly the series it should, by exactly what it
// should. Series a step does not name may move too (the steps read keys
// back, leases run out in the background).
func TestMetrics(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 4, HTTP: true})
	s := &metricsSession{n: n, holder: harness.Dial(t, n.ClientAddr), other: harness.Dial(t, n.ClientAddr)}
	const key = "metrics/a"
	shardHeld := seriesKey("baton_shard_held_locks", "shard", fmt.Sprint(engine.ShardOf([]byte(key), 4)))
	shardWaiters := seriesKey("baton_shard_waiters", "shard", fmt.Sprint(engine.ShardOf([]byte(key), 4)))

	steps := []struct {
		name string
		run  func(t *testing.T, s *metricsSession)
		want map[string]float64 // series -> how much the step changes it
	}{
		{"acquire a free key", func(t *testing.T, s *metricsSession) {
			s.token = acquire(t, s.holder, key, 60000)
		}, map[string]float64{
			requests("A"): 1, answers("A", "OK"): 1, "baton_grants_total": 1, "baton_handoffs_total": 0,
			"baton_held_locks": 1, shardHeld: 1,
			"baton_acquire_grant_seconds_count": 1, "baton_acquire_answer_seconds_count": 1,
		}},
		{"try-lock of a held key", func(t *testing.T, s *metricsSession) {
			do(t, s.other, "A "+key+" 60000 -1", "A "+key+" TIMEOUT")
		}, map[string]float64{
			requests("A"): 1, answers("A", "TIMEOUT"): 1, "baton_wait_timeouts_total": 0, "baton_grants_total": 0,
			"baton_acquire_grant_seconds_count": 0, "baton_acquire_answer_seconds_count": 1,
		}},
		{"a wait runs out", func(t *testing.T, s *metricsSession) {
			s.other.Send("A " + key + " 60000 100")
			s.other.ExpectWithin(t, slow, "A "+key+" TIMEOUT")
		}, map[string]float64{
			requests("A"): 1, answers("A", "TIMEOUT"): 1, "baton_wait_timeouts_total": 1,
			"baton_waiters": 0, "baton_acquire_answer_seconds_count": 1,
		}},
		{"extend", func(t *testing.T, s *metricsSession) {
			do(t, s.holder, fmt.Sprintf("K %s %d 60000", key, s.token), "K "+key+" OK")
		}, map[string]float64{requests("K"): 1, answers("K", "OK"): 1, "baton_extends_total": 1, "baton_held_locks": 0}},
		{"extend with another token", func(t *testing.T, s *metricsSession) {
			do(t, s.holder, fmt.Sprintf("K %s %d 60000", key, s.token+1), "K "+key+" NOTHELD")
		}, map[string]float64{requests("K"): 1, answers("K", "NOTHELD"): 1, "baton_extends_total": 0}},
		{"queries", func(t *testing.T, s *metricsSession) {
			queryHeld(t, s.other, key, s.token)
			queryFree(t, s.other, "metrics/free")
		}, map[string]float64{requests("Q"): 2, answers("Q", "HELD"): 1, answers("Q", "FREE"): 1}},
		{"an acquire queues", func(t *testing.T, s *metricsSession) {
			s.other.Send("A " + key + " 60000 0")
		}, map[string]float64{requests("A"): 1, "baton_waiters": 1, shardWaiters: 1, "baton_acquire_answer_seconds_count": 0}},
		{"a release hands the lock to the waiter", func(t *testing.T, s *metricsSession) {
			do(t, s.holder, fmt.Sprintf("R %s %d", key, s.token), "R "+key+" OK")
			s.nextToken = readGrant(t, s.other, key, answerWithin)
		}, map[string]float64{
			requests("R"): 1, answers("R", "OK"): 1, answers("A", "OK"): 1,
			"baton_releases_total": 1, "baton_grants_total": 1, "baton_handoffs_total": 1,
			"baton_held_locks": 0, "baton_waiters": -1, shardWaiters: -1,
			"baton_acquire_grant_seconds_count": 1, "baton_acquire_answer_seconds_count": 1,
		}},
		{"release", func(t *testing.T, s *metricsSession) {
			do(t, s.other, fmt.Sprintf("R %s %d", key, s.nextToken), "R "+key+" OK")
		}, map[string]float64{answers("R", "OK"): 1, "baton_releases_total": 1, "baton_handoffs_total": 0, "baton_held_locks": -1, shardHeld: -1}},
		{"release of a free key", func(t *testing.T, s *metricsSession) {
			do(t, s.holder, "R metrics/free", "R metrics/free NOTHELD")
		}, map[string]float64{requests("R"): 1, answers("R", "NOTHELD"): 1, "baton_releases_total": 0}},
		{"a lease runs out", func(t *testing.T, s *metricsSession) {
			acquire(t, s.holder, "metrics/short", 100)
			eventually(t, s.holder, "metrics/short", "Q metrics/short FREE", slow)
		}, map[string]float64{"baton_grants_total": 1, "baton_expiries_total": 1, "baton_held_locks": 0}},
		{"an unreadable line", func(t *testing.T, s *metricsSession) {
			do(t, s.holder, "X", "? - ERR badrequest op must be A, R, K, Q, H, C, M, S, W or U")
		}, map[string]float64{"baton_bad_requests_total": 1, errAnswers("?", "badrequest"): 1}},
		{"an H to a node without a secret", func(t *testing.T, s *metricsSession) {
			do(t, s.holder, "H s3cret", "H - OK")
		}, map[string]float64{requests("H"): 1, answers("H", "OK"): 1}},
		{"a malformed acquire", func(t *testing.T, s *metricsSession) {
			do(t, s.holder, "A metrics/bad", "A metrics/bad ERR badrequest missing lease_ms")
		}, map[string]float64{"baton_bad_requests_total": 1, errAnswers("A", "badrequest"): 1, requests("A"): 0}},
		{"a connection opens", func(t *testing.T, s *metricsSession) {
			s.extra = harness.Dial(t, s.n.ClientAddr)
			queryFree(t, s.extra, "metrics/free")
		}, map[string]float64{"baton_connections_accepted_total": 1, "baton_connections_open": 1}},
		{"it closes", func(t *testing.T, s *metricsSession) {
			s.extra.Close()
		}, map[string]float64{"baton_connections_accepted_total": 0, "baton_connections_open": -1}},
	}
	for _, step := range steps {
		before, _ := scrape(t, n)
		step.run(t, s)
		// Some series move just after the answer is sent (an acquire's
		// latency), or in the background (a lease that runs out): wait
		// for the step's changes, then hold them to it.
		var wrong []string
		deadline := time.Now().Add(answerWithin)
		for {
			after, _ := scrape(t, n)
			wrong = wrong[:0]
			for series, delta := range step.want {
				if _, ok := after[series]; !ok {
					t.Fatalf("%s: /metrics has no series %s", step.name, series)
				}
				if got := after[series] - before[series]; got != delta {
					wrong = append(wrong, fmt.Sprintf("%s moved by %v, want %v", series, got, delta))
				}
			}
			if len(wrong) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(wrong) > 0 {
			slices.Sort(wrong)
			t.Errorf("%s:\n  %s", step.name, strings.Join(wrong, "\n  "))
		}
	}

	values, types := scrape(t, n)
	for family, want := range map[string]dto.MetricType{
		"baton_grants_total":                 dto.MetricType_COUNTER,
		"baton_held_locks":                   dto.MetricType_GAUGE,
		"baton_acquire_grant_seconds":        dto.MetricType_HISTOGRAM,
		"baton_acquire_answer_seconds":       dto.MetricType_HISTOGRAM,
		"baton_proposal_commands":            dto.MetricType_HISTOGRAM,
		"baton_raft_log_saves_total":         dto.MetricType_COUNTER,
		"baton_raft_log_synced_save_seconds": dto.MetricType_HISTOGRAM,
	} {
		if types[family] != want {
			t.Errorf("%s is a %v, want a %v", family, types[family], want)
		}
	}
	// One node leads every shard, proposes and has failed none; dragonboat's
	// own series are there.
	for _, c := range []struct {
		series string
		ok     func(v float64) bool
		want   string
	}{
		{seriesKey("baton_shard_is_leader", "shard", "1"), func(v float64) bool { return v == 1 }, "1"},
		{seriesKey("baton_shard_leader_id", "shard", "4"), func(v float64) bool { return v == 1 }, "1"},
		{seriesKey("baton_shard_term", "shard", "2"), func(v float64) bool { return v >= 1 }, "at least 1"},
		{seriesKey("baton_shard_applied_index", "shard", "3"), func(v float64) bool { return v >= 1 }, "at least 1"},
		{seriesKey("dragonboat_raftnode_has_leader", "shardid", "1", "replicaid", "1"), func(v float64) bool { return v == 1 }, "1"},
		{"baton_proposals_total", func(v float64) bool { return v >= 1 }, "at least 1"},
		{"baton_proposal_commands_count", func(v float64) bool { return v == values["baton_proposals_total"] }, "baton_proposals_total"},
		{"baton_failed_proposals_total", func(v float64) bool { return v == 0 }, "0"},
		// Every entry was saved with a sync, each timed; the node is quiet
		// now, so the two agree.
		{seriesKey("baton_raft_log_saves_total", "synced", "true"), func(v float64) bool { return v >= values["baton_proposals_total"] }, "at least baton_proposals_total"},
		{"baton_raft_log_synced_save_seconds_count", func(v float64) bool {
			return v == values[seriesKey("baton_raft_log_saves_total", "synced", "true")]
		}, `baton_raft_log_saves_total{synced="true"}`},
		{"baton_raft_log_synced_save_seconds_sum", func(v float64) bool { return v > 0 }, "above 0"},
	} {
		if v, found := values[c.series]; !found || !c.ok(v) {
			t.Errorf("%s = %v (present: %v), want %s", c.series, v, found, c.want)
		}
	}

	// /status says the same from the same counters. (The acquire leaves
	// the waiters just after its answer is sent.)
	acquire(t, s.holder, "metrics/kept", 60000)
	doc := getStatus(t, n)
	for deadline := time.Now().Add(answerWithin); doc.Waiters != 0 && time.Now().Before(deadline); doc = getStatus(t, n) {
		time.Sleep(20 * time.Millisecond)
	}
	var applied uint64
	for _, sh := range doc.Shards {
		if sh.LeaderID != 1 || sh.Role != status.RoleLeader || !sh.Serving || sh.Term == 0 {
			t.Errorf("/status: shard %+v, want led and served by node 1", sh)
		}
		applied += sh.AppliedIndex
	}
	if doc.ID != 1 || !doc.Healthy || doc.Held != 1 || doc.Waiters != 0 || len(doc.Shards) != 4 || applied == 0 ||
		len(doc.Peers) != 1 || !doc.Peers[0].Self || fmt.Sprint(doc.Peers[0].Leads) != "[1 2 3 4]" ||
		doc.ClientAddr != n.ClientAddr || doc.RaftAddr != n.RaftAddr || doc.Version == "" || doc.UptimeSeconds <= 0 {
		t.Errorf("/status: %+v", doc)
	}
}

// TestHealthzQuorum: /healthz is 200 on every node of a healthy cluster,
// 503 on the one left when the other two die (it can neither serve nor
// redirect), and 200 again once they are back. On the way, a follower's
// /status shows who leads and the locks it applied.
func TestHealthzQuorum(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2, HTTP: true})
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	for _, n := range nodes {
		waitHealthz(t, n, http.StatusOK, 10*time.Second)
	}
	acquire(t, harness.Dial(t, nodes[0].ClientAddr), "hq/held", 60000)
	deadline := time.Now().Add(answerWithin)
	for doc := getStatus(t, nodes[2]); doc.Held != 1; doc = getStatus(t, nodes[2]) {
		if time.Now().After(deadline) {
			t.Fatalf("node 3's /status shows %d held locks, want the 1 the leader granted", doc.Held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	doc := getStatus(t, nodes[2])
	if fmt.Sprint(doc.Peers[0].Leads, doc.Peers[2].Leads) != "[1 2] []" || !doc.Peers[2].Self ||
		doc.Shards[0].Role != status.RoleFollower || doc.Shards[1].LeaderID != 1 {
		t.Errorf("node 3's /status: %+v", doc)
	}

	nodes[0].Kill()
	nodes[1].Kill()
	body := waitHealthz(t, nodes[2], http.StatusServiceUnavailable, 15*time.Second)
	if !strings.Contains(body, "no leader known") {
		t.Errorf("/healthz without a quorum says %q, want the shards without a leader", body)
	}
	if doc := getStatus(t, nodes[2]); doc.Healthy || len(doc.Problems) == 0 {
		t.Errorf("/status without a quorum: healthy %v, problems %q", doc.Healthy, doc.Problems)
	}

	harness.RestartAll(t, nodes[0], nodes[1])
	for _, n := range nodes {
		waitHealthz(t, n, http.StatusOK, 15*time.Second)
	}
}

// waitHealthz polls /healthz until it answers code, and returns the body;
// it fails t if that does not happen within d.
func waitHealthz(t *testing.T, n *harness.Node, code int, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got, body := httpGet(t, n, "/healthz")
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d: /healthz answers %d %q after %v, want %d", n.ID, got, body, d, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
