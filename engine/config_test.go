package engine

import (
	"strings"
	"testing"
)

// A zero limit takes its default; a limit below 1 is refused in the words
// of its flag, and so is a MaxProposalsInFlight too large to allocate.
func TestLimitsDefaultsAndValidate(t *testing.T) {
	if got := (Limits{MaxConns: 7}).withDefaults(); got != withLimits(func(l *Limits) { l.MaxConns = 7 }) {
		t.Fatalf("withDefaults = %+v", got)
	}
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		limits Limits
		want   string
	}{
		{withLimits(func(l *Limits) { l.MaxWaitersPerKey = 0 }), "--max-waiters-per-key 0: must be at least 1"},
		{withLimits(func(l *Limits) { l.MaxUnsent = -1 }), "--max-unsent -1: must be at least 1"},
		{withLimits(func(l *Limits) { l.MaxProposalsInFlight = maxProposalsInFlight + 1 }), "--max-proposals-in-flight"},
	} {
		if err := tc.limits.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.limits, err, tc.want)
		}
	}
}
