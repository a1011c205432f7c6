package chaos

import (
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test sets by hand.
type fakeClock struct{ now time.Duration }

func (c *fakeClock) since() time.Duration { return c.now }

const milli = time.Millisecond

// TestResourceFence: the resource takes tokens at least the highest seen,
// counts a rejection outside the holder's sure interval as fencing doing
// its job, and one inside it as a violation naming both holders.
func TestResourceFence(t *testing.T) {
	clock := &fakeClock{}
	r := NewResource(clock.since)
	// Worker 1 acquired at 0 with a 1000 milli lease; Acquire returned at 10.
	old := NewHolding("k", 1025, 1, 0, 10*milli, 1000*milli)
	clock.now = 20 * milli
	if !r.Write(old) {
		t.Fatal("first write rejected")
	}
	// A later grant of the key writes; the old holder writing again after
	// its sure interval is turned away, and that is fine.
	newer := NewHolding("k", 2049, 2, 1100*milli, 1150*milli, 1000*milli)
	clock.now = 1200 * milli
	if !r.Write(newer) {
		t.Fatal("a larger token was rejected")
	}
	if !r.Write(newer) {
		t.Fatal("the same token again was rejected")
	}
	clock.now = 1300 * milli
	if r.Write(old) {
		t.Fatal("a smaller token was accepted")
	}
	if got := r.Stats(); got != (FenceStats{Accepted: 3, RejectedLate: 1}) {
		t.Fatalf("stats %+v", got)
	}

	// A holder whose lease surely covers the write, turned away: two
	// holders at once.
	overlapping := NewHolding("k", 1537, 3, 1250*milli, 1260*milli, 1000*milli)
	clock.now = 1400 * milli
	if r.Write(overlapping) {
		t.Fatal("a smaller token was accepted")
	}
	v := r.Violations()
	if len(v) != 1 || r.Stats().Violations != 1 {
		t.Fatalf("violations %q, stats %+v; want one", v, r.Stats())
	}
	for _, want := range []string{"key k", "worker 3", "token 1537", "token 2049 from worker 2"} {
		if !strings.Contains(v[0], want) {
			t.Errorf("violation %q does not say %q", v[0], want)
		}
	}
	// Another key has a fence of its own.
	if !r.Write(NewHolding("other", 1, 4, 0, 0, time.Second)) {
		t.Error("a first write to another key was rejected")
	}
}

// TestHoldingSureInterval: the interval starts when Acquire returned and
// ends at the Acquire's call plus the lease; an extend under way may
// shorten it, one that succeeded sets it from its own call, and Release
// ends it when called.
func TestHoldingSureInterval(t *testing.T) {
	h := NewHolding("k", 7, 1, 100*milli, 130*milli, 500*milli)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{129 * milli, false}, {130 * milli, true}, {599 * milli, true}, {600 * milli, false}} {
		if got := h.Covers(c.at); got != c.want {
			t.Errorf("Covers(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	h.ExtendCalled(400*milli, 2000*milli) // longer: the old bound holds until it is known
	if h.SureUntil != 600*milli {
		t.Errorf("a longer extend under way: SureUntil %v, want 600ms", h.SureUntil)
	}
	h.Extended(400*milli, 2000*milli)
	if h.SureUntil != 2400*milli {
		t.Errorf("after the extend: SureUntil %v, want 2.4s", h.SureUntil)
	}
	h.ExtendCalled(500*milli, 300*milli) // shorter: may take effect any moment
	if h.SureUntil != 800*milli {
		t.Errorf("a shorter extend under way: SureUntil %v, want 800ms", h.SureUntil)
	}
	h.ReleaseCalled(700 * milli)
	if h.SureUntil != 700*milli || h.Covers(700*milli) {
		t.Errorf("after ReleaseCalled(700ms): SureUntil %v", h.SureUntil)
	}
}
