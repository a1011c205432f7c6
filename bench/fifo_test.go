package bench

import (
	"testing"
	"time"
)

func TestKeyLinesFIFO(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type step struct {
		op     byte // 'A' queued, 'G' granted, 'R' releasing, 'X' abandoned
		client int
		at     time.Duration
		token  uint64
		// for G: what granted must find
		tokenOK, fifoOK bool
		handoff         time.Duration
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"in order", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'G', client: 1, at: ms(1), token: 10, tokenOK: true, fifoOK: true, handoff: -1},
			{op: 'A', client: 2, at: ms(2)},
			{op: 'A', client: 3, at: ms(3)},
			{op: 'R', at: ms(100)},
			{op: 'G', client: 2, at: ms(101), token: 11, tokenOK: true, fifoOK: true, handoff: ms(1)},
			{op: 'A', client: 1, at: ms(102)},
			{op: 'R', at: ms(200)},
			{op: 'G', client: 3, at: ms(203), token: 12, tokenOK: true, fifoOK: true, handoff: ms(3)},
		}},
		{"overtaken by a later acquire", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'G', client: 1, at: ms(1), token: 10, tokenOK: true, fifoOK: true, handoff: -1},
			{op: 'A', client: 2, at: ms(2)},
			{op: 'A', client: 3, at: ms(200)}, // 198ms after client 2's
			{op: 'R', at: ms(300)},
			{op: 'G', client: 3, at: ms(301), token: 11, tokenOK: true, fifoOK: false, handoff: ms(1)},
		}},
		{"granted twice while another waits", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'A', client: 2, at: ms(1)},
			{op: 'G', client: 1, at: ms(2), token: 10, tokenOK: true, fifoOK: true, handoff: -1},
			{op: 'R', at: ms(3)},
			{op: 'A', client: 1, at: ms(100)},
			{op: 'G', client: 1, at: ms(101), token: 11, tokenOK: true, fifoOK: false, handoff: ms(98)},
		}},
		{"within the slack", []step{
			{op: 'A', client: 1, at: ms(10)},
			{op: 'A', client: 2, at: ms(40)}, // 30ms later: the server may have read it first
			{op: 'G', client: 2, at: ms(41), token: 10, tokenOK: true, fifoOK: true, handoff: -1},
		}},
		{"an abandoned waiter is not overtaken", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'X', client: 1},
			{op: 'A', client: 2, at: ms(500)},
			{op: 'G', client: 2, at: ms(501), token: 10, tokenOK: true, fifoOK: true, handoff: -1},
		}},
		{"token order", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'G', client: 1, at: ms(1), token: 10, tokenOK: true, fifoOK: true, handoff: -1},
			{op: 'A', client: 1, at: ms(2)},
			{op: 'G', client: 1, at: ms(3), token: 10, tokenOK: false, fifoOK: true, handoff: -1},
			{op: 'A', client: 2, at: ms(4)},
			{op: 'G', client: 2, at: ms(5), token: 9, tokenOK: false, fifoOK: true, handoff: -1},
			{op: 'A', client: 2, at: ms(6)},
			{op: 'G', client: 2, at: ms(7), token: 11, tokenOK: true, fifoOK: true, handoff: -1},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newKeyLines(2, ms(50), 0)
			for i, s := range c.steps {
				switch s.op {
				case 'A':
					l.queued(1, s.client, s.at)
				case 'R':
					l.releasing(1, s.at)
				case 'X':
					l.abandoned(1, s.client)
				case 'G':
					g := l.granted(1, s.client, s.token, s.at)
					if g.tokenOK != s.tokenOK || g.fifoOK != s.fifoOK || g.handoff != s.handoff {
						t.Fatalf("step %d: granted = %+v, want token %v fifo %v handoff %v", i, g, s.tokenOK, s.fifoOK, s.handoff)
					}
				}
			}
			// Key 0 saw none of it.
			if g := l.granted(0, 1, 1, ms(1000)); !g.tokenOK || !g.fifoOK || g.handoff != -1 {
				t.Fatalf("key 0: %+v", g)
			}
		})
	}
}

// TestKeyLinesShared: the checks of shared holds (permits 2): grants of
// one commit read in any order pass; a third holder at once, an older
// acquire granted a larger token, a token not above one read before the
// acquire was sent, or one seen twice, do not.
func TestKeyLinesShared(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type step struct {
		op     byte // 'A' queued, 'G' granted, 'R' releasing
		client int
		at     time.Duration
		token  uint64
		// for G: what granted must find
		tokenOK, fifoOK, permitsOK bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"read in any order", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'A', client: 2, at: ms(100)},
			{op: 'G', client: 2, at: ms(200), token: 11, tokenOK: true, fifoOK: true, permitsOK: true},
			{op: 'G', client: 1, at: ms(200), token: 10, tokenOK: true, fifoOK: true, permitsOK: true},
			{op: 'A', client: 3, at: ms(201)},
			{op: 'R', at: ms(300)},
			{op: 'G', client: 3, at: ms(301), token: 12, tokenOK: true, fifoOK: true, permitsOK: true},
		}},
		{"more holders than permits", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'A', client: 2, at: ms(1)},
			{op: 'A', client: 3, at: ms(2)},
			{op: 'G', client: 1, at: ms(3), token: 10, tokenOK: true, fifoOK: true, permitsOK: true},
			{op: 'G', client: 2, at: ms(3), token: 11, tokenOK: true, fifoOK: true, permitsOK: true},
			{op: 'G', client: 3, at: ms(3), token: 12, tokenOK: true, fifoOK: true, permitsOK: false},
		}},
		{"an older acquire granted later", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'A', client: 2, at: ms(100)},
			{op: 'G', client: 2, at: ms(101), token: 10, tokenOK: true, fifoOK: true, permitsOK: true},
			{op: 'G', client: 1, at: ms(200), token: 11, tokenOK: true, fifoOK: false, permitsOK: true},
		}},
		{"tokens", []step{
			{op: 'A', client: 1, at: ms(0)},
			{op: 'G', client: 1, at: ms(1), token: 10, tokenOK: true, fifoOK: true, permitsOK: true},
			{op: 'A', client: 2, at: ms(2)}, // after 10 was read
			{op: 'G', client: 2, at: ms(3), token: 9, tokenOK: false, fifoOK: true, permitsOK: true},
			{op: 'R', at: ms(4)},
			{op: 'R', at: ms(4)},
			{op: 'A', client: 3, at: ms(5)},
			{op: 'G', client: 3, at: ms(6), token: 10, tokenOK: false, fifoOK: true, permitsOK: true}, // twice
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newKeyLines(1, ms(50), 2)
			for i, s := range c.steps {
				switch s.op {
				case 'A':
					l.queued(0, s.client, s.at)
				case 'R':
					l.releasing(0, s.at)
				case 'G':
					g := l.granted(0, s.client, s.token, s.at)
					if g.tokenOK != s.tokenOK || g.fifoOK != s.fifoOK || g.permitsOK != s.permitsOK || g.handoff != -1 {
						t.Fatalf("step %d: granted = %+v, want token %v fifo %v permits %v", i, g, s.tokenOK, s.fifoOK, s.permitsOK)
					}
				}
			}
		})
	}
}
