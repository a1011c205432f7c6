package engine

import (
	"bytes"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// The node's Prometheus series (docs/protocol.md lists them). They are kept
// up to date as things happen, each by the code that does what it counts,
// so that a scrape costs the same with no lock held or a million: counting
// is an atomic add (histogram.go), never a lock, an allocation or a lookup
// by name, and a scrape reads atomics, never a shard's keys or its lock.

// nodeMetrics are the node's series, in a Set of the node's own so that
// several nodes in one process (tests) do not collide.
type nodeMetrics struct {
	set *metrics.Set

	requests    [numOps]*metrics.Counter // parsed requests, by op
	badRequests *metrics.Counter         // lines that did not parse
	// answers by op and status, errs by op and ERR code; nil where the
	// protocol has no such answer. The last op index is '?', an unreadable
	// line.
	answers [numOps + 1][numStatuses]*metrics.Counter
	errs    [numOps + 1][len(errCodes) + 1]*metrics.Counter

	// An acquire's time from its receipt to the commit of the grant that
	// answers it OK, and to its answer, whatever the answer (nanoseconds).
	grantSeconds  *histogram
	answerSeconds *histogram

	// Changes of the table, as applied on this replica (every replica
	// counts them).
	grants, releases, extends, expiries *metrics.Counter
	// handOffs: a release or expiry applied with the grant of the same key
	// to the next waiter right behind it, in the same entry.
	handOffs *metrics.Counter
	// Decided by this node as a shard's leader.
	waitTimeouts      *metrics.Counter // waits that ran out (TIMEOUT)
	abandonedReleased *metrics.Counter // grants released because nobody waited for them any more

	connsOpen     atomic.Int64
	connsAccepted *metrics.Counter

	proposals        *metrics.Counter
	proposalCommands *histogram
	failedProposals  *metrics.Counter

	// The Raft log store's saves (engine/seglog, engine/raftlog): how many,
	// by whether they were synced, and how long the synced ones took
	// (nanoseconds), which is the disk's flush time as a commit waits for it.
	raftLogSaves       [2]*metrics.Counter // [0]: not synced, [1]: synced
	raftLogSyncSeconds *histogram
}

// shardStats is what the series and /status show of one shard, kept as
// things happen. Every field is an atomic: a scrape takes no lock.
type shardStats struct {
	leaderID atomic.Uint64 // as Raft last reported it; 0 while none is known
	term     atomic.Uint64 // of the last leader change
	applied  atomic.Uint64 // Raft index of the last entry applied
	held     atomic.Int64  // locks of the applied table
	waiters  atomic.Int64  // acquires listed on this node's connections, unanswered
	// clusterVersion is the applied table's cluster version
	// (statemachine.Table.ClusterVersion).
	clusterVersion atomic.Uint64
}

// Ops in series labels; opIndex maps an op letter to its place.
const numOps = codec.NumOps

var opLabels = [numOps + 1]string{"A", "R", "K", "Q", "H", "C", "M", "?"}

// opIndex is codec.OpIndex, with numOps ("?") for anything else.
func opIndex(op byte) int {
	if i := codec.OpIndex(op); i >= 0 {
		return i
	}
	return numOps
}

// numStatuses bounds codec.Status values (StatusOK..StatusErr).
const numStatuses = int(codec.StatusErr) + 1

// answerStatuses are the answers other than ERR the protocol has for each
// op (MOVED for every op but H and C).
var answerStatuses = [numOps][]codec.Status{
	{codec.StatusOK, codec.StatusTimeout, codec.StatusMoved},
	{codec.StatusOK, codec.StatusNotHeld, codec.StatusMoved},
	{codec.StatusOK, codec.StatusNotHeld, codec.StatusMoved},
	{codec.StatusFree, codec.StatusHeld, codec.StatusMoved},
	{codec.StatusOK},
	{codec.StatusOK},
	{codec.StatusOK, codec.StatusMoved},
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
// (registerGauges).
func newNodeMetrics() *nodeMetrics {
	// # TYPE lines, so that Prometheus knows counters, gauges and
	// histograms apart (a process-wide setting of the library).
	metrics.ExposeMetadata(true)
	set := metrics.NewSet()
	m := &nodeMetrics{
		set:               set,
		badRequests:       set.NewCounter(`baton_bad_requests_total`),
		grantSeconds:      newHistogram(set, `baton_acquire_grant_seconds`, latencyBuckets, 1e9),
		answerSeconds:     newHistogram(set, `baton_acquire_answer_seconds`, latencyBuckets, 1e9),
		grants:            set.NewCounter(`baton_grants_total`),
		releases:          set.NewCounter(`baton_releases_total`),
		extends:           set.NewCounter(`baton_extends_total`),
		expiries:          set.NewCounter(`baton_expiries_total`),
		handOffs:          set.NewCounter(`baton_handoffs_total`),
		waitTimeouts:      set.NewCounter(`baton_wait_timeouts_total`),
		abandonedReleased: set.NewCounter(`baton_abandoned_grants_released_total`),
		connsAccepted:     set.NewCounter(`baton_connections_accepted_total`),
		proposals:         set.NewCounter(`baton_proposals_total`),
		proposalCommands:  newHistogram(set, `baton_proposal_commands`, commandsBuckets, 1),
		failedProposals:   set.NewCounter(`baton_failed_proposals_total`),
		raftLogSaves: [2]*metrics.Counter{
			set.NewCounter(`baton_raft_log_saves_total{synced="false"}`),
			set.NewCounter(`baton_raft_log_saves_total{synced="true"}`),
		},
		raftLogSyncSeconds: newHistogram(set, `baton_raft_log_synced_save_seconds`, syncBuckets, 1e9),
	}
	set.NewGauge(`baton_connections_open`, func() float64 { return float64(m.connsOpen.Load()) })
	for i, op := range opLabels {
		if i < numOps {
			m.requests[i] = set.NewCounter(`baton_requests_total{op="` + op + `"}`)
			for _, st := range answerStatuses[i] {
				m.answers[i][st] = set.NewCounter(`baton_answers_total{op="` + op + `",answer="` + st.String() + `"}`)
			}
		}
		for j := range m.errs[i] {
			code := "other"
			if j < len(errCodes) {
				code = errCodes[j]
			}
			m.errs[i][j] = set.NewCounter(`baton_answers_total{op="` + op + `",answer="ERR",code="` + code + `"}`)
		}
	}
	return m
}

// registerGauges adds the series read from the node's shards; the shards
// must exist.
func (n *Node) registerGauges() {
	set, me := n.metrics.set, n.cfg.ID
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
	set.NewGauge(`baton_held_locks`, sum(held))
	set.NewGauge(`baton_waiters`, sum(waiters))
	for _, s := range n.shards {
		st, label := &s.stats, `{shard="`+strconv.FormatUint(s.id, 10)+`"}`
		set.NewGauge(`baton_shard_is_leader`+label, func() float64 {
			if st.leaderID.Load() == me {
				return 1
			}
			return 0
		})
		set.NewGauge(`baton_shard_leader_id`+label, func() float64 { return float64(st.leaderID.Load()) })
		set.NewGauge(`baton_shard_term`+label, func() float64 { return float64(st.term.Load()) })
		set.NewGauge(`baton_shard_applied_index`+label, func() float64 { return float64(st.applied.Load()) })
		set.NewGauge(`baton_shard_held_locks`+label, func() float64 { return float64(st.held.Load()) })
		set.NewGauge(`baton_shard_waiters`+label, func() float64 { return float64(st.waiters.Load()) })
		set.NewGauge(`baton_shard_cluster_version`+label, func() float64 { return float64(st.clusterVersion.Load()) })
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
	var held int64
	for i, r := range results {
		switch r.Code {
		case sm.Granted:
			m.grants.Inc()
			held++
			if i > 0 && freed(results[i-1].Code) && bytes.Equal(cmds[i-1].Key, cmds[i].Key) {
				m.handOffs.Inc()
			}
		case sm.Released:
			m.releases.Inc()
			held--
		case sm.Expired:
			m.expiries.Inc()
			held--
		case sm.Extended:
			m.extends.Inc()
		}
	}
	if held != 0 {
		st.held.Add(held)
	}
}

// freed reports whether a command with outcome c freed its key.
func freed(c sm.Code) bool { return c == sm.Released || c == sm.Expired }
