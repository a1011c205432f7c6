package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// stage is one row of the table: the time from one event of a path to a
// later one.
type stage struct {
	name string
	span func(p *path) (from, to int64)
}

// stages are the table's rows, in the order a request meets them. The
// leader's own write and flush run beside the replication to the
// follower (dragonboat sends the entries before it saves them, the Raft
// thesis's 10.2.1), so the rows do not add up: the total and the
// timeline say what the request waited for.
var stages = []stage{
	{"read and parsed, to proposed", func(p *path) (int64, int64) { return p.read, p.propose }},
	{"proposed, to the leader's step saving it", func(p *path) (int64, int64) { return p.propose, p.lSave }},
	{"leader's log write", func(p *path) (int64, int64) { return p.lSave, p.lWrite }},
	{"leader's flush (fdatasync)", func(p *path) (int64, int64) { return p.lWrite, p.lSync }},
	{"proposed, to sent to the follower", func(p *path) (int64, int64) { return p.propose, p.sent }},
	{"follower's receipt", func(p *path) (int64, int64) { return p.sent, p.recv }},
	{"received, to the follower's step saving it", func(p *path) (int64, int64) { return p.recv, p.fSave }},
	{"follower's log write", func(p *path) (int64, int64) { return p.fSave, p.fWrite }},
	{"follower's flush (fdatasync)", func(p *path) (int64, int64) { return p.fWrite, p.fSync }},
	{"flushed, to the follower's ack sent", func(p *path) (int64, int64) { return p.fSync, p.ackSent }},
	{"ack's receipt", func(p *path) (int64, int64) { return p.ackSent, p.ackRecv }},
	{"commit (from the ack, or the leader's flush if later)", func(p *path) (int64, int64) {
		if p.ackRecv == 0 || p.lSync == 0 {
			return 0, p.commit
		}
		return max(p.ackRecv, p.lSync), p.commit
	}},
	{"commit, to the state machine's Update (dragonboat's apply worker)", func(p *path) (int64, int64) { return p.commit, p.update }},
	{"Update, to applied to the table", func(p *path) (int64, int64) { return p.update, p.apply }},
	{"applied, to the answer written", func(p *path) (int64, int64) { return p.apply, p.answer }},
	{"total: read to answer written", func(p *path) (int64, int64) { return p.read, p.answer }},
}

// timeline is the second table: when each event happens, counted from
// the read, so that what overlaps shows.
var timeline = []stage{
	{"proposed", func(p *path) (int64, int64) { return p.read, p.propose }},
	{"sent to the follower", func(p *path) (int64, int64) { return p.read, p.sent }},
	{"received by the follower", func(p *path) (int64, int64) { return p.read, p.recv }},
	{"leader's step saving it", func(p *path) (int64, int64) { return p.read, p.lSave }},
	{"leader's flush done", func(p *path) (int64, int64) { return p.read, p.lSync }},
	{"follower's flush done", func(p *path) (int64, int64) { return p.read, p.fSync }},
	{"ack received", func(p *path) (int64, int64) { return p.read, p.ackRecv }},
	{"committed", func(p *path) (int64, int64) { return p.read, p.commit }},
	{"Update begun", func(p *path) (int64, int64) { return p.read, p.update }},
	{"applied", func(p *path) (int64, int64) { return p.read, p.apply }},
	{"answer written", func(p *path) (int64, int64) { return p.read, p.answer }},
}

// quantiles are a stage's p50 and p90 in one round, in nanoseconds, and
// how many paths had both its ends.
type quantiles struct {
	p50, p90 float64
	n        int
}

// percentile is the nearest-rank q-quantile of sorted.
func percentile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)])
}

// measure is the quantiles of st over paths whose two ends are known.
func measure(st stage, paths []path) quantiles {
	var d []int64
	for i := range paths {
		from, to := st.span(&paths[i])
		if from != 0 && to != 0 {
			d = append(d, to-from)
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return quantiles{p50: percentile(d, 0.5), p90: percentile(d, 0.9), n: len(d)}
}

// median of xs, NaNs left out (NaN if nothing is left). With an even
// count, the mean of the middle two.
func median(xs []float64) float64 {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// column is one workload's rounds, joined.
type column struct {
	name   string
	rounds []joined
}

// summary is a stage's medians over a column's rounds of the rounds'
// p50 and p90, and the smallest number of paths a round had for it.
type summary struct {
	p50, p90 float64
	minN     int
}

func summarize(st stage, c column) summary {
	var p50s, p90s []float64
	s := summary{minN: math.MaxInt}
	for _, r := range c.rounds {
		q := measure(st, r.paths)
		p50s, p90s = append(p50s, q.p50), append(p90s, q.p90)
		s.minN = min(s.minN, q.n)
	}
	s.p50, s.p90 = median(p50s), median(p90s)
	return s
}

// us formats nanoseconds as whole microseconds.
func us(ns float64) string {
	if math.IsNaN(ns) {
		return "-"
	}
	return fmt.Sprintf("%.0f", ns/1000)
}

// writeTable writes one markdown table of rows, with a p50 and a p90
// column (µs, medians over the rounds) per column of cols.
func writeTable(w io.Writer, title string, rows []stage, cols []column) {
	var head, rule strings.Builder
	head.WriteString("| " + title + " |")
	rule.WriteString("|---|")
	for _, c := range cols {
		fmt.Fprintf(&head, " %s p50 | p90 |", c.name)
		rule.WriteString("---:|---:|")
	}
	fmt.Fprintln(w, head.String())
	fmt.Fprintln(w, rule.String())
	for _, st := range rows {
		line := "| " + st.name + " |"
		for _, c := range cols {
			s := summarize(st, c)
			line += " " + us(s.p50) + " | " + us(s.p90) + " |"
		}
		fmt.Fprintln(w, line)
	}
}

// writeReport writes the stage table, the timeline and, per column, what
// each round held.
func writeReport(w io.Writer, cols []column) {
	writeTable(w, "stage (µs)", stages, cols)
	fmt.Fprintln(w)
	writeTable(w, "time since the read (µs)", timeline, cols)
	fmt.Fprintln(w)
	for _, c := range cols {
		for i, r := range c.rounds {
			last := 0
			for _, p := range r.paths {
				if p.lSync != 0 && p.lSync > p.ackRecv {
					last++
				}
			}
			fmt.Fprintf(w, "%s round %d: %d entries traced (%d without a leader or an ack to pair), leader's flush ended after the first ack in %d; total p50 %s µs\n",
				c.name, i+1, len(r.paths), r.incomplete, last, us(measure(stages[len(stages)-1], r.paths).p50))
		}
	}
}

// writePaths writes each path on a line: its index and follower, then
// the time since the read of each event of timeline, in µs.
func writePaths(w io.Writer, j joined) {
	head := "index follower"
	for _, st := range timeline {
		head += " | " + st.name
	}
	fmt.Fprintln(w, head)
	for i := range j.paths {
		p := &j.paths[i]
		line := fmt.Sprintf("%d %d", p.index, p.follower)
		for _, st := range timeline {
			from, to := st.span(p)
			d := math.NaN()
			if from != 0 && to != 0 {
				d = float64(to - from)
			}
			line += " " + us(d)
		}
		fmt.Fprintln(w, line)
	}
}
