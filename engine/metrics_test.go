package engine

import (
	"bufio"
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// Unit tests of the counting: what one applied entry counts, which series
// an answer lands in, and the waiters and latencies of acquires that go
// through a shard. cmd/batond's TestMetrics checks the same series on a
// live node, through /metrics.

// samples reads every sample of m's set as its text format says it, each
// series named with its labels in name order (canonical).
func samples(t *testing.T, m *nodeMetrics) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.set)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[canonical(line[:i])] = v
	}
	return out
}

// canonical is series (name{label="value",...}) with its labels in name
// order, as the text format writes them, so that a test may name them in
// any order. No label value of these series holds a comma.
func canonical(series string) string {
	name, labels, ok := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	if !ok {
		return series
	}
	pairs := strings.Split(labels, ",")
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// moved fails t unless each series moved from before to now by want.
func moved(t *testing.T, m *nodeMetrics, before map[string]float64, want map[string]float64) {
	t.Helper()
	now := samples(t, m)
	for series, delta := range want {
		series = canonical(series)
		if _, ok := now[series]; !ok {
			t.Errorf("no series %s", series)
			continue
		}
		if got := now[series] - before[series]; got != delta {
			t.Errorf("%s moved by %v, want %v", series, got, delta)
		}
	}
}

func TestCountApplied(t *testing.T) {
	grant := func(k string) sm.Command { return sm.Command{Op: sm.OpGrant, Key: []byte(k), LeaseMs: 1000} }
	release := func(k string) sm.Command { return sm.Command{Op: sm.OpRelease, Key: []byte(k)} }
	expire := func(k string) sm.Command { return sm.Command{Op: sm.OpExpire, Key: []byte(k), Token: 1025} }
	extend := func(k string) sm.Command {
		return sm.Command{Op: sm.OpExtend, Key: []byte(k), Token: 1025, LeaseMs: 1000}
	}
	tests := []struct {
		name    string
		cmds    []sm.Command
		results []sm.Code
		want    map[string]float64
	}{
		{"grants", []sm.Command{grant("a"), grant("b"), grant("a")}, []sm.Code{sm.Granted, sm.Granted, sm.GrantRejected},
			map[string]float64{"baton_grants_total": 2, "baton_handoffs_total": 0}},
		{"release hands off", []sm.Command{release("a"), grant("a")}, []sm.Code{sm.Released, sm.Granted},
			map[string]float64{"baton_releases_total": 1, "baton_grants_total": 1, "baton_handoffs_total": 1}},
		{"expiry hands off", []sm.Command{expire("a"), grant("a")}, []sm.Code{sm.Expired, sm.Granted},
			map[string]float64{"baton_expiries_total": 1, "baton_grants_total": 1, "baton_handoffs_total": 1}},
		{"grant of another key is no hand-off", []sm.Command{release("a"), grant("b")}, []sm.Code{sm.Released, sm.Granted},
			map[string]float64{"baton_releases_total": 1, "baton_grants_total": 1, "baton_handoffs_total": 0}},
		{"rejected hand-off", []sm.Command{release("a"), grant("a")}, []sm.Code{sm.NotHeld, sm.GrantRejected},
			map[string]float64{"baton_releases_total": 0, "baton_grants_total": 0, "baton_handoffs_total": 0}},
		{"extend, expire for nobody, retry", []sm.Command{extend("a"), expire("b"), grant("c")}, []sm.Code{sm.Extended, sm.Noop, sm.Regranted},
			map[string]float64{"baton_extends_total": 1, "baton_expiries_total": 0, "baton_grants_total": 0}},
		{"release frees", []sm.Command{release("a"), expire("b")}, []sm.Code{sm.Released, sm.Expired},
			map[string]float64{"baton_releases_total": 1, "baton_expiries_total": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newNodeMetrics()
			var st shardStats
			results := make([]sm.Result, len(tc.results))
			for i, c := range tc.results {
				results[i] = sm.Result{Code: c, Token: 1025}
			}
			before := samples(t, m)
			m.countApplied(&st, tc.cmds, results)
			moved(t, m, before, tc.want)
		})
	}
}

func TestAnswersCounted(t *testing.T) {
	bad := &codec.Request{Op: codec.OpAcquire, Key: []byte("k")}
	tests := []struct {
		name   string
		send   func(cs *connState)
		series string
	}{
		{"A OK", func(cs *connState) {
			cs.send(&codec.Response{Op: 'A', Key: []byte("k"), Status: codec.StatusOK, Token: 1025}, nil)
		},
			`baton_answers_total{op="A",answer="OK"}`},
		{"R NOTHELD", func(cs *connState) { (&shard{}).send(cs, 'R', []byte("k"), codec.StatusNotHeld) },
			`baton_answers_total{op="R",answer="NOTHELD"}`},
		{"Q MOVED", func(cs *connState) {
			cs.send(&codec.Response{Op: 'Q', Key: []byte("k"), Status: codec.StatusMoved, Addr: []byte("h:1")}, nil)
		},
			`baton_answers_total{op="Q",answer="MOVED"}`},
		{"K ERR unavailable", func(cs *connState) { (&shard{}).sendError(cs, 'K', []byte("k"), codec.CodeUnavailable, "retry") },
			`baton_answers_total{op="K",answer="ERR",code="unavailable"}`},
		{"an unknown ERR code", func(cs *connState) { (&shard{}).sendError(cs, 'A', []byte("k"), "frobbed", "") },
			`baton_answers_total{op="A",answer="ERR",code="other"}`},
		{"malformed A", func(cs *connState) { cs.sendParseError(bad, codec.ErrMissingLease, nil) },
			`baton_answers_total{op="A",answer="ERR",code="badrequest"}`},
		{"unreadable line", func(cs *connState) { cs.sendParseError(&codec.Request{}, codec.ErrBadOp, nil) },
			`baton_answers_total{op="?",answer="ERR",code="badrequest"}`},
		{"line too long", func(cs *connState) { cs.sendParseError(bad, codec.ErrTooLong, nil) },
			`baton_answers_total{op="?",answer="ERR",code="toolong"}`},
		{"H OK", func(cs *connState) { cs.send(&helloOK, nil) },
			`baton_answers_total{op="H",answer="OK"}`},
		{"H ERR auth", func(cs *connState) { cs.send(&helloRefuse, nil) },
			`baton_answers_total{op="H",answer="ERR",code="auth"}`},
		{"malformed H", func(cs *connState) { cs.sendParseError(&codec.Request{Op: codec.OpHello}, codec.ErrMissingSecret, nil) },
			`baton_answers_total{op="H",answer="ERR",code="badrequest"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := newConn()
			before := samples(t, cs.m)
			tc.send(cs)
			moved(t, cs.m, before, map[string]float64{tc.series: 1})
			total := 0.0
			for series, v := range samples(t, cs.m) {
				if strings.HasPrefix(series, "baton_answers_total") {
					total += v - before[series]
				}
			}
			if total != 1 {
				t.Errorf("%v answers counted, want 1", total)
			}
		})
	}
}

// Queued acquires are waiters until answered or gone with their
// connection; each answered one is timed; a grant that lands for a closed
// connection is released and counted.
func TestWaitersAndAbandonedGrant(t *testing.T) {
	s := testShard(t)
	m := s.node.metrics
	holder, gone, next := connTo(s), connTo(s), connTo(s)
	before := samples(t, m)

	request(t, s, holder, "A k 10000 0")
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	request(t, s, gone, "A k 10000 0")
	request(t, s, next, "A k 10000 0")
	if got := s.stats.waiters.Load(); got != 2 {
		t.Fatalf("%d waiters, want 2", got)
	}
	moved(t, m, before, map[string]float64{
		"baton_acquire_grant_seconds_count": 1, "baton_acquire_answer_seconds_count": 1, `baton_answers_total{op="A",answer="OK"}`: 1,
	})

	// The holder releases; the Grant for gone is in flight when it closes.
	request(t, s, holder, "R k 1025")
	p, cmds = take(t, s)
	for _, w := range gone.close() {
		s.mu.Lock()
		s.abandon(w)
		s.mu.Unlock()
	}
	if got := s.stats.waiters.Load(); got != 1 {
		t.Fatalf("%d waiters after a waiter's connection closed, want 1", got)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Released, Token: 1025}, sm.Result{Code: sm.Granted, Token: 2049})
	p, cmds = take(t, s) // the grant for nobody is released, the next waiter's Grant with it
	apply(s, p, cmds, sm.Result{Code: sm.Released, Token: 2049}, sm.Result{Code: sm.Granted, Token: 3073})
	if got := s.stats.waiters.Load(); got != 0 {
		t.Fatalf("%d waiters after the last grant, want 0", got)
	}
	moved(t, m, before, map[string]float64{
		"baton_abandoned_grants_released_total": 1,
		"baton_handoffs_total":                  2,
		"baton_grants_total":                    3,
		"baton_releases_total":                  2,
		// holder and next were answered OK; gone was not answered.
		"baton_acquire_grant_seconds_count": 2, "baton_acquire_answer_seconds_count": 2, `baton_answers_total{op="A",answer="OK"}`: 2,
	})
	if got := s.stats.held.Load(); got != 1 {
		t.Errorf("%d held, want 1", got)
	}
}
