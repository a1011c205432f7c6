package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// Plot geometry, in SVG user units (pixels). Two panels side by side.
const (
	plotPanelW = 440
	plotPanelH = 300
	plotLeft   = 70 // room for the y labels
	plotTop    = 50 // room for the title
	plotBottom = 50 // room for the x labels
	plotGap    = 40
	plotRight  = 40 // room for the last x label
	plotWidth  = 2*(plotLeft+plotPanelW) + plotGap + plotRight
	plotHeight = plotTop + plotPanelH + plotBottom
)

// latencyTicks are the percentiles labelled on the distribution's x axis.
var latencyTicks = []float64{0, 90, 99, 99.9, 99.99, 99.999}

// WritePlot draws r as an SVG image: on the left what the run did each
// second (Series: the rate of Unit), with the warm-up shaded; on the right
// the measured latency distribution (Percentiles) against the percentile on
// a log scale, the usual HdrHistogram view where the tail gets as much room
// as the median. Only the standard library is used, and the image has no
// script or external reference, so it can be opened anywhere.
func WritePlot(w io.Writer, r *Result) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, plotHeight, plotWidth, plotHeight)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	title := fmt.Sprintf("baton bench %s: %d conns x depth %d", r.Workload, r.Conns, r.Depth)
	if r.Rate > 0 {
		title += fmt.Sprintf(", open loop at %.0f cycles/s", r.Rate)
	}
	plotText(&b, plotWidth/2, 20, "middle", 14, title)

	unit := r.Unit
	if unit == "" {
		unit = "cycles"
	}
	plotThroughput(&b, plotLeft, r.Series, unit)
	plotLatency(&b, 2*plotLeft+plotPanelW+plotGap, r.Percentiles, r.PercentilesOf)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// plotThroughput draws the per-second series in the panel whose plot area
// starts at x0.
func plotThroughput(b *bytes.Buffer, x0 int, series []Point, unit string) {
	plotText(b, x0+plotPanelW/2, plotTop-12, "middle", 13, unit+" per second")
	tMax, yMax := 1.0, 0.0
	for _, p := range series {
		tMax = math.Max(tMax, p.T)
		yMax = math.Max(yMax, p.PerSec)
	}
	yStep := niceStep(yMax / 5)
	yTop := math.Max(yStep, math.Ceil(yMax/yStep)*yStep)
	xStep := niceStep(tMax / 8)
	px := func(t float64) float64 { return float64(x0) + t/tMax*plotPanelW }
	py := func(v float64) float64 { return plotTop + plotPanelH - v/yTop*plotPanelH }

	// Warm-up seconds, shaded: they are not in the summary.
	warmEnd := 0.0
	for _, p := range series {
		if p.Warmup {
			warmEnd = p.T
		}
	}
	if warmEnd > 0 {
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#eeeeee"/>`+"\n", px(0), plotTop, px(warmEnd)-px(0), plotPanelH)
		plotText(b, int(px(warmEnd/2)), plotTop+14, "middle", 10, "warm-up")
	}
	for v := 0.0; v <= yTop*1.0001; v += yStep {
		plotHLine(b, x0, py(v))
		plotText(b, x0-6, int(py(v))+4, "end", 11, fmtCount(v))
	}
	for t := 0.0; t <= tMax*1.0001; t += xStep {
		plotText(b, int(px(t)), plotTop+plotPanelH+16, "middle", 11, fmt.Sprintf("%gs", t))
	}
	plotText(b, x0+plotPanelW/2, plotTop+plotPanelH+36, "middle", 12, "time since start")
	plotFrame(b, x0)
	if len(series) == 0 {
		plotText(b, x0+plotPanelW/2, plotTop+plotPanelH/2, "middle", 12, "no per-second figures")
		return
	}
	// Steps: each point is the rate over the interval that ends at its T.
	var pts []string
	from := 0.0
	for _, p := range series {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", px(from), py(p.PerSec), px(p.T), py(p.PerSec)))
		from = p.T
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="%s"/>`+"\n", strings.Join(pts, " "))
}

// plotLatency draws the latency distribution in the panel whose plot area
// starts at x0.
func plotLatency(b *bytes.Buffer, x0 int, ps []Percentile, of string) {
	if of == "" {
		of = "acquire"
	}
	title := strings.ReplaceAll(of, "_", " ") + " latency by percentile"
	if len(ps) > 0 {
		title += " (max " + fmtUs(ps[len(ps)-1].Us) + ")"
	}
	plotText(b, x0+plotPanelW/2, plotTop-12, "middle", 13, title)
	// x is the number of nines: percentile q sits at log10(100/(100-q)).
	nines := func(q float64) float64 { return math.Log10(100 / (100 - q)) }
	xMax := nines(latencyTicks[len(latencyTicks)-1])
	px := func(q float64) float64 { return float64(x0) + math.Min(nines(q), xMax)/xMax*plotPanelW }
	var yMax float64
	var pts []string
	for _, p := range ps {
		if p.Q >= 100 {
			continue // the maximum is in the title: it has no place on a log scale
		}
		yMax = math.Max(yMax, float64(p.Us))
	}
	yStep := niceStep(yMax / 1e3 / 5) // in ms
	yTop := math.Max(yStep, math.Ceil(yMax/1e3/yStep)*yStep)
	py := func(us float64) float64 { return plotTop + plotPanelH - us/1e3/yTop*plotPanelH }
	for v := 0.0; v <= yTop*1.0001; v += yStep {
		plotHLine(b, x0, py(v*1e3))
		plotText(b, x0-6, int(py(v*1e3))+4, "end", 11, fmt.Sprintf("%gms", roundSig(v)))
	}
	for _, q := range latencyTicks {
		plotText(b, int(px(q)), plotTop+plotPanelH+16, "middle", 11, fmt.Sprintf("p%g", q))
	}
	plotText(b, x0+plotPanelW/2, plotTop+plotPanelH+36, "middle", 12, "percentile (log scale of nines)")
	plotFrame(b, x0)
	for _, p := range ps {
		if p.Q < 100 {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.Q), py(float64(p.Us))))
		}
	}
	if len(pts) == 0 {
		plotText(b, x0+plotPanelW/2, plotTop+plotPanelH/2, "middle", 12, "no latency measured")
		return
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="#d62728" stroke-width="2" points="%s"/>`+"\n", strings.Join(pts, " "))
}

func plotFrame(b *bytes.Buffer, x0 int) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>`+"\n", x0, plotTop, plotPanelW, plotPanelH)
}

func plotHLine(b *bytes.Buffer, x0 int, y float64) {
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#dddddd"/>`+"\n", x0, y, x0+plotPanelW, y)
}

// plotText writes an escaped text element.
func plotText(b *bytes.Buffer, x, y int, anchor string, size int, s string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="%s" font-size="%d">`, x, y, anchor, size)
	_ = xml.EscapeText(b, []byte(s)) // a bytes.Buffer does not fail
	b.WriteString("</text>\n")
}

// niceStep rounds a raw axis step up to 1, 2 or 5 times a power of ten, so
// that tick labels are round numbers.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*pow {
			return m * pow
		}
	}
	return 10 * pow
}

// roundSig drops the float noise of repeated additions from a tick value.
func roundSig(v float64) float64 {
	return math.Round(v*1e6) / 1e6
}

// fmtCount formats an axis value compactly: 1500 as 1.5k, 2e6 as 2M.
func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", roundSig(v/1e6))
	case v >= 1e3:
		return fmt.Sprintf("%gk", roundSig(v/1e3))
	default:
		return fmt.Sprintf("%g", roundSig(v))
	}
}
