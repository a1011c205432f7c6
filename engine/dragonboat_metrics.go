package engine

import (
	"bytes"
	"sort"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// dragonboat's own series (NodeHostConfig.EnableMetrics), bridged into the
// node's registry. dragonboat counts them in VictoriaMetrics/metrics's
// default set, which writes no help text; at a scrape dragonboatCollector
// reads that set's text and hands each family on with the help and type
// below. Every family is a counter or a gauge of plain values, so nothing
// is lost on the way.

// dragonboatFamily is what baton says of one of dragonboat's families.
type dragonboatFamily struct {
	kind prometheus.ValueType
	help string
}

// dragonboatFamilies are the families of the dragonboat version in go.mod
// (its event.go and internal/transport/metrics.go). TestMetricsLint fails
// when a node writes one that is not here, so that a dragonboat upgrade
// that adds one gets its help text written.
var dragonboatFamilies = map[string]dragonboatFamily{
	"dragonboat_raftnode_campaign_launched_total": {prometheus.CounterValue,
		"Elections this replica started (dragonboat)."},
	"dragonboat_raftnode_campaign_skipped_total": {prometheus.CounterValue,
		"Elections this replica did not start because a committed membership change was not yet applied (dragonboat)."},
	"dragonboat_raftnode_snapshot_rejected_total": {prometheus.CounterValue,
		"Snapshots this replica did not restore because its log already covered them (dragonboat)."},
	"dragonboat_raftnode_replication_rejected_total": {prometheus.CounterValue,
		"Replication messages this replica rejected because they did not match its log (dragonboat)."},
	"dragonboat_raftnode_proposal_dropped_total": {prometheus.CounterValue,
		"Entries proposed on this replica that it dropped, e.g. with no leader known (dragonboat)."},
	"dragonboat_raftnode_read_index_dropped_total": {prometheus.CounterValue,
		"ReadIndex requests this replica dropped (dragonboat)."},
	"dragonboat_raftnode_has_leader": {prometheus.GaugeValue,
		"1 when this replica knows a leader of its shard, else 0 (dragonboat)."},
	"dragonboat_raftnode_term": {prometheus.GaugeValue,
		"The Raft term of this replica's last leader change (dragonboat)."},
	"dragonboat_transport_message_connections": {prometheus.GaugeValue,
		"Connections to other nodes open for Raft messages (dragonboat's transport)."},
	"dragonboat_transport_snapshot_connections": {prometheus.GaugeValue,
		"Connections to other nodes open for sending snapshots (dragonboat's transport)."},
	"dragonboat_transport_message_send_failure_total": {prometheus.CounterValue,
		"Raft messages to other nodes that could not be sent (dragonboat's transport)."},
	"dragonboat_transport_message_send_success_total": {prometheus.CounterValue,
		"Raft messages sent to other nodes (dragonboat's transport)."},
	"dragonboat_transport_snapshot_send_failure_total": {prometheus.CounterValue,
		"Snapshots to other nodes whose sending failed (dragonboat's transport)."},
	"dragonboat_transport_snapshot_send_success_total": {prometheus.CounterValue,
		"Snapshots sent to other nodes (dragonboat's transport)."},
	"dragonboat_transport_received_message_total": {prometheus.CounterValue,
		"Raft messages received from other nodes and handed to a replica (dragonboat's transport)."},
	"dragonboat_transport_received_message_dropped_total": {prometheus.CounterValue,
		"Raft messages received from other nodes and dropped, e.g. for a shard this node does not host (dragonboat's transport)."},
	"dragonboat_transport_received_snapshot_total": {prometheus.CounterValue,
		"Snapshot messages received from other nodes (dragonboat's transport)."},
	"dragonboat_transport_failed_message_connection_attempt_total": {prometheus.CounterValue,
		"Attempts to connect to another node for Raft messages that failed (dragonboat's transport)."},
	"dragonboat_transport_failed_snapshot_connection_attempt_total": {prometheus.CounterValue,
		"Attempts to connect to another node for a snapshot that failed (dragonboat's transport)."},
}

// unknownDragonboatHelp is the help of a family dragonboat writes that
// dragonboatFamilies lacks: it is still served (as a gauge, which claims
// nothing about how it moves) rather than lost.
const unknownDragonboatHelp = "One of dragonboat's own series, not described by baton (engine/dragonboat_metrics.go)."

// dragonboatCollector serves dragonboat's series (see above). They are the
// process's, as dragonboat keeps them: several nodes in one process (tests)
// each serve them all. It is unchecked (Describe sends nothing), since the
// families are known only once dragonboat has made them.
type dragonboatCollector struct{}

// Describe sends nothing: dragonboatCollector is unchecked.
func (dragonboatCollector) Describe(chan<- *prometheus.Desc) {}

// Collect reads dragonboat's series as VictoriaMetrics/metrics writes them
// and sends each with its help text.
func (dragonboatCollector) Collect(ch chan<- prometheus.Metric) {
	var b bytes.Buffer
	metrics.GetDefaultSet().WritePrometheus(&b)
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(&b)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("dragonboat_metrics_unreadable", "dragonboat's series could not be read.", nil, nil), err)
		return
	}
	for name, f := range families {
		fam, known := dragonboatFamilies[name]
		if !known {
			fam = dragonboatFamily{prometheus.GaugeValue, unknownDragonboatHelp}
		}
		for _, m := range f.GetMetric() {
			names, values := labelsOf(m)
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, fam.help, names, nil), fam.kind, sampleValue(m), values...)
		}
	}
}

// labelsOf is a sample's label names and values, in name order.
func labelsOf(m *dto.Metric) (names, values []string) {
	pairs := m.GetLabel()
	sort.Slice(pairs, func(i, j int) bool { return strings.Compare(pairs[i].GetName(), pairs[j].GetName()) < 0 })
	for _, l := range pairs {
		names, values = append(names, l.GetName()), append(values, l.GetValue())
	}
	return names, values
}

// sampleValue is a counter's, a gauge's or an untyped sample's value
// (VictoriaMetrics writes # TYPE lines only when its process-wide
// ExposeMetadata is on, which baton leaves off).
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}
