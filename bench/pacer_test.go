package bench

import (
	"testing"
	"time"
)

func TestPacerSchedule(t *testing.T) {
	// 1000 cycles/s over 4 connections: each gets one every 4ms, and the
	// connections are staggered by 1ms.
	for conn := range 4 {
		p := newPacer(1000, conn, 4)
		first := time.Duration(conn) * time.Millisecond
		if _, ok := p.take(first - 1); ok && conn > 0 {
			t.Fatalf("conn %d: a cycle before its first intended start", conn)
		}
		for k := range 10 {
			want := first + time.Duration(k)*4*time.Millisecond
			if got := p.peek(); got != want {
				t.Fatalf("conn %d cycle %d: intended %v, want %v", conn, k, got, want)
			}
			// Taken late, it keeps its intended time: that is what
			// the latency is measured from.
			got, ok := p.take(want + 3*time.Millisecond)
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
			p := newPacer(c.rate, conn, c.conns)
			for {
				if _, ok := p.take(horizon); !ok {
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
	p := newPacer(100, 0, 1) // every 10ms from 0
	if n := p.behind(0); n != 1 {
		t.Fatalf("behind at 0 = %d, want 1 (cycle 0 is due)", n)
	}
	for range 3 {
		p.take(time.Second)
	}
	if n := p.behind(95 * time.Millisecond); n != 7 {
		t.Fatalf("behind = %d, want 7 (10 due by 95ms, 3 taken)", n)
	}
	late := newPacer(100, 1, 2) // starts at 10ms
	if n := late.behind(5 * time.Millisecond); n != 0 {
		t.Fatalf("behind before the first start = %d", n)
	}
}
