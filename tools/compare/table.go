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
// ratios come from the same run, on the same machine.
func writeTable(w io.Writer, es []entry) error {
	var b strings.Builder
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
		b.WriteString("| system | conns x depth | per second | acquire p50 | acquire p99 | cycle p50 | errors |\n")
		b.WriteString("|---|---|---|---|---|---|---|\n")
		for _, e := range rows {
			if e.res == nil {
				fmt.Fprintf(&b, "| %s | | failed: no result | | | | |\n", e.system)
				continue
			}
			r := e.res
			fmt.Fprintf(&b, "| %s | %d x %d | %s | %s | %s | %s | %s |\n", e.system, r.Conns, r.Depth,
				fmtRate(rate(r)), fmtUs(r.AcquireUs.P50), fmtUs(r.AcquireUs.P99), fmtUs(r.CycleUs.P50), fmtErrors(r.Errors))
		}
		var ratios []string
		for _, a := range rows {
			if !strings.HasPrefix(a.system, "baton") || a.res == nil || rate(a.res) == 0 {
				continue
			}
			for _, o := range rows {
				if strings.HasPrefix(o.system, "baton") || o.res == nil || rate(o.res) == 0 {
					continue
				}
				line := fmt.Sprintf("%s / %s: rate %.2fx", a.system, o.system, rate(a.res)/rate(o.res))
				if a.res.AcquireUs.P50 > 0 && o.res.AcquireUs.P50 > 0 {
					line += fmt.Sprintf(", acquire p50 %.2fx (below 1: baton is faster)", float64(a.res.AcquireUs.P50)/float64(o.res.AcquireUs.P50))
				}
				ratios = append(ratios, line)
			}
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
