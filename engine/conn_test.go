package engine

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// socketConn is a transport that records what is written to its socket
// directly (writeNow) and how often its writer is woken. takes is how many
// bytes one direct write takes (-1: all of them); direct false is a
// transport that cannot write directly (TLS).
type socketConn struct {
	direct bool
	takes  int
	socket bytes.Buffer
	writes int
	wakes  int
}

func (c *socketConn) wake() { c.wakes++ }
func (c *socketConn) writeNow(b []byte) (int, bool) {
	if !c.direct {
		return 0, false
	}
	c.writes++
	n := len(b)
	if c.takes >= 0 && c.takes < n {
		n = c.takes
	}
	c.socket.Write(b[:n])
	return n, true
}
func (c *socketConn) cut()               {}
func (c *socketConn) recheck()           {}
func (c *socketConn) peer() peerState    { return peerOpen }
func (c *socketConn) remoteAddr() string { return "test" }

func ok(key string, token uint64) *codec.Response {
	return &codec.Response{Op: codec.OpAcquire, Key: []byte(key), Status: codec.StatusOK, Token: token}
}

func wire(rs ...*codec.Response) string {
	var b []byte
	for _, r := range rs {
		b = codec.AppendResponse(b, r)
	}
	return string(b)
}

// queued returns what cs holds for its writer.
func queued(cs *connState) string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.out == nil {
		return ""
	}
	return string(cs.out.B)
}

// Answers a shard holds while it applies an entry are written straight to
// the socket when the entry is done, in one write per connection, unless
// the connection's writer has taken the flush over or the socket cannot
// take them; then they go to the writer as before, in order.
func TestHeldAnswers(t *testing.T) {
	a, b, c := ok("a", 1), ok("b", 2), ok("c", 3)
	tests := []struct {
		name string
		conn socketConn
		// before runs between the held sends and writeHeld.
		before func(cs *connState)
		// wantSocket went straight to the socket; wantQueued is left for
		// the writer, woken wantWakes times.
		wantSocket, wantQueued string
		wantWrites, wantWakes  int
		wantFlushBy            flusher
	}{
		{
			name:       "written at once, in one write",
			conn:       socketConn{direct: true, takes: -1},
			wantSocket: wire(a, b), wantWrites: 1, wantFlushBy: flushNone,
		},
		{
			name:       "the socket takes part: the rest goes to the writer",
			conn:       socketConn{direct: true, takes: 5},
			wantSocket: wire(a, b)[:5], wantQueued: wire(a, b)[5:],
			wantWrites: 1, wantWakes: 1, wantFlushBy: flushLoop,
		},
		{
			name:       "the socket takes nothing",
			conn:       socketConn{direct: true, takes: 0},
			wantQueued: wire(a, b), wantWrites: 1, wantWakes: 1, wantFlushBy: flushLoop,
		},
		{
			name:       "a transport that cannot write directly",
			conn:       socketConn{direct: false},
			wantQueued: wire(a, b), wantWakes: 1, wantFlushBy: flushLoop,
		},
		{
			name:        "the reader took the flush over",
			conn:        socketConn{direct: true, takes: -1},
			before:      func(cs *connState) { cs.beginTraffic() },
			wantQueued:  wire(a, b),
			wantFlushBy: flushLoop,
		},
		{
			name: "the reader's flush is under way",
			conn: socketConn{direct: true, takes: -1},
			before: func(cs *connState) {
				// The reader took what was queued and writes it; an answer
				// held since must not overtake it.
				cs.beginTraffic()
				if _, err := cs.flush(&bytes.Buffer{}); err != nil {
					t.Fatal(err)
				}
				cs.send(c, &heldAnswers{})
			},
			wantQueued: wire(c), wantWakes: 1, wantFlushBy: flushLoop,
		},
		{
			name: "gnet still holds bytes of the reader's last flush",
			conn: socketConn{direct: true, takes: -1},
			before: func(cs *connState) {
				cs.beginTraffic()
				if _, err := cs.flush(&bytes.Buffer{}); err != nil {
					t.Fatal(err)
				}
				cs.flushed(false)
				cs.send(c, &heldAnswers{})
			},
			wantQueued: wire(c), wantWakes: 1, wantFlushBy: flushLoop,
		},
		{
			name:        "the connection closed",
			conn:        socketConn{direct: true, takes: -1},
			before:      func(cs *connState) { cs.close() },
			wantFlushBy: flushNone,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := tc.conn
			cs := newConnState(&tr, newAdmission(DefaultLimits(), slog.New(slog.DiscardHandler)), newNodeMetrics())
			var h heldAnswers
			cs.send(a, &h)
			cs.send(b, &h)
			if len(h.conns) != 1 || tr.wakes != 0 || tr.writes != 0 {
				t.Fatalf("held sends: %d connections held, %d wakes, %d writes; want 1, 0, 0", len(h.conns), tr.wakes, tr.writes)
			}
			if tc.before != nil {
				tc.before(cs)
			}
			h.write()
			if got := tr.socket.String(); got != tc.wantSocket {
				t.Errorf("socket got %q, want %q", got, tc.wantSocket)
			}
			if got := queued(cs); got != tc.wantQueued {
				t.Errorf("queued for the writer %q, want %q", got, tc.wantQueued)
			}
			if tr.writes != tc.wantWrites || tr.wakes != tc.wantWakes {
				t.Errorf("%d direct writes, %d wakes; want %d, %d", tr.writes, tr.wakes, tc.wantWrites, tc.wantWakes)
			}
			if cs.flushBy != tc.wantFlushBy {
				t.Errorf("flushBy %d, want %d", cs.flushBy, tc.wantFlushBy)
			}
			if len(h.conns) != 0 {
				t.Errorf("%d connections still held", len(h.conns))
			}
		})
	}
}

// After a partial direct write, nothing more is written directly until the
// writer has sent the rest and found the socket clear: answers stay in
// order.
func TestHeldAnswersKeepOrder(t *testing.T) {
	tr := socketConn{direct: true, takes: 3}
	cs := newConnState(&tr, newAdmission(DefaultLimits(), slog.New(slog.DiscardHandler)), newNodeMetrics())
	var h heldAnswers
	cs.send(ok("a", 1), &h)
	h.write()
	cs.send(ok("b", 2), &h) // the writer is due (flushBy): appended only
	h.write()
	if tr.writes != 1 || len(h.conns) != 0 {
		t.Fatalf("%d direct writes, %d held: want 1, 0", tr.writes, len(h.conns))
	}
	// The writer's turn (OnTraffic): it sends the rest, the socket takes it.
	cs.beginTraffic()
	var rest bytes.Buffer
	if _, err := cs.flush(&rest); err != nil {
		t.Fatal(err)
	}
	cs.flushed(true)
	tr.takes = -1
	cs.send(ok("c", 3), &h)
	h.write()
	got := tr.socket.String()[:3] + rest.String() + tr.socket.String()[3:]
	if want := wire(ok("a", 1), ok("b", 2), ok("c", 3)); got != want {
		t.Fatalf("the client read %q, want %q", got, want)
	}
	if tr.writes != 2 {
		t.Fatalf("%d direct writes, want 2", tr.writes)
	}
}

// A connection cut off while held (too many unsent answers) goes to its
// writer, which closes it.
func TestHeldAnswersCutOff(t *testing.T) {
	tr := socketConn{direct: true, takes: -1}
	limits := DefaultLimits()
	limits.MaxUnsentPerConn = 10
	cs := newConnState(&tr, newAdmission(limits, slog.New(slog.DiscardHandler)), newNodeMetrics())
	var h heldAnswers
	cs.send(ok("a-long-enough-key", 1), &h)
	h.write()
	if _, cut := cs.cutOffBy(); !cut {
		t.Fatal("not cut off")
	}
	if tr.writes != 0 || tr.wakes != 1 {
		t.Fatalf("%d direct writes, %d wakes; want 0, 1", tr.writes, tr.wakes)
	}
	if cut, _ := cs.flush(&bytes.Buffer{}); !cut {
		t.Fatal("the writer's flush does not report the cut-off")
	}
}

// The answers one applied entry gives a connection reach its socket in one
// direct write, without waking its event loop; answers given on receipt
// still go through the loop.
func TestAppliedEntryWritesItsAnswersOnce(t *testing.T) {
	s := testShard(t)
	tr := &socketConn{direct: true, takes: -1}
	cs := newConnState(tr, s.node.adm, s.node.metrics)
	for _, line := range []string{"A a 10000 50", "A b 10000 50", "A c 10000 50"} {
		request(t, s, cs, line)
	}
	p, cmds := take(t, s)
	if len(cmds) != 3 {
		t.Fatalf("proposed %d commands, want 3 in one entry", len(cmds))
	}
	granted := sm.Result{Code: sm.Granted}
	apply(s, p, cmds, granted, granted, granted)
	want := "A a OK 1025\nA b OK 2049\nA c OK 3073\n"
	if got := tr.socket.String(); got != want || tr.writes != 1 || tr.wakes != 0 {
		t.Fatalf("socket got %q in %d writes with %d wakes; want %q in 1 write, no wake", got, tr.writes, tr.wakes, want)
	}
	request(t, s, cs, "Q a")
	if tr.writes != 1 || tr.wakes != 1 || queued(cs) == "" {
		t.Fatalf("an answer on receipt: %d writes, %d wakes, %q queued; want it queued for the loop", tr.writes, tr.wakes, queued(cs))
	}
}
