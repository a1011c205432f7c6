package engine

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// histogram is a Prometheus histogram (cumulative le buckets, _sum and
// _count) whose observing is atomic adds of integers only: no lock, no
// allocation, whichever event loop or apply goroutine observes. A scrape
// reads the atomics into a constant histogram (Collect). (client_golang's
// own histogram counts in float64 sums with a hot and a cold copy, more
// than the request path needs; VictoriaMetrics's Prometheus-style one took
// a mutex per observation.)
type histogram struct {
	desc   *prometheus.Desc
	bounds []uint64        // upper bounds, in the unit observations come in, ascending
	les    []float64       // the bounds in the exported unit, as the le labels say them
	counts []atomic.Uint64 // counts[i]: observations in (bounds[i-1], bounds[i]]; the last one: above every bound
	sum    atomic.Uint64
	scale  float64 // unit of an observation in the exported unit
}

// newHistogram makes a histogram named name, with help its # HELP text.
// bounds are the upper bounds in the exported unit; an observation is a
// whole number of 1/perUnit of that unit (perUnit 1e9 observes nanoseconds
// of a histogram in seconds).
func newHistogram(name, help string, bounds []float64, perUnit float64) *histogram {
	h := &histogram{desc: prometheus.NewDesc(name, help, nil, nil), counts: make([]atomic.Uint64, len(bounds)+1), scale: 1 / perUnit}
	for _, b := range bounds {
		h.bounds = append(h.bounds, uint64(b*perUnit+0.5))
		h.les = append(h.les, b)
	}
	return h
}

// observe records one value, in the unit newHistogram was given perUnit of.
func (h *histogram) observe(v uint64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// Describe sends the histogram's one Desc (prometheus.Collector).
func (h *histogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect sends the histogram as it is now (prometheus.Collector). _count
// is the sum of the buckets as read, so that it always equals the +Inf
// bucket.
func (h *histogram) Collect(ch chan<- prometheus.Metric) {
	buckets := make(map[float64]uint64, len(h.les))
	var total uint64
	for i, le := range h.les {
		total += h.counts[i].Load()
		buckets[le] = total
	}
	total += h.counts[len(h.bounds)].Load()
	ch <- prometheus.MustNewConstHistogram(h.desc, total, float64(h.sum.Load())*h.scale, buckets)
}
