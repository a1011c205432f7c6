package bench

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestPacerSchedule(t *testing.T) {
	// 1000 cycles/s over 4 connections: each gets one every 4ms, and the
	// connections are staggered by 1ms.
	for conn := range 4 {
		p := NewPacer(1000, conn, 4)
		first := time.Duration(conn) * time.Millisecond
		if _, ok := p.Take(first - 1); ok && conn > 0 {
			t.Fatalf("conn %d: a cycle before its first intended start", conn)
		}
		for k := range 10 {
			want := first + time.Duration(k)*4*time.Millisecond
			if got := p.Next(); got != want {
				t.Fatalf("conn %d cycle %d: intended %v, want %v", conn, k, got, want)
			}
			// Taken late, it keeps its intended time: that is what
			// the latency is measured from.
			got, ok := p.Take(want + 3*time.Millisecond)
			if !ok || got != want {
				t.Fatalf("conn %d cycle %d: take = %v %v", conn, k, got, ok)
			}
		}
	}
}

func TestPacerRateOverTime(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		conns int
	}{{1, 1}, {7, 3}, {1000, 16}, {250_000, 16}, {3, 64}} {
		total := 0
		horizon := 2 * time.Second
		for conn := range c.conns {
			p := NewPacer(c.rate, conn, c.conns)
			for {
				if _, ok := p.Take(horizon); !ok {
					break
				}
				total++
			}
		}
		// Every cycle due in [0, 2s]: rate*2, give or take one per
		// connection at the edge.
		want := c.rate * horizon.Seconds()
		if float64(total) < want-float64(c.conns) || float64(total) > want+float64(c.conns) {
			t.Errorf("rate %v over %d conns: %d cycles in %v, want about %v", c.rate, c.conns, total, horizon, want)
		}
	}
}

func TestPacerBehind(t *testing.T) {
	p := NewPacer(100, 0, 1) // every 10ms from 0
	if n := p.Behind(0); n != 1 {
		t.Fatalf("behind at 0 = %d, want 1 (cycle 0 is due)", n)
	}
	for range 3 {
		p.Take(time.Second)
	}
	if n := p.Behind(95 * time.Millisecond); n != 7 {
		t.Fatalf("behind = %d, want 7 (10 due by 95ms, 3 taken)", n)
	}
	late := NewPacer(100, 1, 2) // starts at 10ms
	if n := late.Behind(5 * time.Millisecond); n != 0 {
		t.Fatalf("behind before the first start = %d", n)
	}
}

func TestPacerWait(t *testing.T) {
	// 100 cycles/s on one connection: every 10ms from the run's start.
	p := NewPacer(100, 0, 1)
	ctx := context.Background()
	base := time.Now()
	for k := range 3 {
		start, ok := p.Wait(ctx, base)
		want := time.Duration(k) * 10 * time.Millisecond
		if !ok || start != want {
			t.Fatalf("cycle %d: Wait = %v %v, want %v", k, start, ok, want)
		}
		if el := time.Since(base); el < want {
			t.Fatalf("cycle %d returned at %v, before its start %v", k, el, want)
		}
	}

	// A worker busy past several starts gets them at once, each with its
	// intended time: the latency it reports includes the delay.
	late := NewPacer(100, 0, 1)
	base = time.Now().Add(-45 * time.Millisecond)
	before := time.Now()
	for k := range 5 {
		if start, ok := late.Wait(ctx, base); !ok || start != time.Duration(k)*10*time.Millisecond {
			t.Fatalf("late cycle %d: Wait = %v %v", k, start, ok)
		}
	}
	if el := time.Since(before); el > 25*time.Millisecond {
		t.Fatalf("due cycles took %v to hand out: they must not wait", el)
	}
	if n := late.Behind(45 * time.Millisecond); n != 0 {
		t.Fatalf("Behind = %d after every due cycle was handed out", n)
	}

	// The end of the run (ctx) ends a wait for a far start promptly.
	slow := NewPacer(0.1, 0, 1) // every 10s
	base = time.Now()
	if _, ok := slow.Wait(ctx, base); !ok {
		t.Fatal("cycle 0 is due at once")
	}
	ectx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	before = time.Now()
	if _, ok := slow.Wait(ectx, base); ok || time.Since(before) > time.Second {
		t.Fatalf("Wait past the end: ok %v after %v", ok, time.Since(before))
	}
	if _, ok := slow.Wait(ectx, base); ok {
		t.Fatal("Wait after the end: want false")
	}
}

// The slots of one connection share its schedule: every start is handed out
// exactly once, whoever asks.
func TestPacerShared(t *testing.T) {
	p := NewPacer(1e9, 0, 1) // every nanosecond: always due
	const workers, each = 8, 1000
	got := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var start time.Duration
				var ok bool
				if i%2 == 0 {
					start, ok = p.Take(time.Hour)
				} else {
					start, ok = p.Wait(context.Background(), time.Now().Add(-time.Hour))
				}
				if ok {
					got[w] = append(got[w], start)
				}
			}
		}()
	}
	wg.Wait()
	seen := map[time.Duration]bool{}
	for _, ts := range got {
		for _, start := range ts {
			if seen[start] {
				t.Fatalf("start %v handed out twice", start)
			}
			seen[start] = true
		}
	}
	if len(seen) != workers*each {
		t.Fatalf("%d starts handed out, want %d", len(seen), workers*each)
	}
}

func TestNoteBehind(t *testing.T) {
	for _, c := range []struct {
		rate   float64
		conns  int
		behind int64
		fell   bool
	}{
		{1000, 16, 0, false},
		{1000, 16, 16, false},     // one per connection: the instant the run stopped
		{1000, 16, 90, false},     // under 100ms of the schedule
		{1000, 16, 150, true},     // 150ms of the schedule
		{100, 64, 60, false},      // under one per connection
		{0, 16, 1_000_000, false}, // closed loop: no schedule to fall behind
	} {
		r := &Result{Rate: c.rate, Conns: c.conns}
		r.NoteBehind(c.behind)
		if r.Behind != c.behind || r.FellBehind() != c.fell || (len(r.Notes) == 1) != c.fell {
			t.Errorf("rate %v, %d conns, %d behind: FellBehind %v, notes %q", c.rate, c.conns, c.behind, r.FellBehind(), r.Notes)
		}
	}
}

func TestPacersTogether(t *testing.T) {
	ps := NewPacers(1000, 4) // each connection every 4ms, staggered by 1ms
	for i, p := range ps {
		if got, want := p.Next(), time.Duration(i)*time.Millisecond; got != want {
			t.Fatalf("connection %d starts at %v, want %v", i, got, want)
		}
	}
	ps[0].Take(time.Second)
	// By 5.5ms: connection 0 had starts at 0 and 4ms (one taken), 1 at 1
	// and 5ms, 2 at 2ms, 3 at 3ms.
	if n := TotalBehind(ps, 5500*time.Microsecond); n != 5 {
		t.Fatalf("TotalBehind = %d, want 5", n)
	}
}
