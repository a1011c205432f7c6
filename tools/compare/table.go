package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/baton-dev/baton/bench"
)

// entry is one measurement of a run: a line of the manifest run.sh writes,
// "section<TAB>system<TAB>result.json", and the result it names.
type entry struct {
	section, system string
	res             *bench.Result
}

// readManifest loads every result the manifest lists; a missing or broken
// result (a measurement that failed) becomes an entry without a result, so
// the table still shows the row.
func readManifest(path string) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var es []entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Split(line, "\t")
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s: want section, system and file separated by tabs: %q", path, line)
		}
		e := entry{section: fs[0], system: fs[1]}
		file := fs[2]
		if !filepath.IsAbs(file) {
			file = filepath.Join(filepath.Dir(path), file)
		}
		if data, err := os.ReadFile(file); err == nil {
			var r bench.Result
			if json.Unmarshal(data, &r) == nil {
				e.res = &r
			}
		}
		es = append(es, e)
	}
	return es, sc.Err()
}

// rate is the figure a row is ranked by: hand-offs per second for the
// contended workload, cycles per second otherwise (the same number; the
// name says what it means).
func rate(r *bench.Result) float64 {
	if r.HandoffsPerSec > 0 {
		return r.HandoffsPerSec
	}
	return r.CyclesPerSec
}

// writeTable prints a Markdown table per section, then, within each
// section, every baton row's ratio to every other system's row: the
// ratios come from the same run, on the same machine. A system measured in
// several rounds shows its median round (medianRounds). A section measured
// at a fixed rate (open loop) gets a table of its own kind, see
// writeRateSection.
func writeTable(w io.Writer, es []entry) error {
	var b strings.Builder
	es, spread := medianRounds(es)
	var sections []string
	bySection := map[string][]entry{}
	for _, e := range es {
		if _, ok := bySection[e.section]; !ok {
			sections = append(sections, e.section)
		}
		bySection[e.section] = append(bySection[e.section], e)
	}
	for _, s := range sections {
		rows := bySection[s]
		fmt.Fprintf(&b, "\n### %s\n\n", s)
		var ratios []string
		open := isRateSection(rows)
		if open {
			ratios = writeRateSection(&b, rows)
		} else {
			ratios = writeSaturationSection(&b, rows)
		}
		if note := roundsNote(s, rows, spread, open); note != "" {
			fmt.Fprintf(&b, "\n%s\n", note)
		}
		if len(ratios) > 0 {
			b.WriteString("\n")
			for _, l := range ratios {
				fmt.Fprintf(&b, "- %s\n", l)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// isRateSection reports whether a section was measured open loop: every
// system at the same fixed rate, so that what tells them apart is latency,
// not throughput.
func isRateSection(rows []entry) bool {
	for _, e := range rows {
		if e.res != nil && e.res.Rate > 0 {
			return true
		}
	}
	return false
}

// ratioPairs calls f for every baton row and every other system's row of a
// section that both have a result.
func ratioPairs(rows []entry, f func(baton, other *entry)) {
	for i := range rows {
		a := &rows[i]
		if !strings.HasPrefix(a.system, "baton") || a.res == nil {
			continue
		}
		for j := range rows {
			o := &rows[j]
			if strings.HasPrefix(o.system, "baton") || o.res == nil {
				continue
			}
			f(a, o)
		}
	}
}

// writeSaturationSection writes the rows of a closed-loop section (every
// system as fast as it goes) and returns the ratios: rate first, since
// throughput at saturation is what the section measures.
func writeSaturationSection(b *strings.Builder, rows []entry) []string {
	b.WriteString("| system | conns x depth | per second | acquire p50 | acquire p99 | cycle p50 | errors |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, e := range rows {
		if e.res == nil {
			fmt.Fprintf(b, "| %s | | failed: no result | | | | |\n", e.system)
			continue
		}
		r := e.res
		fmt.Fprintf(b, "| %s | %d x %d | %s | %s | %s | %s | %s |\n", e.system, r.Conns, r.Depth,
			fmtRate(rate(r)), fmtUs(r.AcquireUs.P50), fmtUs(r.AcquireUs.P99), fmtUs(r.CycleUs.P50), fmtErrors(r.Errors))
	}
	var ratios []string
	ratioPairs(rows, func(a, o *entry) {
		if rate(a.res) == 0 || rate(o.res) == 0 {
			return
		}
		line := fmt.Sprintf("%s / %s: rate %s", a.system, o.system, fmtRatio(rate(a.res)/rate(o.res)))
		if a.res.AcquireUs.P50 > 0 && o.res.AcquireUs.P50 > 0 {
			line += fmt.Sprintf(", acquire p50 %s (below 1: baton is faster)", fmtRatio(float64(a.res.AcquireUs.P50)/float64(o.res.AcquireUs.P50)))
		}
		ratios = append(ratios, line)
	})
	return ratios
}

// keptRateShare is the share of the target rate an open-loop run must
// complete to count as having kept it: a few cycles are always still in
// flight when the measurement ends, so a run that kept up falls a little
// short of the exact target.
const keptRateShare = 0.9

// keptRate says whether an open-loop run achieved its target: it did not
// fall behind its schedule (bench.Result.FellBehind, as baton bench judges
// it) and it completed nearly as many cycles as it was asked to start (a
// run whose cycles fail starts them on time but does not achieve them).
func keptRate(r *bench.Result) (bool, string) {
	switch {
	case r.FellBehind():
		return false, fmt.Sprintf("no: %s cycles behind", fmtRate(float64(r.Behind)))
	case r.CyclesPerSec < keptRateShare*r.Rate:
		return false, fmt.Sprintf("no: %.0f%% done", 100*r.CyclesPerSec/r.Rate)
	}
	return true, "yes"
}

// writeRateSection writes the rows of an open-loop section (every system
// asked for the same cycles per second) and returns the ratios. At a
// moderate fixed rate every system should keep up, so the figures that
// tell them apart are the acquire latencies, counted from each cycle's
// intended start: the ratios are of p50 and p99, and a system that did not
// keep the rate is named, since its latencies then include the queue its
// schedule built up.
func writeRateSection(b *strings.Builder, rows []entry) []string {
	b.WriteString("| system | conns x depth | target/s | done/s | kept the rate | acquire p50 | acquire p99 | cycle p50 | errors |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, e := range rows {
		if e.res == nil {
			fmt.Fprintf(b, "| %s | | | failed: no result | | | | | |\n", e.system)
			continue
		}
		r := e.res
		target, kept := "closed loop", "-"
		if r.Rate > 0 {
			target = fmtRate(r.Rate)
			_, kept = keptRate(r)
		}
		fmt.Fprintf(b, "| %s | %d x %d | %s | %s | %s | %s | %s | %s | %s |\n", e.system, r.Conns, r.Depth,
			target, fmtRate(rate(r)), kept, fmtUs(r.AcquireUs.P50), fmtUs(r.AcquireUs.P99), fmtUs(r.CycleUs.P50), fmtErrors(r.Errors))
	}
	var ratios []string
	ratioPairs(rows, func(a, o *entry) {
		if a.res.AcquireUs.P50 <= 0 || o.res.AcquireUs.P50 <= 0 {
			return
		}
		line := fmt.Sprintf("%s / %s: acquire p50 %s", a.system, o.system, fmtRatio(float64(a.res.AcquireUs.P50)/float64(o.res.AcquireUs.P50)))
		if a.res.AcquireUs.P99 > 0 && o.res.AcquireUs.P99 > 0 {
			line += fmt.Sprintf(", p99 %s", fmtRatio(float64(a.res.AcquireUs.P99)/float64(o.res.AcquireUs.P99)))
		}
		line += " (below 1: baton is faster)"
		var missed []string
		for _, e := range []*entry{a, o} {
			if ok, _ := keptRate(e.res); e.res.Rate > 0 && !ok {
				missed = append(missed, e.system)
			}
		}
		if len(missed) > 0 {
			line += "; did not keep the rate: " + strings.Join(missed, ", ")
		}
		ratios = append(ratios, line)
	})
	return ratios
}

func fmtRate(v float64) string {
	// Thousands separators: these numbers are read by people.
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// fmtRatio formats a ratio with two decimals, or, below 0.1, two
// significant digits, so that a system a hundred times faster reads 0.01x
// or 0.0033x rather than 0.00x.
func fmtRatio(v float64) string {
	if v < 0.1 {
		return fmt.Sprintf("%.2gx", v)
	}
	return fmt.Sprintf("%.2fx", v)
}

func fmtUs(us int64) string {
	switch {
	case us <= 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%d µs", us)
	case us < 1_000_000:
		return fmt.Sprintf("%.3g ms", float64(us)/1e3)
	default:
		return fmt.Sprintf("%.3g s", float64(us)/1e6)
	}
}

func fmtErrors(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKinds(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
