package engine

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A histogram gathers as a Prometheus histogram whose buckets count each
// observation in the first bucket whose bound it does not exceed.
func TestHistogram(t *testing.T) {
	h := newHistogram("test_seconds", "A histogram under test.", []float64{0.001, 0.01, 1}, 1e9)
	for _, ns := range []uint64{0, 1_000_000, 1_000_001, 10_000_000, 500_000_000, 2_000_000_000} {
		h.observe(ns)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	families, err := reg.Gather()
	if err != nil || len(families) != 1 {
		t.Fatalf("gathered %v, %v; want one family", families, err)
	}
	if families[0].GetHelp() != "A histogram under test." {
		t.Errorf("help %q", families[0].GetHelp())
	}
	got := families[0].GetMetric()[0].GetHistogram()
	if got.GetSampleCount() != 6 || got.GetSampleSum() != 2.512000001 {
		t.Errorf("count %d, sum %v; want 6, 2.512000001", got.GetSampleCount(), got.GetSampleSum())
	}
	want := map[float64]uint64{0.001: 2, 0.01: 4, 1: 5, math.Inf(1): 6}
	for _, bucket := range got.GetBucket() {
		if bucket.GetCumulativeCount() != want[bucket.GetUpperBound()] {
			t.Errorf("bucket le=%v: %d, want %d", bucket.GetUpperBound(), bucket.GetCumulativeCount(), want[bucket.GetUpperBound()])
		}
	}
	// The +Inf bucket is implied by the count in client_golang's model.
	if len(got.GetBucket()) != len(want)-1 {
		t.Errorf("%d buckets, want %d", len(got.GetBucket()), len(want)-1)
	}
}
