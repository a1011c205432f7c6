package client

// Stall detection against the fake server: a server that stops answering
// but keeps the connection open loses its requests to the other
// connection; one that answers slowly but answers heartbeats keeps them;
// connections that wait for nothing, or have detection off, send nothing.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// testStallTimeout is short, so that a stall is noticed in a fraction of a
// second, and far above the fake's answer time (well under a millisecond).
const testStallTimeout = 300 * time.Millisecond

// TestStalledConnectionFailsOver: the fake reads every request but answers
// nothing on the connection a request went to, heartbeats included; the
// client gives that connection up and sends the request again on the other
// one, long before the caller's context ends.
func TestStalledConnectionFailsOver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		call   func(ctx context.Context, c *Client) error
		prefix string // of the request line, sent twice
		answer string // to the second
		// renew, answered renewed, is the extend that follows a grant that
		// may be older than its attempt (the stalled one may have got it).
		renew, renewed string
	}{
		{
			name: "acquire waiting forever",
			call: func(ctx context.Context, c *Client) error {
				_, err := c.Acquire(ctx, "s", time.Second, WaitForever)
				return err
			},
			prefix:  "A s 1000 ",
			answer:  "A s OK 7",
			renew:   "K s 7 1000",
			renewed: "K s OK",
		},
		{
			name:   "query",
			call:   func(ctx context.Context, c *Client) error { _, err := c.Query(ctx, "s"); return err },
			prefix: "Q s",
			answer: "Q s FREE",
		},
		{
			// Release retries at its own pace (ReleaseRetryInterval).
			name:   "release",
			call:   func(ctx context.Context, c *Client) error { return c.Release(ctx, "s", 5) },
			prefix: "R s 5",
			answer: "R s OK",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startFake(t)
			s.hung.Store(true)
			c := newTestClientWith(t, []string{s.addr()}, WithStallTimeout(testStallTimeout))
			ctx := ctxFor(t, 10*time.Second)
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx, c) }()

			first := s.next()
			if !strings.HasPrefix(first.text, tc.prefix) {
				t.Fatalf("request %q, want %s...", first.text, tc.prefix)
			}
			s.waitHeartbeats(first.nc, 1)
			retry := s.next()
			if !strings.HasPrefix(retry.text, tc.prefix) || retry.nc == first.nc {
				t.Fatalf("retry %q (on the stalled connection: %v)", retry.text, retry.nc == first.nc)
			}
			reply(t, retry.nc, tc.answer)
			if tc.renew != "" {
				if renew := s.next(); renew.text != tc.renew {
					t.Fatalf("after the retry's answer: %q, want %q", renew.text, tc.renew)
				} else {
					reply(t, renew.nc, tc.renewed)
				}
			}
			if err := recv(t, done); err != nil {
				t.Fatalf("after its connection stalled: %v", err)
			}
			// The stall timeout plus a retry, with room for a busy machine;
			// far from the 10 s the caller would have waited.
			el := time.Since(start)
			if el > 2*time.Second {
				t.Fatalf("answered after %v with a stall timeout of %v", el, testStallTimeout)
			}
			cn := silentConn(c)
			if cn == nil {
				t.Fatal("no connection was given up for silence")
			}
			// Less than RedialInterval has passed since: the silent server
			// is not dialled again yet.
			if st := cn.state.Load(); st != stateDown {
				t.Fatalf("%v after the stall, the silent connection is in state %d, want down until its redial", el, st)
			}
		})
	}
}

// silentConn returns a connection of c that was given up for silence, with
// an error that says so, or nil.
func silentConn(c *Client) *conn {
	c.mu.Lock()
	conns := append([]*conn(nil), c.conns...)
	c.mu.Unlock()
	for _, cn := range conns {
		if cn.endedSilent() && strings.Contains(cn.lastError().Error(), "stopped answering") {
			return cn
		}
	}
	return nil
}

// TestHeartbeatOnlyWhileWaiting: an acquire that waits far longer than the
// stall timeout on a server that answers its heartbeats keeps its
// connection and gets its grant there; the heartbeats' answers reach no
// caller and, being expected, do not make the client doubt the stream. Meanwhile, as measured by those
// heartbeats, a client whose connections wait for nothing (one answered
// request earlier) sends nothing, and neither does one with detection off
// although a request of its own waits.
func TestHeartbeatOnlyWhileWaiting(t *testing.T) {
	s := startFake(t)
	ctx := ctxFor(t, 10*time.Second)

	idle := newTestClientWith(t, []string{s.addr()}, WithStallTimeout(testStallTimeout))
	queried := make(chan error, 1)
	go func() { _, err := idle.Query(ctx, "q"); queried <- err }()
	req := s.next()
	reply(t, req.nc, "Q q FREE")
	if err := recv(t, queried); err != nil {
		t.Fatal(err)
	}

	off := newTestClientWith(t, []string{s.addr()}, WithStallTimeout(0))
	offDone := make(chan error, 1)
	go func() { _, err := off.Acquire(ctx, "off", time.Second, WaitForever); offDone <- err }()
	offReq := s.next()

	s.waitConns(4) // both connections of both quiet clients
	quiet := s.heartbeatCounts()

	slow := newTestClientWith(t, []string{s.addr()}, WithStallTimeout(testStallTimeout))
	slowDone := make(chan error, 1)
	go func() {
		l, err := slow.Acquire(ctx, "slow", time.Second, WaitForever)
		if err == nil && l.Token() != 11 {
			err = errors.New("wrong token")
		}
		slowDone <- err
	}()
	slowReq := s.next()
	// Six heartbeats, one per third of the stall timeout of silence: the
	// acquire has waited twice the stall timeout, alive.
	s.waitHeartbeats(slowReq.nc, 6)
	reply(t, slowReq.nc, "A slow OK 11")
	if err := recv(t, slowDone); err != nil {
		t.Fatalf("slow but alive: %v", err)
	}
	reply(t, offReq.nc, "A off OK 12")
	if err := recv(t, offDone); err != nil {
		t.Fatalf("detection off: %v", err)
	}
	select {
	case l := <-s.lines:
		t.Fatalf("unexpected request %q: a connection was given up", l.text)
	default:
	}
	for nc, n := range quiet {
		if got := s.heartbeatCounts()[nc]; got != n {
			t.Errorf("connection %v sent %d heartbeats while the slow acquire waited", nc.RemoteAddr(), got-n)
		}
	}
	for name, c := range map[string]*Client{"slow": slow, "idle": idle, "off": off} {
		if silentConn(c) != nil {
			t.Errorf("%s: a connection was given up for silence", name)
		}
	}
}
