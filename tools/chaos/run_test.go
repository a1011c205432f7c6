package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
)

// routeShard mirrors engine's routing (FNV-1a of the key, modulo the shard
// count, plus one), which the engine does not export.
func routeShard(key string, shards int) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range []byte(key) {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h%uint64(shards) + 1
}

// TestKeysSpreadOverShards: the workload's keys, and the prober's, reach
// every one of the four shards.
func TestKeysSpreadOverShards(t *testing.T) {
	for name, keys := range map[string][]string{"DefaultKeys": DefaultKeys, "ProbeKeys": ProbeKeys} {
		shards := make(map[uint64]bool)
		for _, k := range keys {
			shards[routeShard(k, 4)] = true
		}
		if len(shards) != 4 {
			t.Errorf("%s %v reach %d of 4 shards", name, keys, len(shards))
		}
	}
}

// TestLongestWithoutGrant: the gap a fault cuts into counts from its start;
// the search stops at the first grant after until, and nothing counts past
// limit.
func TestLongestWithoutGrant(t *testing.T) {
	s := time.Second
	grants := []time.Duration{1 * s, 2 * s, 3 * s, 6 * s, 6500 * milli, 20 * s, 21 * s}
	f := FaultRecord{Start: 2500 * milli, End: 4 * s}
	if got := longestWithoutGrant(f, 9*s, 30*s, grants); got != 13500*milli {
		t.Errorf("gap up to the first grant after 9s: %v, want 13.5s (6.5s to 20s)", got)
	}
	if got := longestWithoutGrant(f, 5*s, 30*s, grants); got != 3*s {
		t.Errorf("until 5s: %v, want 3s (3s to 6s)", got)
	}
	if got := longestWithoutGrant(f, 9*s, 10*s, grants); got != 3500*milli {
		t.Errorf("limit 10s: %v, want 3.5s (6.5s to the limit)", got)
	}
	if got := longestWithoutGrant(FaultRecord{Start: 25 * s, End: 26 * s}, 31*s, 30*s, grants); got != 5*s {
		t.Errorf("no grant after the fault: %v, want 5s (to the end of the run)", got)
	}
}

// TestAvailabilityByKind: one line per kind with the median and maximum of
// its faults, a window cut at the next fault's start.
func TestAvailabilityByKind(t *testing.T) {
	s := time.Second
	var grants []time.Duration
	for g := time.Duration(0); g < 60*s; g += 100 * milli {
		if g < 10*s || g > 11*s && g < 20*s || g > 23*s && g < 30*s || g > 31*s {
			grants = append(grants, g)
		}
	}
	faults := []FaultRecord{
		{Fault: Fault{Kind: KillLeader}, Start: 10 * s, End: 12 * s},        // 10s..11.1s
		{Fault: Fault{Kind: KillLeader}, Start: 20 * s, End: 21 * s},        // 20s..23.1s
		{Fault: Fault{Kind: PauseLeader}, Start: 24 * s, End: 25 * s},       // 100ms: the gap from 29.9s counts for the next
		{Fault: Fault{Kind: KillLeader}, Start: 29950 * milli, End: 35 * s}, // 29.95s..31.1s
	}
	got := availabilityByKind(faults, faultGaps(faults, grants, 60*s))
	want := []KindAvailability{
		{Kind: KillLeader, Count: 3, Median: 1150 * milli, Max: 3100 * milli}, // 1.1s, 1.15s, 3.1s
		{Kind: PauseLeader, Count: 1, Median: 100 * milli, Max: 100 * milli},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if m := median([]time.Duration{1, 2, 3, 10}); m != 2 {
		t.Errorf("median of an even count: %v, want 2 (2.5 truncated)", m)
	}
}

// TestOutcomeOf names the outcomes the counters use.
func TestOutcomeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{fmt.Errorf("x: %w", client.ErrTimeout), "timeout"},
		{fmt.Errorf("x: %w (%w)", client.ErrTimeout, context.DeadlineExceeded), "timeout"},
		{client.ErrNotHeld, "notheld"},
		{client.ErrClosed, "closed"},
		{context.DeadlineExceeded, "deadline"},
		{&client.ServerError{Code: "unavailable"}, "unavailable"},
		{fmt.Errorf("%w: cannot connect", client.ErrUnavailable), "unavailable"},
		{&client.ServerError{Code: "internal"}, "err-internal"},
		{errors.New("what"), "other"},
	} {
		if got := outcomeOf(c.err); got != c.want {
			t.Errorf("outcomeOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
