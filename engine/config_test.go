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

// --raft-log takes the two stores batond has; baton's pebble store, which
// it no longer has, is refused with a line naming them.
func TestCheckRaftLog(t *testing.T) {
	for _, ok := range []string{"", RaftLogSeglog, RaftLogDragonboat} {
		if err := CheckRaftLog(ok); err != nil {
			t.Errorf("CheckRaftLog(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"baton", "tan", "Seglog"} {
		err := CheckRaftLog(bad)
		if err == nil {
			t.Errorf("CheckRaftLog(%q) accepted it", bad)
			continue
		}
		for _, w := range []string{"--raft-log", "seglog", "dragonboat"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CheckRaftLog(%q): %q does not say %q", bad, err, w)
			}
		}
		cfg := Config{ID: 1, Peers: []Peer{{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}}, DataDir: t.TempDir(), RaftLog: bad}
		if err := cfg.validate(); err == nil || err.Error() != CheckRaftLog(bad).Error() {
			t.Errorf("validate with --raft-log %q: %v; want %v", bad, err, CheckRaftLog(bad))
		}
	}
}
