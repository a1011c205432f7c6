package engine

import (
	"bytes"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// The node's Prometheus series (docs/protocol.md lists them). They are kept
// up to date as things happen, each by the code that does what it counts,
// so that a scrape costs the same with no lock held or a million: counting
// is an atomic add (counter, histogram.go), never a lock, an allocation or
// a lookup by name, and a scrape reads atomics, never a shard's keys or its
// lock.
//
// The series are written by prometheus/client_golang, which gives every
// family its # HELP and # TYPE (VictoriaMetrics/metrics, which wrote them
// before, writes an empty # HELP in every version, and runtime families
// that break Prometheus's naming rules). The counting stays baton's own
// atomics: client_golang only reads them at a scrape (metricSet.Collect).

// nodeMetrics are the node's series, in a registry of the node's own so
// that several nodes in one process (tests) do not collide.
type nodeMetrics struct {
	set *metricSet
	// reg is what /metrics serves (handler): set, dragonboat's series
	// (dragonboatCollector) and the Go runtime's and the process's.
	reg     *prometheus.Registry
	handler http.Handler

	requests    [numOps]*counter // parsed requests, by op
	badRequests *counter         // lines that did not parse
	// answers by op and status, errs by op and ERR code; nil where the
	// protocol has no such answer. The last op index is '?', an unreadable
	// line.
	answers [numOps + 1][numStatuses]*counter
	errs    [numOps + 1][len(errCodes) + 1]*counter

	// An acquire's time from its receipt to the commit of the grant that
	// answers it OK, and to its answer, whatever the answer (nanoseconds).
	grantSeconds  *histogram
	answerSeconds *histogram

	// Changes of the table, as applied on this replica (every replica
	// counts them).
	grants, releases, extends, expiries *counter
	// handOffs: a release or expiry applied with the grant of the same key
	// to the next waiter right behind it, in the same entry.
	handOffs *counter
	// Decided by this node as a shard's leader.
	waitTimeouts      *counter // waits that ran out (TIMEOUT)
	abandonedReleased *counter // grants released because nobody waited for them any more

	connsOpen     atomic.Int64
	connsAccepted *counter

	proposals        *counter
	proposalCommands *histogram
	failedProposals  *counter

	// The Raft log store's saves (engine/seglog; dragonboat's does not
	// tell): how many, by whether they were synced, and how long the synced
	// ones took (nanoseconds), which is the disk's flush time as a commit
	// waits for it.
	raftLogSaves       [2]*counter // [0]: not synced, [1]: synced
	raftLogSyncSeconds *histogram

	// The families of the series registerGauges adds, one series per
	// shard; made here so that every help text is in one place.
	shardIsLeader, shardLeaderID, shardTerm, shardApplied, shardHeld, shardWaiters, shardClusterVersion *prometheus.Desc
	held, waiters                                                                                       *prometheus.Desc
}

// counter is a count that only goes up, kept as one atomic: Inc is what
// the request path pays.
type counter struct{ n atomic.Uint64 }

// Inc adds one.
func (c *counter) Inc() { c.n.Add(1) }

// Get is the count so far.
func (c *counter) Get() uint64 { return c.n.Load() }

// metricSet is the node's own series as a prometheus.Collector: each
// family's Desc (its name, help text and label names) is made once, and a
// scrape reads each series' atomic through its value func.
//
// It is an unchecked collector (Describe sends nothing): baton_answers_total
// has series with a code label (ERR answers) and without (the others), one
// family that client_golang's registration check, which wants one set of
// label names per name, would refuse; Prometheus and promtool take it, and
// the registry still checks at every scrape that a family has one help
// text and one type and no series twice.
type metricSet struct {
	mu     sync.Mutex // guards series and hists: registerGauges adds series after the first scrape may have come
	series []seriesOf
	hists  []*histogram
}

// seriesOf is one series: its family, its label values in the order of the
// family's label names, and how to read it.
type seriesOf struct {
	desc        *prometheus.Desc
	kind        prometheus.ValueType
	labelValues []string
	value       func() float64
}

// Describe sends nothing: metricSet is unchecked (see the type).
func (s *metricSet) Describe(chan<- *prometheus.Desc) {}

// Collect sends every series with its value now.
func (s *metricSet) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	series, hists := s.series, s.hists
	s.mu.Unlock()
	for _, x := range series {
		ch <- prometheus.MustNewConstMetric(x.desc, x.kind, x.value(), x.labelValues...)
	}
	for _, h := range hists {
		h.Collect(ch)
	}
}

// add adds one series of family d.
func (s *metricSet) add(d *prometheus.Desc, kind prometheus.ValueType, value func() float64, labelValues ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.series = append(s.series, seriesOf{desc: d, kind: kind, labelValues: labelValues, value: value})
}

// counter adds a counter series of family d and returns it.
func (s *metricSet) counter(d *prometheus.Desc, labelValues ...string) *counter {
	c := new(counter)
	s.add(d, prometheus.CounterValue, func() float64 { return float64(c.Get()) }, labelValues...)
	return c
}

// histogram adds histogram h.
func (s *metricSet) histogram(h *histogram) *histogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hists = append(s.hists, h)
	return h
}

// desc is a family: its name, what it counts, and its label names.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// shardStats is what the series and /status show of one shard, kept as
// things happen. Every field is an atomic: a scrape takes no lock.
type shardStats struct {
	leaderID atomic.Uint64 // as Raft last reported it; 0 while none is known
	term     atomic.Uint64 // of the last leader change
	applied  atomic.Uint64 // Raft index of the last entry applied
	held     atomic.Int64  // grants of the applied table (Table.Len: a shared key counts each of its holders)
	waiters  atomic.Int64  // acquires listed on this node's connections, unanswered
	// clusterVersion is the applied table's cluster version
	// (statemachine.Table.ClusterVersion).
	clusterVersion atomic.Uint64
}

// Ops in series labels; opIndex maps an op letter to its place.
const numOps = codec.NumOps

var opLabels = [numOps + 1]string{"A", "R", "K", "Q", "H", "C", "M", "S", "W", "U", "?"}

// opIndex is codec.OpIndex, with numOps ("?") for anything else.
func opIndex(op byte) int {
	if i := codec.OpIndex(op); i >= 0 {
		return i
	}
	return numOps
}

// numStatuses bounds codec.Status values (StatusOK..StatusShared).
const numStatuses = int(codec.StatusShared) + 1

// answerStatuses are the answers other than ERR the protocol has for each
// op (MOVED for every op but H, C and U); W's count its every line.
var answerStatuses = [numOps][]codec.Status{
	{codec.StatusOK, codec.StatusTimeout, codec.StatusMoved},
	{codec.StatusOK, codec.StatusNotHeld, codec.StatusMoved},
	{codec.StatusOK, codec.StatusNotHeld, codec.StatusMoved},
	{codec.StatusFree, codec.StatusHeld, codec.StatusShared, codec.StatusMoved},
	{codec.StatusOK},
	{codec.StatusOK},
	{codec.StatusOK, codec.StatusMoved},
	{codec.StatusOK, codec.StatusTimeout, codec.StatusMoved},
	{codec.StatusFree, codec.StatusHeld, codec.StatusShared, codec.StatusMoved},
	{codec.StatusOK},
}

// errCodes are the ERR codes counted by name; any other is "other".
var errCodes = [...]string{codec.CodeBadRequest, codec.CodeTooLong, codec.CodeUnavailable, codec.CodeOverloaded, codec.CodeInternal, codec.CodeAuth}

func codeIndex(code []byte) int {
	for i, c := range errCodes {
		if string(code) == c {
			return i
		}
	}
	return len(errCodes)
}

// Bucket bounds: latencies from 100µs (a commit on a fast disk) to 5
// minutes (a long wait); commands per proposal in powers of two up to a
// full batch.
var (
	latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	// A synced save of the Raft log is one device flush or a few: from 25
	// µs (a fast NVMe drive) to seconds (a disk in trouble).
	syncBuckets     = []float64{.000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}
	commandsBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}
)

// newNodeMetrics makes every series but those read from the shards
// (registerGauges), and the registry /metrics serves. Every help text says
// what the series counts as docs/protocol.md does (TestMetricsLint checks
// that none is missing).
func newNodeMetrics() *nodeMetrics {
	set := &metricSet{}
	count := func(name, help string) *counter { return set.counter(desc(name, help)) }
	m := &nodeMetrics{
		set:         set,
		badRequests: count(`baton_bad_requests_total`, "Client lines that did not parse as a request (answered ERR badrequest or ERR toolong)."),
		grantSeconds: set.histogram(newHistogram(`baton_acquire_grant_seconds`,
			"Time from an acquire's receipt to the commit of the grant that answers it OK.", latencyBuckets, 1e9)),
		answerSeconds: set.histogram(newHistogram(`baton_acquire_answer_seconds`,
			"Time from an acquire's receipt to its answer, whatever the answer.", latencyBuckets, 1e9)),
		grants:   count(`baton_grants_total`, "Grants applied on this replica."),
		releases: count(`baton_releases_total`, "Releases applied on this replica."),
		extends:  count(`baton_extends_total`, "Extends applied on this replica."),
		expiries: count(`baton_expiries_total`, "Leases that ran out, applied as expired on this replica."),
		handOffs: count(`baton_handoffs_total`,
			"Releases and expiries applied with the grant of the same key to the next waiter in the same Raft entry."),
		waitTimeouts: count(`baton_wait_timeouts_total`,
			"Acquires whose wait ran out on this node as leader (answered TIMEOUT)."),
		abandonedReleased: count(`baton_abandoned_grants_released_total`,
			"Grants that landed for an acquire nobody waited for any more, released at once by this node as leader."),
		connsAccepted: count(`baton_connections_accepted_total`, "Client connections accepted, plain and TLS."),
		proposals:     count(`baton_proposals_total`, "Raft entries this node proposed."),
		proposalCommands: set.histogram(newHistogram(`baton_proposal_commands`,
			"Commands per Raft entry this node proposed.", commandsBuckets, 1)),
		failedProposals: count(`baton_failed_proposals_total`, "Proposals Raft refused, dropped or did not commit in time."),
		raftLogSyncSeconds: set.histogram(newHistogram(`baton_raft_log_synced_save_seconds`,
			"Time each synced write of the Raft log store took, most of it the disk's flush.", syncBuckets, 1e9)),

		shardIsLeader: desc(`baton_shard_is_leader`, "1 when this node leads the shard, else 0.", "shard"),
		shardLeaderID: desc(`baton_shard_leader_id`, "The peer (its --id) that leads the shard; 0 while none is known.", "shard"),
		shardTerm:     desc(`baton_shard_term`, "The Raft term of the last leader change of the shard this node saw.", "shard"),
		shardApplied:  desc(`baton_shard_applied_index`, "The Raft index of the last entry of the shard this replica applied.", "shard"),
		shardHeld:     desc(`baton_shard_held_locks`, "Locks held in the shard, as this replica applied them.", "shard"),
		shardWaiters: desc(`baton_shard_waiters`,
			"Acquires of the shard on this node's connections waiting for their answer.", "shard"),
		shardClusterVersion: desc(`baton_shard_cluster_version`,
			"The shard's cluster version as this replica applied it.", "shard"),
		held: desc(`baton_held_locks`, "Locks held, as this replica applied them (followers show them too)."),
		waiters: desc(`baton_waiters`,
			"Acquires on this node's connections waiting for their answer (only a leader has any)."),
	}
	saves := desc(`baton_raft_log_saves_total`,
		"Writes of the Raft log store, synced (new entries, a term or vote, a snapshot) or not (a commit index alone).", "synced")
	m.raftLogSaves = [2]*counter{set.counter(saves, "false"), set.counter(saves, "true")}
	set.add(desc(`baton_connections_open`, "Client connections open, plain and TLS."), prometheus.GaugeValue,
		func() float64 { return float64(m.connsOpen.Load()) })
	requests := desc(`baton_requests_total`, "Requests read, by op; a line that does not parse is not one.", "op")
	// baton_answers_total has the code label on ERR answers only (metricSet).
	const answersHelp = "Answers sent, by op and answer (op ? for a line that did not parse), and for ERR by code."
	answers := desc(`baton_answers_total`, answersHelp, "op", "answer")
	errs := desc(`baton_answers_total`, answersHelp, "op", "answer", "code")
	for i, op := range opLabels {
		if i < numOps {
			m.requests[i] = set.counter(requests, op)
			for _, st := range answerStatuses[i] {
				m.answers[i][st] = set.counter(answers, op, st.String())
			}
		}
		for j := range m.errs[i] {
			code := "other"
			if j < len(errCodes) {
				code = errCodes[j]
			}
			m.errs[i][j] = set.counter(errs, op, "ERR", code)
		}
	}
	m.reg = prometheus.NewRegistry()
	m.reg.MustRegister(set, dragonboatCollector{},
		// The standard go_* series and, of the runtime's histograms, the two
		// a lock service's latency hangs on: how long a runnable goroutine
		// waited for a thread, and the GC's stop-the-world pauses.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/(latencies|pauses/total/gc):seconds$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The text format unless the scraper asks for another (promhttp
	// negotiates); a collector that fails leaves the others' series served.
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m
}

// registerGauges adds the series read from the node's shards; the shards
// must exist.
func (n *Node) registerGauges() {
	m, me := n.metrics, n.cfg.ID
	sum := func(field func(*shardStats) *atomic.Int64) func() float64 {
		return func() float64 {
			var total int64
			for _, s := range n.shards {
				total += field(&s.stats).Load()
			}
			return float64(total)
		}
	}
	held := func(st *shardStats) *atomic.Int64 { return &st.held }
	waiters := func(st *shardStats) *atomic.Int64 { return &st.waiters }
	gauge := func(d *prometheus.Desc, value func() float64, labelValues ...string) {
		m.set.add(d, prometheus.GaugeValue, value, labelValues...)
	}
	gauge(m.held, sum(held))
	gauge(m.waiters, sum(waiters))
	for _, s := range n.shards {
		st, label := &s.stats, strconv.FormatUint(s.id, 10)
		gauge(m.shardIsLeader, func() float64 {
			if st.leaderID.Load() == me {
				return 1
			}
			return 0
		}, label)
		gauge(m.shardLeaderID, func() float64 { return float64(st.leaderID.Load()) }, label)
		gauge(m.shardTerm, func() float64 { return float64(st.term.Load()) }, label)
		gauge(m.shardApplied, func() float64 { return float64(st.applied.Load()) }, label)
		gauge(m.shardHeld, func() float64 { return float64(st.held.Load()) }, label)
		gauge(m.shardWaiters, func() float64 { return float64(st.waiters.Load()) }, label)
		gauge(m.shardClusterVersion, func() float64 { return float64(st.clusterVersion.Load()) }, label)
	}
}

// raftLogSaved counts one save of the Raft log store (savecall.Observer).
func (m *nodeMetrics) raftLogSaved(synced bool, took time.Duration) {
	if !synced {
		m.raftLogSaves[0].Inc()
		return
	}
	m.raftLogSaves[1].Inc()
	m.raftLogSyncSeconds.observe(uint64(took))
}

// countRequest counts a parsed request by its op.
func (m *nodeMetrics) countRequest(op byte) {
	if i := opIndex(op); i < numOps {
		m.requests[i].Inc()
	}
}

// answered counts one answer queued for a client.
func (m *nodeMetrics) answered(op byte, st codec.Status, code []byte) {
	i := opIndex(op)
	if st == codec.StatusErr {
		m.errs[i][codeIndex(code)].Inc()
		return
	}
	if int(st) < numStatuses {
		if c := m.answers[i][st]; c != nil {
			c.Inc()
		}
	}
}

// sinceReceipt is the time from an acquire's receipt (monoNow when its
// line was read) to now, in nanoseconds.
func sinceReceipt(received, now int64) uint64 {
	return uint64(max(now-received, 0))
}

// acquireGranted records that the grant answering the acquire received at
// received committed at now.
func (m *nodeMetrics) acquireGranted(received, now int64) {
	m.grantSeconds.observe(sinceReceipt(received, now))
}

// acquireAnswered records the answer to the acquire received at received.
func (m *nodeMetrics) acquireAnswered(received, now int64) {
	m.answerSeconds.observe(sinceReceipt(received, now))
}

// proposed counts one proposal of commands commands.
func (m *nodeMetrics) proposed(commands int) {
	m.proposals.Inc()
	m.proposalCommands.observe(uint64(commands))
}

// countApplied counts what one applied entry did to the shard's table:
// every replica calls it, in log order.
func (m *nodeMetrics) countApplied(st *shardStats, cmds []sm.Command, results []sm.Result) {
	for i, r := range results {
		switch r.Code {
		case sm.Granted:
			m.grants.Inc()
			if i > 0 && freed(results[i-1].Code) && bytes.Equal(cmds[i-1].Key, cmds[i].Key) {
				m.handOffs.Inc()
			}
		case sm.Released:
			m.releases.Inc()
		case sm.Expired:
			m.expiries.Inc()
		case sm.Extended:
			m.extends.Inc()
		}
	}
}

// freed reports whether a command with outcome c freed its key.
func freed(c sm.Code) bool { return c == sm.Released || c == sm.Expired }
