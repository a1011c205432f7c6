package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// parseSVG checks that data is well-formed XML with an svg root, and counts
// its elements by name.
func parseSVG(t *testing.T, data []byte) map[string]int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	names := map[string]int{}
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not valid XML: %v\n%s", err, data)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q", se.Name.Space)
				}
			}
			names[se.Name.Local]++
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return names
}

func TestWritePlot(t *testing.T) {
	full := &Result{Workload: WorkloadContended, Conns: 16, Depth: 1, Unit: "hand-offs", Rate: 500,
		PercentilesOf: "acquire"}
	for i := 1; i <= 12; i++ {
		full.Series = append(full.Series, Point{T: float64(i), PerSec: float64(3000 + 100*i), P50Us: 900, P99Us: 4000, Warmup: i == 1})
	}
	h := newHistogram()
	for v := int64(100); v <= 20000; v += 7 {
		_ = h.RecordValue(v)
	}
	full.Percentiles = percentiles(h)
	for _, c := range []struct {
		name      string
		r         *Result
		polylines int
		text      string
	}{
		{"full", full, 2, "hand-offs per second"},
		{"empty", &Result{Workload: "a<b&c"}, 0, "no latency measured"},
		{"one second", &Result{Workload: WorkloadUncontended, Series: []Point{{T: 1, PerSec: 5}}}, 1, "cycles per second"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WritePlot(&b, c.r); err != nil {
				t.Fatal(err)
			}
			names := parseSVG(t, b.Bytes())
			if names["polyline"] != c.polylines || names["text"] < 10 {
				t.Errorf("elements %v, want %d polylines", names, c.polylines)
			}
			if !strings.Contains(b.String(), c.text) {
				t.Errorf("no %q in\n%s", c.text, b.String())
			}
			if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
				t.Errorf("a coordinate is not a number:\n%s", b.String())
			}
		})
	}
}

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0: 1, -3: 1, 0.03: 0.05, 1: 1, 1.1: 2, 3: 5, 7: 10, 140: 200, 52000: 1e5} {
		if got := niceStep(raw); got < want*0.999 || got > want*1.001 {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0", 500: "500", 1500: "1.5k", 2e6: "2M"} {
		if got := fmtCount(v); got != want {
			t.Errorf("fmtCount(%v) = %q, want %q", v, got, want)
		}
	}
}
