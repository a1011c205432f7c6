package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Result is the outcome of a run. Latencies are in microseconds, sizes in
// bytes. Fields after TokenViolations belong to the hold workload.
type Result struct {
	Workload string   `json:"workload"`
	Addrs    []string `json:"addrs"`
	Conns    int      `json:"conns"`
	Depth    int      `json:"depth"`
	// Keys is the number of distinct keys the uncontended cycles rotate over.
	Keys    int   `json:"keys,omitempty"`
	LeaseMs int64 `json:"lease_ms"`
	WaitMs  int64 `json:"wait_ms"`
	// WarmupS and DurationS: the measured span excludes the warm-up. For
	// hold, DurationS is how long the locks were kept.
	WarmupS      float64 `json:"warmup_s"`
	DurationS    float64 `json:"duration_s"`
	Cycles       int64   `json:"cycles"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
	// AcquireUs is from sending A to its OK; CycleUs from sending A to the
	// OK of the R that followed.
	AcquireUs Latency `json:"acquire_us"`
	CycleUs   Latency `json:"cycle_us"`
	// Errors counts answers other than OK by status ("TIMEOUT", "NOTHELD",
	// "MOVED", "ERR <code>") and failures of the driver's own ("unanswered",
	// "disconnect", "badresponse", "unpaired", "dial", "stalled").
	Errors map[string]int64 `json:"errors"`
	// TokenViolations counts grants whose token was not greater than the
	// previous grant's of the same key.
	TokenViolations int64 `json:"token_violations"`
	// Stop says what ended the measured phase: "time", "ops", "canceled",
	// "stalled" or "finished" (every connection ran out of work).
	Stop string `json:"stop,omitempty"`

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

func newResult(cfg *Config) *Result {
	return &Result{
		Workload: cfg.Workload,
		Addrs:    cfg.Addrs,
		Conns:    cfg.Conns,
		Depth:    cfg.Depth,
		LeaseMs:  int64(cfg.leaseMs()),
		WaitMs:   cfg.waitMs(),
		WarmupS:  cfg.Warmup.Seconds(),
		Errors:   map[string]int64{},
	}
}

// WriteText writes a human summary of r.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "workload %s: %d conns x depth %d against %s, lease %dms, wait %dms\n",
		r.Workload, r.Conns, r.Depth, strings.Join(r.Addrs, ","), r.LeaseMs, r.WaitMs)
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
		fmt.Fprintf(&b, "cycles       %d (%.0f/s)\n", r.Cycles, r.CyclesPerSec)
		writeLatency(&b, r)
		if r.TokenViolations == 0 {
			b.WriteString("tokens       every grant's token greater than the key's previous one\n")
		} else {
			fmt.Fprintf(&b, "tokens       %d VIOLATIONS: a key was granted a token not greater than before\n", r.TokenViolations)
		}
	}
	b.WriteString("errors       ")
	if len(r.Errors) == 0 {
		b.WriteString("none\n")
	} else {
		kinds := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for i, k := range kinds {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", k, r.Errors[k])
		}
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
	row("cycle", r.CycleUs)
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
