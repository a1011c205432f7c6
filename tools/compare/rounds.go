package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A run with ROUNDS > 1 measures every system of a section several times,
// alternately (run.sh), so its manifest has several lines per section and
// system. The table shows, for each, the median round: the one whose
// figure is the median of the rounds' (the rate of a closed-loop section,
// the acquire p99 of a fixed-rate one), so that every figure in a row
// comes from one real measurement, and it says the range.

// rounds is what a row's other rounds were: their figures, sorted, and how
// many gave no result.
type rounds struct {
	figures []float64
	failed  int
}

// roundFigure is the figure the median round is chosen by.
func roundFigure(e entry, openLoop bool) float64 {
	if openLoop {
		return float64(e.res.AcquireUs.P99)
	}
	return rate(e.res)
}

// medianRounds folds the entries of each section and system into one, the
// median round (of an even count, the lower of the two middle ones), in the
// order each was first listed, and returns the rounds of every folded row
// that had more than one.
func medianRounds(es []entry) ([]entry, map[[2]string]rounds) {
	type key = [2]string
	var order []key
	all := map[key][]entry{}
	openLoop := map[string]bool{}
	for _, e := range es {
		k := key{e.section, e.system}
		if _, ok := all[k]; !ok {
			order = append(order, k)
		}
		all[k] = append(all[k], e)
		if e.res != nil && e.res.Rate > 0 {
			openLoop[e.section] = true
		}
	}
	var folded []entry
	spread := map[key]rounds{}
	for _, k := range order {
		list := all[k]
		if len(list) == 1 {
			folded = append(folded, list[0])
			continue
		}
		var done []entry
		for _, e := range list {
			if e.res != nil {
				done = append(done, e)
			}
		}
		rs := rounds{failed: len(list) - len(done)}
		if len(done) == 0 {
			folded = append(folded, list[0])
			spread[k] = rs
			continue
		}
		open := openLoop[k[0]]
		slices.SortStableFunc(done, func(a, b entry) int {
			return cmp.Compare(roundFigure(a, open), roundFigure(b, open))
		})
		for _, e := range done {
			rs.figures = append(rs.figures, roundFigure(e, open))
		}
		folded = append(folded, done[(len(done)-1)/2])
		spread[k] = rs
	}
	return folded, spread
}

// roundsNote is the line under a section's table that says its rows are
// median rounds and how far the rounds spread, or "" for a section
// measured once.
func roundsNote(section string, rows []entry, spread map[[2]string]rounds, openLoop bool) string {
	var parts []string
	n := 0
	for _, e := range rows {
		rs, ok := spread[[2]string{section, e.system}]
		if !ok {
			continue
		}
		n = max(n, len(rs.figures)+rs.failed)
		fmtFigure := fmtRate
		if openLoop {
			fmtFigure = func(v float64) string { return fmtUs(int64(v)) }
		}
		var p string
		if len(rs.figures) > 0 {
			p = fmt.Sprintf("%s %s to %s", e.system, fmtFigure(rs.figures[0]), fmtFigure(rs.figures[len(rs.figures)-1]))
		} else {
			p = e.system + " no result"
		}
		if rs.failed > 0 {
			p += fmt.Sprintf(" (%d failed)", rs.failed)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	by := "rate"
	if openLoop {
		by = "acquire p99"
	}
	return fmt.Sprintf("Median of %d rounds by %s (each row is its median round); the rounds ranged: %s.",
		n, by, strings.Join(parts, "; "))
}
