package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Result is the outcome of a run. Latencies are in microseconds, sizes in
// bytes. A field a workload does not produce is left out of the JSON (or
// zero where noted). Fields after Unit belong to the hold workload.
type Result struct {
	Workload string `json:"workload"`
	// Via is how the server was driven: "wire" or "client".
	Via string `json:"via,omitempty"`
	// Owners: every acquire carried an owner (Config.Owners, or via client).
	Owners bool `json:"owners,omitempty"`
	// Permits: every acquire was one of that many shared holds of its key
	// (Config.Permits); absent for exclusive locks.
	Permits int      `json:"permits,omitempty"`
	Addrs   []string `json:"addrs"`
	Conns   int      `json:"conns"`
	Depth   int      `json:"depth"`
	// Shape is "batch" when each connection sent its cycles in rounds
	// (Config.Shape ShapeBatch); absent for the sliding window, and for
	// the Go client and hold, which have no shape to choose.
	Shape string `json:"shape,omitempty"`
	// Keys is the number of distinct keys the cycles use.
	Keys    int   `json:"keys,omitempty"`
	LeaseMs int64 `json:"lease_ms"`
	WaitMs  int64 `json:"wait_ms"`
	// Rate is the open-loop target in cycles per second over all
	// connections; 0 (absent) for a closed loop.
	Rate float64 `json:"rate,omitempty"`
	// WarmupS and DurationS: the measured span excludes the warm-up. For
	// hold, DurationS is how long the locks were kept.
	WarmupS      float64 `json:"warmup_s"`
	DurationS    float64 `json:"duration_s"`
	Cycles       int64   `json:"cycles"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
	// AcquireUs is from sending A (open loop: from when it should have been
	// sent) to its OK; CycleUs from the same start to the OK of the cycle's
	// last step.
	AcquireUs Latency `json:"acquire_us"`
	CycleUs   Latency `json:"cycle_us"`
	// RoundUs (batch) is the latency of the rounds, what a client
	// library's pipeline makes its caller wait for: the acquire batch
	// from its write to the last of its answers, and the release batch
	// likewise. AcquireUs stays each acquire's own, from the batch's
	// write to its answer.
	RoundUs *RoundLatency `json:"round_us,omitempty"`
	// ReleaseUs, ExtendUs and QueryUs: from sending R, K or Q to its answer.
	ReleaseUs *Latency `json:"release_us,omitempty"`
	ExtendUs  *Latency `json:"extend_us,omitempty"`
	QueryUs   *Latency `json:"query_us,omitempty"`
	// OpsPerSec (mixed) counts every request answered OK (or HELD), per
	// second.
	OpsPerSec float64 `json:"ops_per_sec,omitempty"`
	// HandoffsPerSec (contended) is grants per second; HandoffUs is from
	// sending the R that freed a key to reading the key's next grant, on
	// whatever connection it arrives.
	HandoffsPerSec float64  `json:"handoffs_per_sec,omitempty"`
	HandoffUs      *Latency `json:"handoff_us,omitempty"`
	// FIFOChecked (contended) is the number of grants checked against the
	// key's queue; FIFOViolations those that overtook an acquire sent more
	// than FIFOSlackMs earlier and still waiting (always present; 0 when
	// nothing was checked).
	FIFOChecked    int64   `json:"fifo_checked,omitempty"`
	FIFOViolations int64   `json:"fifo_violations"`
	FIFOSlackMs    float64 `json:"fifo_slack_ms,omitempty"`
	// Expiries (expiry) counts grants of keys whose previous holder never
	// released; ExpiryDelayUs is from the previous grant's lease end (its
	// OK read plus the lease) to reading the next grant.
	Expiries       int64    `json:"expiries,omitempty"`
	ExpiriesPerSec float64  `json:"expiries_per_sec,omitempty"`
	ExpiryDelayUs  *Latency `json:"expiry_delay_us,omitempty"`
	// Errors counts answers other than OK by status ("TIMEOUT", "NOTHELD",
	// "MOVED", "ERR <code>") and failures of the driver's own ("unanswered",
	// "disconnect", "badresponse", "unpaired", "dial", "stalled",
	// "query-mismatch").
	Errors map[string]int64 `json:"errors"`
	// TokenViolations counts grants whose token was not greater than the
	// previous grant's of the same key.
	TokenViolations int64 `json:"token_violations"`
	// PermitViolations (contended with Permits) counts grants that made
	// more holders of a key at once than its permits, as the client saw
	// them (from reading a grant to sending its release).
	PermitViolations int64 `json:"permit_violations,omitempty"`
	// Behind (open loop) is the number of cycles that were due by the end
	// and never started: the server did not keep up with Rate.
	Behind int64 `json:"behind,omitempty"`
	// Stop says what ended the measured phase: "time", "ops", "canceled",
	// "stalled" or "finished" (every connection ran out of work).
	Stop string `json:"stop,omitempty"`
	// Series is the run second by second, warm-up included: the rate the
	// progress line shows (Unit) and that second's p50 and p99 of the
	// latency named by PercentilesOf.
	Series []Point `json:"series,omitempty"`
	// Percentiles is the measured distribution of one latency (named by
	// PercentilesOf: "acquire", or "expiry_delay" for expiry), at fixed
	// percentiles from 0 (the minimum) to 100 (the maximum).
	Percentiles   []Percentile `json:"percentiles,omitempty"`
	PercentilesOf string       `json:"percentiles_of,omitempty"`
	// Unit names what Series counts per second: "cycles", "hand-offs",
	// "ops" or "expiries".
	Unit string `json:"unit,omitempty"`

	Held             int64   `json:"held,omitempty"`
	HoldSetupS       float64 `json:"hold_setup_s,omitempty"`
	AcquiresPerSec   float64 `json:"acquires_per_sec,omitempty"`
	IdleConns        int     `json:"idle_conns,omitempty"`
	Released         int64   `json:"released,omitempty"`
	RSSBefore        int64   `json:"rss_before,omitempty"`
	RSSAfter         int64   `json:"rss_after,omitempty"`      // after the hold
	RSSAfterIdle     int64   `json:"rss_after_idle,omitempty"` // after opening the idle connections
	BytesPerLock     float64 `json:"bytes_per_lock,omitempty"`
	BytesPerIdleConn float64 `json:"bytes_per_idle_conn,omitempty"`

	// Notes explain anything that cut the run short or made a figure
	// missing.
	Notes []string `json:"notes,omitempty"`
}

// FellBehind reports whether an open-loop run ended further behind its
// schedule than a transient explains: more than one cycle per connection
// (due in the instant the run stopped) and more than 100ms of the schedule.
// Such a run did not achieve its Rate: the server did not keep up.
func (r *Result) FellBehind() bool {
	return r.Rate > 0 && r.Behind > int64(r.Conns) && float64(r.Behind) > r.Rate/10
}

// NoteBehind records, for an open-loop run (Rate and Conns set), that
// behind cycles were due by the end and never started (the sum of the
// connections' Pacer.Behind at the moment the run stopped sending), and
// adds a note when the run fell behind. Every open-loop driver calls it, so
// that a rate that was not achieved reads the same for every system.
func (r *Result) NoteBehind(behind int64) {
	r.Behind = behind
	if r.FellBehind() {
		r.Notes = append(r.Notes, fmt.Sprintf("open loop fell behind: at the end %d cycles (%.0fms of the schedule) were due and not started; the server did not keep up with --rate",
			r.Behind, float64(r.Behind)/r.Rate*1e3))
	}
}

// RoundLatency is the latency of a batch run's rounds (Result.RoundUs).
type RoundLatency struct {
	Acquire Latency `json:"acquire"`
	// Release counts only rounds that released something: a round whose
	// acquires all failed sends no release batch.
	Release Latency `json:"release"`
}

// Point is one second of a run.
type Point struct {
	// T is the end of the second, from the start of the run (warm-up
	// included).
	T      float64 `json:"t"`
	PerSec float64 `json:"per_sec"`
	P50Us  int64   `json:"p50_us"`
	P99Us  int64   `json:"p99_us"`
	// Errors is the total so far.
	Errors int64 `json:"errors"`
	Warmup bool  `json:"warmup,omitempty"`
}

// Percentile is one point of a latency distribution: Q percent of the
// samples took at most Us microseconds.
type Percentile struct {
	Q  float64 `json:"q"`
	Us int64   `json:"us"`
}

// Failed reports whether the run saw the server break a promise the
// benchmark checks (token order, FIFO order, permits), as opposed to merely being
// slow or erroring.
func (r *Result) Failed() bool {
	return r.TokenViolations > 0 || r.FIFOViolations > 0 || r.PermitViolations > 0
}

// Faults lists the errors that make the run's figures untrustworthy, as
// "kind count" sorted by kind (the report's form): every kind of Errors
// but TIMEOUT and NOTHELD, which a workload can be answered by design (a
// wait that runs out, a lease that did). An ERR answer, a disconnect, an
// answer that never came, a MOVED (the run measured a node that does not
// lead) is one. Empty when there are none.
func (r *Result) Faults() []string {
	return r.errorList(func(kind string) bool {
		return kind != codec.StatusTimeout.String() && kind != codec.StatusNotHeld.String()
	})
}

// errorList is Errors as "kind count", sorted by kind, of the kinds keep
// accepts.
func (r *Result) errorList(keep func(kind string) bool) []string {
	kinds := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		if keep(k) {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	list := make([]string, len(kinds))
	for i, k := range kinds {
		list[i] = fmt.Sprintf("%s %d", k, r.Errors[k])
	}
	return list
}

func newResult(cfg *Config) *Result {
	res := &Result{
		Workload: cfg.Workload,
		Via:      cfg.Via,
		Owners:   cfg.Owners || cfg.Via == ViaClient,
		Permits:  cfg.Permits,
		Addrs:    cfg.Addrs,
		Conns:    cfg.Conns,
		Depth:    cfg.Depth,
		LeaseMs:  int64(cfg.leaseMs()),
		WaitMs:   cfg.waitMs(),
		Rate:     cfg.Rate,
		WarmupS:  cfg.Warmup.Seconds(),
		Errors:   map[string]int64{},
	}
	if cfg.Shape == ShapeBatch {
		res.Shape = ShapeBatch
	}
	return res
}

// WriteText writes a human summary of r.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	via := ""
	if r.Via == ViaClient {
		via = " through the Go client"
	}
	if r.Owners {
		via += ", with owners"
	}
	if r.Permits > 0 {
		via += fmt.Sprintf(", shared holds of %d permits per key", r.Permits)
	}
	if r.Shape == ShapeBatch {
		via += fmt.Sprintf(", in rounds of %d acquires then their releases", r.Depth)
	}
	fmt.Fprintf(&b, "workload %s: %d conns x depth %d against %s%s, lease %dms, wait %dms\n",
		r.Workload, r.Conns, r.Depth, strings.Join(r.Addrs, ","), via, r.LeaseMs, r.WaitMs)
	switch r.Workload {
	case WorkloadHold:
		if r.Held > 0 || r.HoldSetupS > 0 {
			fmt.Fprintf(&b, "held         %d locks, acquired in %.1fs (%.0f/s)\n", r.Held, r.HoldSetupS, r.AcquiresPerSec)
			writeLatency(&b, r)
		}
		if r.IdleConns > 0 {
			fmt.Fprintf(&b, "idle conns   %d\n", r.IdleConns)
		}
		if r.RSSBefore > 0 {
			fmt.Fprintf(&b, "server RSS   before %s, after hold %s", fmtBytes(r.RSSBefore), fmtBytes(r.RSSAfter))
			if r.RSSAfterIdle > 0 {
				fmt.Fprintf(&b, ", after idle conns %s", fmtBytes(r.RSSAfterIdle))
			}
			b.WriteString("\n")
		}
		if r.BytesPerLock != 0 {
			fmt.Fprintf(&b, "per lock     %.0f bytes\n", r.BytesPerLock)
		}
		if r.BytesPerIdleConn != 0 {
			fmt.Fprintf(&b, "per idle conn %.0f bytes\n", r.BytesPerIdleConn)
		}
		fmt.Fprintf(&b, "kept         %.1fs; released %d\n", r.DurationS, r.Released)
	default:
		fmt.Fprintf(&b, "measured     %.2fs after %.1fs warm-up (%s), %d keys\n", r.DurationS, r.WarmupS, stopText(r.Stop), r.Keys)
		if r.Rate > 0 {
			fmt.Fprintf(&b, "open loop    target %.0f cycles/s; latency from each cycle's intended start", r.Rate)
			if r.FellBehind() {
				fmt.Fprintf(&b, "; FELL BEHIND by %d cycles", r.Behind)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "cycles       %d (%.0f/s)\n", r.Cycles, r.CyclesPerSec)
		switch r.Workload {
		case WorkloadContended:
			fmt.Fprintf(&b, "hand-offs    %.0f/s\n", r.HandoffsPerSec)
		case WorkloadMixed:
			fmt.Fprintf(&b, "requests     %.0f/s answered OK (A, K, Q, R: a quarter each)\n", r.OpsPerSec)
		case WorkloadExpiry:
			fmt.Fprintf(&b, "expiries     %d (%.0f/s): grants of keys whose holder never released\n", r.Expiries, r.ExpiriesPerSec)
		}
		writeLatency(&b, r)
		switch {
		case r.TokenViolations > 0:
			fmt.Fprintf(&b, "tokens       %d VIOLATIONS: a key was granted a token not greater than before\n", r.TokenViolations)
		case r.Permits > 0 && r.Workload == WorkloadContended:
			b.WriteString("tokens       every grant's token new and greater than the key's tokens read before its acquire\n")
		default:
			b.WriteString("tokens       every grant's token greater than the key's previous one\n")
		}
		if r.PermitViolations > 0 {
			fmt.Fprintf(&b, "permits      %d VIOLATIONS: a key had more than %d holders at once\n", r.PermitViolations, r.Permits)
		} else if r.Permits > 0 && r.Workload == WorkloadContended {
			fmt.Fprintf(&b, "permits      never more than %d holders of a key at once\n", r.Permits)
		}
		if r.FIFOChecked > 0 || r.FIFOViolations > 0 {
			if r.FIFOViolations == 0 {
				fmt.Fprintf(&b, "FIFO         %d grants, none overtook an acquire sent more than %gms earlier\n", r.FIFOChecked, r.FIFOSlackMs)
			} else {
				fmt.Fprintf(&b, "FIFO         %d VIOLATIONS in %d grants: granted ahead of an acquire sent more than %gms earlier\n",
					r.FIFOViolations, r.FIFOChecked, r.FIFOSlackMs)
			}
		}
	}
	b.WriteString("errors       ")
	if len(r.Errors) == 0 {
		b.WriteString("none\n")
	} else {
		b.WriteString(strings.Join(r.errorList(func(string) bool { return true }), ", "))
		b.WriteString("\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note         %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// stopText says in words why a run ended.
func stopText(reason string) string {
	switch reason {
	case endTime:
		return "duration reached"
	case endOps:
		return "ops reached"
	case endCanceled:
		return "interrupted"
	case endStalled:
		return "server stopped answering"
	case endFinished:
		return "every connection failed or ran out of work"
	}
	return reason
}

func writeLatency(b *strings.Builder, r *Result) {
	fmt.Fprintf(b, "latency      %9s %9s %9s %9s %9s %9s\n", "p50", "p90", "p99", "p99.9", "max", "mean")
	row := func(name string, l Latency) {
		if l.Count == 0 {
			return
		}
		fmt.Fprintf(b, "  %-10s %9s %9s %9s %9s %9s %9s\n", name,
			fmtUs(l.P50), fmtUs(l.P90), fmtUs(l.P99), fmtUs(l.P999), fmtUs(l.Max), fmtUs(int64(l.Mean)))
	}
	row("acquire", r.AcquireUs)
	for _, o := range []struct {
		name string
		l    *Latency
	}{{"extend", r.ExtendUs}, {"query", r.QueryUs}, {"release", r.ReleaseUs}, {"hand-off", r.HandoffUs}, {"expiry", r.ExpiryDelayUs}} {
		if o.l != nil {
			row(o.name, *o.l)
		}
	}
	row("cycle", r.CycleUs)
	if r.RoundUs != nil {
		row("acq round", r.RoundUs.Acquire)
		row("rel round", r.RoundUs.Release)
	}
}

// fmtUs formats microseconds with a unit that keeps 3 significant digits.
func fmtUs(us int64) string {
	if us <= 0 {
		return "-"
	}
	d := time.Duration(us) * time.Microsecond
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dus", us)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(us)/1e3)
	default:
		return fmt.Sprintf("%.3gs", float64(us)/1e6)
	}
}

// fmtBytes formats a size in MiB, precisely enough to compare readings.
func fmtBytes(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
