package bench

import (
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/baton-dev/baton/codec"
)

// Histogram range: 1 us to 60 s at 3 significant digits. Latencies outside
// are clamped, so a stuck request still shows up (as 60 s) instead of being
// dropped.
const (
	histMinUs   = 1
	histMaxUs   = 60_000_000
	histSigFigs = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinUs, histMaxUs, histSigFigs)
}

// toUs converts a latency to whole microseconds within the histogram range.
func toUs(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	return min(max(us, histMinUs), histMaxUs)
}

// Latency summarises a latency distribution, in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   int64   `json:"p50"`
	P90   int64   `json:"p90"`
	P99   int64   `json:"p99"`
	P999  int64   `json:"p999"`
	Max   int64   `json:"max"`
}

// summarize reads the summary out of h; all zero when h is empty.
func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(),
		Mean:  h.Mean(),
		P50:   h.ValueAtQuantile(50),
		P90:   h.ValueAtQuantile(90),
		P99:   h.ValueAtQuantile(99),
		P999:  h.ValueAtQuantile(99.9),
		Max:   h.Max(),
	}
}

// Error kinds that are not a server's status word.
const (
	errUnanswered    = "unanswered"     // no answer before the drain deadline
	errDisconnect    = "disconnect"     // the connection failed
	errBadResponse   = "badresponse"    // a line the codec rejects
	errUnpaired      = "unpaired"       // an answer to nothing we sent
	errDial          = "dial"           // an idle connection could not be opened
	errQueryMismatch = "query-mismatch" // mixed: Q of our own held key did not say HELD with our token
)

// What a latency sample measures. Every kind has its own histogram; the
// workload picks the one its progress line shows.
const (
	latAcquire = iota // A sent (open loop: intended) -> its OK
	latRelease        // R sent -> its OK
	latExtend         // K sent -> its OK
	latQuery          // Q sent -> its answer
	latCycle          // cycle start (as latAcquire) -> the OK of its last step
	latHandoff        // contended: the R that freed a key sent -> the key's next grant read
	latExpiry         // expiry: a grant read plus its lease -> the key's next grant read
	latRoundA         // batch: a round's acquires sent -> the last of their answers
	latRoundR         // batch: a round's releases sent -> the last of their answers
	numLat
)

// opLat is the latency kind of an answer to op.
func opLat(op byte) int {
	switch op {
	case codec.OpRelease:
		return latRelease
	case codec.OpExtend:
		return latExtend
	case codec.OpQuery:
		return latQuery
	}
	return latAcquire
}

// sample is one latency; only measured ones go into the totals, but all go
// into the per-second view so that warm-up can be watched.
type sample struct {
	kind     uint8
	measured bool
	us       int64
}

// connStats is what one connection's goroutine gathers between two merges.
// It is owned by that goroutine, so recording costs no lock; merge moves it
// into the shared recorder once per read batch.
type connStats struct {
	lat        []sample
	done       int64 // cycles (hold: acquires) completed, warm-up included
	measured   int64 // measured cycles completed
	requests   int64 // measured answers that were OK (mixed: ops/s)
	expiries   int64 // measured grants that followed an unreleased grant
	lastDone   time.Duration
	errs       map[string]int64
	violations int64 // token order
	fifo       int64 // FIFO order
	// overPermits: grants that made more holders of a key than its
	// permits (Config.Permits)
	overPermits int64
}

func (s *connStats) add(kind int, d time.Duration, measured bool) {
	s.lat = append(s.lat, sample{uint8(kind), measured, toUs(d)})
}

func (s *connStats) addErr(kind string, n int64) {
	if s.errs == nil {
		s.errs = make(map[string]int64)
	}
	s.errs[kind] += n
}

// recorder is the run's shared statistics.
type recorder struct {
	mu       sync.Mutex
	hist     [numLat]*hdrhistogram.Histogram // measured
	tickKind int                             // the kind the progress line shows
	tickHist *hdrhistogram.Histogram         // since the last progress line
	tickDone int64
	measured int64
	requests int64
	expiries int64
	lastDone time.Duration // when the last measured cycle completed
	errs     map[string]int64
	errTotal int64
	// violations, fifo and overPermits count token-order, FIFO-order and
	// permits failures.
	violations, fifo, overPermits int64
}

func newRecorder() *recorder {
	r := &recorder{tickHist: newHistogram(), errs: make(map[string]int64)}
	for i := range r.hist {
		r.hist[i] = newHistogram()
	}
	return r
}

// merge moves s into r and resets s.
func (r *recorder) merge(s *connStats) {
	r.mu.Lock()
	for _, a := range s.lat {
		// In range: toUs clamps.
		if int(a.kind) == r.tickKind {
			_ = r.tickHist.RecordValue(a.us)
		}
		if a.measured {
			_ = r.hist[a.kind].RecordValue(a.us)
		}
	}
	r.tickDone += s.done
	r.measured += s.measured
	r.requests += s.requests
	r.expiries += s.expiries
	r.lastDone = max(r.lastDone, s.lastDone)
	for k, n := range s.errs {
		r.errs[k] += n
		r.errTotal += n
	}
	r.violations += s.violations
	r.fifo += s.fifo
	r.overPermits += s.overPermits
	r.mu.Unlock()

	s.lat = s.lat[:0]
	s.done, s.measured, s.requests, s.expiries, s.violations, s.fifo, s.overPermits = 0, 0, 0, 0, 0, 0, 0
	clear(s.errs)
}

// addErr counts errors found outside a connection's goroutine.
func (r *recorder) addErr(kind string, n int64) {
	if n == 0 {
		return
	}
	r.mu.Lock()
	r.errs[kind] += n
	r.errTotal += n
	r.mu.Unlock()
}

// tick is the view of one progress interval.
type tick struct {
	done     int64
	p50, p99 int64 // of the recorder's tick kind, us; 0 when there was none
	errTotal int64 // since the start
}

// takeTick returns the interval since the previous call and starts a new one.
func (r *recorder) takeTick() tick {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := tick{done: r.tickDone, errTotal: r.errTotal}
	if r.tickHist.TotalCount() > 0 {
		t.p50 = r.tickHist.ValueAtQuantile(50)
		t.p99 = r.tickHist.ValueAtQuantile(99)
	}
	r.tickDone = 0
	r.tickHist.Reset()
	return t
}

// errors returns a copy of the error counts (empty, not nil, when there
// were none, so that the JSON result always has the map).
func (r *recorder) errors() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int64, len(r.errs))
	for k, n := range r.errs {
		m[k] = n
	}
	return m
}

// percentilePoints are the quantiles the latency distribution is reported
// at (Result.Percentiles and the plot): dense towards the tail, where a
// lock service's problems show.
var percentilePoints = []float64{0, 10, 20, 30, 40, 50, 60, 70, 75, 80, 85, 90, 92.5, 95, 96, 97, 98, 99,
	99.5, 99.75, 99.9, 99.95, 99.99, 99.999, 100}

// percentiles reads the latency distribution out of h at percentilePoints;
// nil when h is empty.
func percentiles(h *hdrhistogram.Histogram) []Percentile {
	if h.TotalCount() == 0 {
		return nil
	}
	ps := make([]Percentile, 0, len(percentilePoints))
	for _, q := range percentilePoints {
		var v int64
		switch q {
		case 0:
			v = h.Min()
		case 100:
			v = h.Max()
		default:
			v = h.ValueAtQuantile(q)
		}
		ps = append(ps, Percentile{Q: q, Us: v})
	}
	return ps
}

// Histogram is a latency histogram with the range and precision of baton
// bench's own (1 us to 60 s, 3 significant digits), for load drivers
// outside this package (the peer comparisons in tools/compare), so that
// their figures are computed exactly as baton's are. It is not safe for
// concurrent use: give each goroutine its own and Merge them.
type Histogram struct{ h *hdrhistogram.Histogram }

// NewHistogram returns an empty Histogram.
func NewHistogram() *Histogram { return &Histogram{newHistogram()} }

// Record adds one latency; values outside the range are clamped to it.
func (h *Histogram) Record(d time.Duration) { _ = h.h.RecordValue(toUs(d)) }

// Merge adds every sample of o to h.
func (h *Histogram) Merge(o *Histogram) { h.h.Merge(o.h) }

// Summary is h's count, mean and percentiles, as in Result.
func (h *Histogram) Summary() Latency { return summarize(h.h) }

// Percentiles is h's distribution, as in Result.Percentiles.
func (h *Histogram) Percentiles() []Percentile { return percentiles(h.h) }
