package bench

import (
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
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
	errUnanswered  = "unanswered"  // no answer before the drain deadline
	errDisconnect  = "disconnect"  // the connection failed
	errBadResponse = "badresponse" // a line the codec rejects
	errUnpaired    = "unpaired"    // an answer to nothing we sent
	errDial        = "dial"        // an idle connection could not be opened
)

// sample is one acquire latency; only measured ones go into the totals, but
// all go into the per-second view so that warm-up can be watched.
type sample struct {
	us       int64
	measured bool
}

// connStats is what one connection's goroutine gathers between two merges.
// It is owned by that goroutine, so recording costs no lock; merge moves it
// into the shared recorder once per read batch.
type connStats struct {
	acq        []sample
	cyc        []int64 // measured cycle latencies, us
	done       int64   // cycles (hold: acquires) completed, warm-up included
	measured   int64   // measured cycles completed
	lastDone   time.Duration
	errs       map[string]int64
	violations int64
}

func (s *connStats) addErr(kind string, n int64) {
	if s.errs == nil {
		s.errs = make(map[string]int64)
	}
	s.errs[kind] += n
}

// recorder is the run's shared statistics.
type recorder struct {
	mu         sync.Mutex
	acq, cyc   *hdrhistogram.Histogram // measured
	tickAcq    *hdrhistogram.Histogram // since the last progress line
	tickDone   int64
	measured   int64
	lastDone   time.Duration // when the last measured cycle completed
	errs       map[string]int64
	errTotal   int64
	violations int64
}

func newRecorder() *recorder {
	return &recorder{
		acq:     newHistogram(),
		cyc:     newHistogram(),
		tickAcq: newHistogram(),
		errs:    make(map[string]int64),
	}
}

// merge moves s into r and resets s.
func (r *recorder) merge(s *connStats) {
	r.mu.Lock()
	for _, a := range s.acq {
		_ = r.tickAcq.RecordValue(a.us) // in range: toUs clamps
		if a.measured {
			_ = r.acq.RecordValue(a.us)
		}
	}
	for _, c := range s.cyc {
		_ = r.cyc.RecordValue(c)
	}
	r.tickDone += s.done
	r.measured += s.measured
	r.lastDone = max(r.lastDone, s.lastDone)
	for k, n := range s.errs {
		r.errs[k] += n
		r.errTotal += n
	}
	r.violations += s.violations
	r.mu.Unlock()

	s.acq = s.acq[:0]
	s.cyc = s.cyc[:0]
	s.done, s.measured, s.violations = 0, 0, 0
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
	p50, p99 int64 // acquire latency, us; 0 when there was none
	errTotal int64 // since the start
}

// takeTick returns the interval since the previous call and starts a new one.
func (r *recorder) takeTick() tick {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := tick{done: r.tickDone, errTotal: r.errTotal}
	if r.tickAcq.TotalCount() > 0 {
		t.p50 = r.tickAcq.ValueAtQuantile(50)
		t.p99 = r.tickAcq.ValueAtQuantile(99)
	}
	r.tickDone = 0
	r.tickAcq.Reset()
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
