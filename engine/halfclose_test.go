package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// finishedConn is a transport whose client has sent its FIN: it may have
// half-closed the connection or closed it.
type finishedConn struct{ fakeConn }

func (finishedConn) peer() peerState { return peerFinished }

// serveLines serves input as an event loop does, but leaves what it
// proposes to the test (take).
func serveLines(s *shard, cs *connState, input string) {
	s.node.serveLines(cs, []byte(input))
	cs.touched = cs.touched[:0]
}

// TestEndOfInput: whether something is still due to a client whose input
// ended, and when that is over.
func TestEndOfInput(t *testing.T) {
	t.Run("all answered", func(t *testing.T) {
		s := testShard(t)
		cs := connTo(s)
		serveLines(s, cs, "Q a\nQ b\nx\n")
		if got := answers(cs); len(got) != 3 {
			t.Fatalf("answers %q", got)
		}
		if cs.endOfInput() {
			t.Fatal("something due after every request was answered and written")
		}
	})
	t.Run("answers queued", func(t *testing.T) {
		s := testShard(t)
		cs := connTo(s)
		serveLines(s, cs, "Q a\n")
		if !cs.endOfInput() {
			t.Fatal("nothing due with an answer not written yet")
		}
		answers(cs)
		if !cs.drained() {
			t.Fatal("not drained once the answer is written")
		}
	})
	t.Run("a grant and a wait", func(t *testing.T) {
		s := testShard(t)
		holder := connTo(s)
		request(t, s, holder, "A held 10000 0")
		p, cmds := take(t, s)
		apply(s, p, cmds, sm.Result{Code: sm.Granted})
		answers(holder)

		cs := connTo(s)
		serveLines(s, cs, "A free 10000 0\nA held 10000 5\n")
		if !cs.endOfInput() {
			t.Fatal("nothing due with a grant in flight and a wait")
		}
		p, cmds = take(t, s)
		apply(s, p, cmds, sm.Result{Code: sm.Granted})
		if got := answers(cs); len(got) != 1 || !strings.HasPrefix(got[0], "A free OK ") {
			t.Fatalf("answers %q, want the grant of free", got)
		}
		if cs.drained() {
			t.Fatal("drained while an acquire waits")
		}
		waitFor(t, "the wait to run out", func() bool {
			s.fireTimers(monoNow())
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.waits.Len() == 0
		})
		if got := answers(cs); !slices.Equal(got, []string{"A held TIMEOUT"}) {
			t.Fatalf("answers %q, want A held TIMEOUT", got)
		}
		// Sent after the end of input, the grant is provisional until the
		// client's kernel acknowledged it (the writer's look).
		if cs.drained() {
			t.Fatal("drained with the grant not acknowledged")
		}
		if _, err := cs.flush(io.Discard); err != nil {
			t.Fatal(err)
		}
		n, _ := cs.afterFlush()
		if n != 1 {
			t.Fatalf("%d provisional grants written, want the grant of free", n)
		}
		cs.confirmProvisional(n)
		if !cs.drained() {
			t.Fatal("not drained once every request was answered")
		}
	})
}

// TestProvisionalGrant: a grant sent after the client's FIN is released if
// the connection ends before the client's kernel acknowledged it, unless
// the key moved on meanwhile; once acknowledged, it is the client's.
func TestProvisionalGrant(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between func(t *testing.T, s *shard, cs *connState, token uint64) // after the grant, before the connection ends
		release bool
	}{
		{"reset before the acknowledgement", func(*testing.T, *shard, *connState, uint64) {}, true},
		{"acknowledged", func(t *testing.T, s *shard, cs *connState, token uint64) {
			if _, err := cs.flush(io.Discard); err != nil {
				t.Fatal(err)
			}
			n, _ := cs.afterFlush()
			cs.confirmProvisional(n)
		}, false},
		{"released since", func(t *testing.T, s *shard, cs *connState, token uint64) {
			other := connTo(s)
			request(t, s, other, fmt.Sprintf("R k %d", token))
			p, cmds := take(t, s)
			apply(s, p, cmds, sm.Result{Code: sm.Released})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testShard(t)
			cs := newConnState(finishedConn{}, s.node.adm, s.node.metrics)
			request(t, s, cs, "A k 10000 0")
			p, cmds := take(t, s)
			apply(s, p, cmds, sm.Result{Code: sm.Granted})
			token, _ := holderOf(s, "k")
			if got := answers(cs); !slices.Equal(got, []string{fmt.Sprintf("A k OK %d", token)}) {
				t.Fatalf("answers %q: the client's FIN is no disconnect, the grant is sent", got)
			}
			tc.between(t, s, cs, token)
			released := s.node.metrics.abandonedReleased.Get()
			s.node.closeConn(cs)
			pending := batched(s)
			if !tc.release {
				if pending != 0 {
					t.Fatalf("%d commands proposed, want none", pending)
				}
				return
			}
			p, cmds = take(t, s)
			if len(cmds) != 1 || cmds[0].Op != sm.OpRelease || cmds[0].Token != token {
				t.Fatalf("proposed %+v, want the Release of token %d", cmds, token)
			}
			apply(s, p, cmds, sm.Result{Code: sm.Released})
			if tok, _ := holderOf(s, "k"); tok != 0 {
				t.Fatalf("k still held by %d", tok)
			}
			if got := s.node.metrics.abandonedReleased.Get(); got != released+1 {
				t.Fatalf("%d grants released for nobody, want %d", got, released+1)
			}
		})
	}
}

// TestHalfClosedLeftover: a client that pipes in more requests than the
// socket buffers hold, half-closes, and only then reads, gets every answer
// in order. When the loop reads the end of its input, gnet still holds
// answers the socket did not take; the hand-over takes them along
// (takeOutbound) instead of letting gnet drop what its close cannot write.
func TestHalfClosedLeftover(t *testing.T) {
	if !halfCloseSupported {
		t.Skip("no half-close on this system")
	}
	const lines = 400_000 // about 9 MB of answers, more than the socket buffers of both ends
	n := startTestNode(t, func(c *Config) { c.Limits.MaxUnsentPerConn = 64 << 20 })
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		// A small window: the server's socket takes little of the answers.
		_ = rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := d.DialContext(ctx, "tcp", n.cfg.Peers[0].ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var req strings.Builder
	for i := range lines {
		fmt.Fprintf(&req, "Q leftover/%d\n", i)
	}
	if _, err := nc.Write([]byte(req.String())); err != nil {
		t.Fatal(err)
	}
	if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// Handed over, with answers queued for its writer: they can only be
	// what gnet held, since every Q was answered before the end of input.
	waitFor(t, "the hand-over with answers left", func() bool {
		for _, sc := range n.server.handedOver.list() {
			sc.cs.mu.Lock()
			queued := sc.cs.queuedLocked()
			sc.cs.mu.Unlock()
			if queued > 0 {
				return true
			}
		}
		return false
	})
	_ = nc.SetReadDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(nc)
	for i := range lines {
		line, err := r.ReadString('\n')
		if want := fmt.Sprintf("Q leftover/%d FREE\n", i); line != want || err != nil {
			t.Fatalf("answer %d: %q (%v), want %q", i, line, err, want)
		}
	}
	if line, err := r.ReadString('\n'); err != io.EOF {
		t.Fatalf("after every answer: %q (%v), want the end", line, err)
	}
}
