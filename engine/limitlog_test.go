package engine

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A limit hit many times makes one line with the count, then at most one
// line per limitLogEvery; what is left is logged at the end.
func TestLimitLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	l := newLimitLog(DefaultLimits(), slog.New(slog.NewJSONHandler(&buf, nil)))
	lines := func() []map[string]any {
		t.Helper()
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("not JSON: %q", line)
			}
			out = append(out, m)
		}
		buf.Reset()
		return out
	}
	t0 := time.Now()
	for range 1000 {
		l.hit(limitWaitersPerKey)
	}
	l.hitBy(limitConns, "127.0.0.1:5000")
	l.flush(t0, false)
	got := lines()
	if len(got) != 2 {
		t.Fatalf("%d lines, want one per limit hit: %v", len(got), got)
	}
	for _, m := range got {
		switch m["limit"] {
		case "max-waiters-per-key":
			if m["count"] != 1000.0 || m["value"] != 10000.0 || m["msg"] != "limit hit" {
				t.Errorf("line %v", m)
			}
		case "max-conns":
			if m["count"] != 1.0 || m["last_remote"] != "127.0.0.1:5000" {
				t.Errorf("line %v", m)
			}
		default:
			t.Errorf("line about %v", m["limit"])
		}
	}

	l.hit(limitWaitersPerKey)
	l.flush(t0.Add(limitLogEvery-time.Millisecond), false)
	if got := lines(); len(got) != 0 {
		t.Fatalf("a second line within %v: %v", limitLogEvery, got)
	}
	l.hit(limitWaitersPerKey)
	l.flush(t0.Add(limitLogEvery), false)
	if got := lines(); len(got) != 1 || got[0]["count"] != 2.0 {
		t.Fatalf("after %v: %v, want one line counting 2", limitLogEvery, got)
	}
	l.hit(limitWaitersPerKey)
	l.flush(t0.Add(limitLogEvery+time.Second), true)
	if got := lines(); len(got) != 1 || got[0]["count"] != 1.0 {
		t.Fatalf("final flush: %v, want the last hit", got)
	}
	l.flush(t0.Add(time.Hour), true)
	if got := lines(); len(got) != 0 {
		t.Fatalf("nothing hit, yet %v", got)
	}
}
