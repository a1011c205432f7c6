package engine

import (
	"bytes"
	"math"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/common/expfmt"
)

// A histogram's text parses as a Prometheus histogram whose buckets count
// each observation in the first bucket whose bound it does not exceed.
func TestHistogram(t *testing.T) {
	set := metrics.NewSet()
	metrics.ExposeMetadata(true)
	h := newHistogram(set, "test_seconds", []float64{0.001, 0.01, 1}, 1e9)
	for _, ns := range []uint64{0, 1_000_000, 1_000_001, 10_000_000, 500_000_000, 2_000_000_000} {
		h.observe(ns)
	}
	var b bytes.Buffer
	set.WritePrometheus(&b)
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(&b)
	if err != nil {
		t.Fatalf("does not parse: %v\n%s", err, b.String())
	}
	got := families["test_seconds"].GetMetric()[0].GetHistogram()
	if got.GetSampleCount() != 6 || got.GetSampleSum() != 2.512000001 {
		t.Errorf("count %d, sum %v; want 6, 2.512000001", got.GetSampleCount(), got.GetSampleSum())
	}
	want := map[float64]uint64{0.001: 2, 0.01: 4, 1: 5, math.Inf(1): 6}
	for _, bucket := range got.GetBucket() {
		if bucket.GetCumulativeCount() != want[bucket.GetUpperBound()] {
			t.Errorf("bucket le=%v: %d, want %d", bucket.GetUpperBound(), bucket.GetCumulativeCount(), want[bucket.GetUpperBound()])
		}
	}
	if len(got.GetBucket()) != len(want) {
		t.Errorf("%d buckets, want %d", len(got.GetBucket()), len(want))
	}
}
