package engine

import (
	"fmt"
	"io"
	"strconv"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// histogram is a Prometheus histogram (cumulative le buckets, _sum and
// _count) written through its Set's RegisterMetricsWriter. Observing is
// atomic adds of integers only: no lock, no allocation, whichever event
// loop or apply goroutine observes. (The library's own Prometheus-style
// histogram takes a mutex per observation, and comes only with versions
// that log a line at start-up on hosts without pressure stall information,
// or that need a newer golang.org/x/sys than dragonboat's.)
type histogram struct {
	name   string
	bounds []uint64        // upper bounds, in the unit observations come in, ascending
	les    []string        // the bounds as the le labels write them
	counts []atomic.Uint64 // counts[i]: observations in (bounds[i-1], bounds[i]]; the last one: above every bound
	sum    atomic.Uint64
	scale  float64 // unit of an observation in the exported unit
}

// newHistogram adds a histogram named name to set. bounds are the upper
// bounds in the exported unit; an observation is a whole number of
// 1/perUnit of that unit (perUnit 1e9 observes nanoseconds of a histogram
// in seconds).
func newHistogram(set *metrics.Set, name string, bounds []float64, perUnit float64) *histogram {
	h := &histogram{name: name, counts: make([]atomic.Uint64, len(bounds)+1), scale: 1 / perUnit}
	for _, b := range bounds {
		h.bounds = append(h.bounds, uint64(b*perUnit+0.5))
		h.les = append(h.les, formatFloat(b))
	}
	set.RegisterMetricsWriter(h.write)
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

// write writes the histogram in the text format. _count is the sum of the
// buckets as read, so that it always equals the +Inf bucket.
func (h *histogram) write(w io.Writer) {
	metrics.WriteMetadataIfNeeded(w, h.name, "histogram")
	var total uint64
	for i, le := range h.les {
		total += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{le=\"%s\"} %d\n", h.name, le, total)
	}
	total += h.counts[len(h.bounds)].Load()
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n", h.name, total)
	fmt.Fprintf(w, "%s_sum %s\n", h.name, formatFloat(float64(h.sum.Load())*h.scale))
	fmt.Fprintf(w, "%s_count %d\n", h.name, total)
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
