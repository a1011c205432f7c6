package client

// AcquireShared (S, protocol 1.4) against the scripted server of
// fake_test.go: the request line, the retries and clean-ups it shares with
// Acquire, and the answers of a server that cannot serve it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// startFake14 is startFake answering C - as a server of protocol 1.3 or
// later does. The fake's default, a server from before 1.3, answers it
// "? - ERR badrequest", which the client pairs with its oldest request that
// such a server cannot read: an S sent before it, which a real server of
// that age would have answered so first.
func startFake14(t *testing.T) *fakeServer {
	t.Helper()
	s := startFake(t)
	s.setMembers(s.addr())
	return s
}

// acquireShared runs AcquireShared in the background; the result comes on
// the channel.
func acquireShared(ctx context.Context, c *Client, key string, permits int, lease, wait time.Duration) <-chan sharedResult {
	ch := make(chan sharedResult, 1)
	go func() {
		l, err := c.AcquireShared(ctx, key, permits, lease, wait)
		ch <- sharedResult{l, err}
	}()
	return ch
}

type sharedResult struct {
	l   *Lock
	err error
}

func recvShared(t *testing.T, ch <-chan sharedResult) sharedResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("AcquireShared did not return within 10s")
		return sharedResult{}
	}
}

// sharedFields checks that line is "S key permits lease_ms wait_ms owner"
// and returns its wait_ms and owner.
func sharedFields(t *testing.T, line, key string, permits, leaseMs int) (waitMs int, owner string) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "S" || f[1] != key || f[2] != fmt.Sprint(permits) || f[3] != fmt.Sprint(leaseMs) {
		t.Fatalf("request %q, want S %s %d %d WAIT OWNER", line, key, permits, leaseMs)
	}
	if _, err := fmt.Sscan(f[4], &waitMs); err != nil {
		t.Fatalf("request %q: wait_ms: %v", line, err)
	}
	return waitMs, f[5]
}

// TestAcquireSharedLine: S carries the key, the permits, the lease, the
// wait and a fresh owner; the Lock it returns releases and extends its own
// token.
func TestAcquireSharedLine(t *testing.T) {
	s := startFake14(t)
	c := newTestClientWith(t, []string{s.addr()}, WithOwnerPrefix("host:1:"))
	ctx := ctxFor(t, 10*time.Second)

	// No deadline, so that the wait sent is the one asked for.
	res := acquireShared(context.Background(), c, "jobs/encode", 16, 5*time.Second, WaitForever)
	req := s.next()
	wait, owner := sharedFields(t, req.text, "jobs/encode", 16, 5000)
	if wait != 0 || !strings.HasPrefix(owner, "host:1:") || len(owner) != len("host:1:")+32 {
		t.Fatalf("request %q: wait %d, owner %q", req.text, wait, owner)
	}
	reply(t, req.nc, "S jobs/encode OK 12")
	r := recvShared(t, res)
	if r.err != nil || r.l.Token() != 12 || r.l.Owner() != owner || r.l.Key() != "jobs/encode" {
		t.Fatalf("AcquireShared: %+v, %v", r.l, r.err)
	}

	// A second one names an owner of its own, and a finite wait.
	res = acquireShared(context.Background(), c, "jobs/encode", 16, time.Second, 1500*time.Microsecond)
	req = s.next()
	wait, owner2 := sharedFields(t, req.text, "jobs/encode", 16, 1000)
	if wait != 2 || owner2 == owner {
		t.Fatalf("second request %q: wait %d (want 2), owner %q (the first's %q)", req.text, wait, owner2, owner)
	}
	reply(t, req.nc, "S jobs/encode OK 13")
	if r2 := recvShared(t, res); r2.err != nil || r2.l.Token() != 13 {
		t.Fatalf("second AcquireShared: %+v", r2)
	}

	done := make(chan error, 1)
	go func() { done <- r.l.Extend(ctx, 3*time.Second) }()
	req = s.next()
	if req.text != "K jobs/encode 12 3000" {
		t.Fatalf("extend: %q", req.text)
	}
	reply(t, req.nc, "K jobs/encode OK")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	go func() { done <- r.l.Release(ctx) }()
	req = s.next()
	if req.text != "R jobs/encode 12" {
		t.Fatalf("release: %q", req.text)
	}
	reply(t, req.nc, "R jobs/encode OK")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireSharedLostAnswer: an S whose connection fails before its
// answer is sent again on the other connection with the same owner, and
// the grant that comes back (maybe the first attempt's) has its lease
// renewed before it is handed over.
func TestAcquireSharedLostAnswer(t *testing.T) {
	s := startFake14(t)
	c := newTestClient(t, s.addr())
	s.waitConns(2)
	res := acquireShared(ctxFor(t, 10*time.Second), c, "k", 3, 5*time.Second, WaitForever)
	first := s.next()
	wait, owner := sharedFields(t, first.text, "k", 3, 5000)
	first.nc.Close()
	retry := s.next()
	// The wait sent is what is left of the context's (the acquire waits
	// for ever): a retry's is no more than the first's.
	if wait2, owner2 := sharedFields(t, retry.text, "k", 3, 5000); retry.nc == first.nc || owner2 != owner || wait2 > wait {
		t.Fatalf("retry %q (same connection: %v), want %q or a shorter wait, on the other", retry.text, retry.nc == first.nc, first.text)
	}
	reply(t, retry.nc, "S k OK 7")
	renew := s.next()
	if renew.text != "K k 7 5000" {
		t.Fatalf("after a retried grant: %q, want K k 7 5000", renew.text)
	}
	reply(t, renew.nc, "K k OK")
	r := recvShared(t, res)
	if r.err != nil || r.l.Token() != 7 || r.l.Owner() != owner {
		t.Fatalf("AcquireShared: %+v", r)
	}
}

// TestAcquireSharedTimeout: TIMEOUT is ErrTimeout, and nothing follows it.
func TestAcquireSharedTimeout(t *testing.T) {
	s := startFake14(t)
	c := newTestClient(t, s.addr())
	res := acquireShared(ctxFor(t, 10*time.Second), c, "k", 2, time.Second, NoWait)
	req := s.next()
	if wait, _ := sharedFields(t, req.text, "k", 2, 1000); wait != -1 {
		t.Fatalf("try: %q", req.text)
	}
	reply(t, req.nc, "S k TIMEOUT")
	if r := recvShared(t, res); !errors.Is(r.err, ErrTimeout) || !strings.Contains(r.err.Error(), "acquire-shared k") {
		t.Fatalf("TIMEOUT: %v", r.err)
	}
	s.nothing(100 * time.Millisecond)
}

// TestAcquireSharedBadRequest: a permits that differs from the key's
// holders is refused, ERR badrequest: a *ServerError at once, not retried,
// nothing to clean up. Bad arguments are refused before anything is sent.
func TestAcquireSharedBadRequest(t *testing.T) {
	s := startFake14(t)
	c := newTestClient(t, s.addr())
	ctx := ctxFor(t, 10*time.Second)
	res := acquireShared(ctx, c, "k", 4, time.Second, WaitForever)
	req := s.next()
	sharedFields(t, req.text, "k", 4, 1000)
	reply(t, req.nc, "S k ERR badrequest permits 4 differs from the key's 2")
	r := recvShared(t, res)
	var se *ServerError
	if !errors.As(r.err, &se) || se.Code != "badrequest" || se.Text != "permits 4 differs from the key's 2" || errors.Is(r.err, ErrUnavailable) {
		t.Fatalf("badrequest: %v", r.err)
	}
	s.nothing(200 * time.Millisecond)

	for _, tc := range []struct {
		permits int
		key     string
		lease   time.Duration
	}{{0, "k", time.Second}, {-1, "k", time.Second}, {MaxPermits + 1, "k", time.Second}, {2, "a b", time.Second}, {2, "k", 0}} {
		if _, err := c.AcquireShared(ctx, tc.key, tc.permits, tc.lease, WaitForever); err == nil {
			t.Errorf("AcquireShared(%q, %d, %v): no error", tc.key, tc.permits, tc.lease)
		}
	}
	s.nothing(100 * time.Millisecond)
}

// TestAcquireSharedAbandonedGrantReleased: a grant that comes after the
// caller gave up is released with its token.
func TestAcquireSharedAbandonedGrantReleased(t *testing.T) {
	s := startFake14(t)
	c := newTestClient(t, s.addr())
	ctx, cancel := context.WithCancel(context.Background())
	res := acquireShared(ctx, c, "k", 2, time.Second, WaitForever)
	req := s.next()
	sharedFields(t, req.text, "k", 2, 1000)
	cancel()
	if r := recvShared(t, res); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("after cancel: %v", r.err)
	}
	reply(t, req.nc, "S k OK 42")
	if rel := s.next(); rel.text != "R k 42" {
		t.Fatalf("after an abandoned grant: %q, want R k 42", rel.text)
	} else {
		reply(t, rel.nc, "R k OK")
	}
}

// TestAcquireSharedCleanUpIsShared: an S that gave up after every
// connection failed it is cleaned up with an S try of the same owner and
// permits (an A would be refused, or take the key exclusively), whose
// grant is released.
func TestAcquireSharedCleanUpIsShared(t *testing.T) {
	s := startFake14(t)
	quick := func(o *options) { o.redialInterval = 100 * time.Millisecond }
	c := newTestClientWith(t, []string{s.addr()}, quick)
	s.waitConns(2)
	res := acquireShared(ctxFor(t, 10*time.Second), c, "k", 5, 2*time.Second, WaitForever)
	first := s.next()
	_, owner := sharedFields(t, first.text, "k", 5, 2000)
	first.nc.Close()
	second := s.next()
	second.nc.Close()
	if r := recvShared(t, res); !errors.Is(r.err, ErrUnavailable) {
		t.Fatalf("after every connection failed: %v", r.err)
	}
	try := s.next()
	if want := "S k 5 2000 -1 " + owner; try.text != want {
		t.Fatalf("clean-up %q, want %q", try.text, want)
	}
	reply(t, try.nc, "S k OK 9")
	if rel := s.next(); rel.text != "R k 9" {
		t.Fatalf("clean-up release %q, want R k 9", rel.text)
	} else {
		reply(t, rel.nc, "R k OK")
	}
}

// versionText is what a node of a cluster below version 4 answers S.
const versionText = "shared holds need cluster version 4 (the cluster is at 3: every member must run a build of level 4 or later)"

// TestAcquireSharedClusterVersion: a cluster below version 4 answers S
// ERR unavailable with its reason; it is retried for the version window,
// then returned, matching ErrUnsupported and ErrUnavailable, with the
// server's text, even when the acquire would wait for ever. A shorter wait
// ends first, with ErrTimeout, saying the same.
func TestAcquireSharedClusterVersion(t *testing.T) {
	s := startFake14(t)
	short := func(o *options) { o.versionWindow = 300 * time.Millisecond }
	c := newTestClientWith(t, []string{s.addr()}, short)
	answer := func(stop <-chan sharedResult) (sharedResult, int) {
		n := 0
		for {
			select {
			case r := <-stop:
				return r, n
			case l := <-s.lines:
				n++
				reply(t, l.nc, "S k ERR unavailable "+versionText)
			case <-time.After(5 * time.Second):
				t.Fatal("AcquireShared did not return within 5s")
			}
		}
	}

	start := time.Now()
	r, n := answer(acquireShared(context.Background(), c, "k", 2, time.Second, WaitForever))
	var se *ServerError
	if !errors.Is(r.err, ErrUnsupported) || !errors.Is(r.err, ErrUnavailable) || errors.Is(r.err, ErrTimeout) ||
		!errors.As(r.err, &se) || se.Text != versionText {
		t.Fatalf("below version 4: %v", r.err)
	}
	if el := time.Since(start); n < 2 || el < 300*time.Millisecond {
		t.Fatalf("returned after %d answers, %v: want retries for the window", n, el)
	}

	// The wait ends within the window.
	c2 := newTestClient(t, s.addr())
	r, _ = answer(acquireShared(context.Background(), c2, "k", 2, time.Second, 200*time.Millisecond))
	if !errors.Is(r.err, ErrTimeout) || !errors.Is(r.err, ErrUnsupported) || !strings.Contains(r.err.Error(), versionText) {
		t.Fatalf("below version 4, the wait over first: %v", r.err)
	}
	// Nothing to clean up: a refusal grants nothing.
	s.nothing(200 * time.Millisecond)
}

// TestAcquireSharedOldServer: a server from before protocol 1.4 cannot
// read S and answers "? - ERR badrequest": ErrUnsupported at once, and the
// connection is kept (TestPopUnread: paired with the S even behind an
// older C or M that such a server reads).
func TestAcquireSharedOldServer(t *testing.T) {
	s := startFake14(t)
	c := newTestClient(t, s.addr())
	s.waitConns(2)
	res := acquireShared(ctxFor(t, 10*time.Second), c, "k", 2, time.Second, WaitForever)
	req := s.next()
	reply(t, req.nc, "? - ERR badrequest op must be A, R, K, Q, H, C or M")
	r := recvShared(t, res)
	var se *ServerError
	if !errors.Is(r.err, ErrUnsupported) || !errors.As(r.err, &se) || se.Code != "badrequest" {
		t.Fatalf("S to a 1.3 server: %v", r.err)
	}
	s.nothing(200 * time.Millisecond)
	if open, accepted := s.openCount(), len(s.accepted()); open != 2 || accepted != 2 {
		t.Fatalf("%d connections open, %d accepted: want the 2 kept", open, accepted)
	}
}

// TestPopUnread: "? - ERR badrequest" goes to the oldest call of an op the
// server cannot read, which its text narrows down.
func TestPopUnread(t *testing.T) {
	for _, tc := range []struct {
		text string
		want byte
	}{
		{"op must be A, R, K, Q or H", 'C'},
		{"op must be A, R, K, Q, H, C or M", 'S'},
		{"something else", 'C'},
	} {
		var p pendingTable
		for _, op := range []byte{'A', 'C', 'M', 'S'} {
			key := "-"
			if op == 'A' || op == 'S' {
				key = "k"
			}
			p.push(newCall(op, key))
		}
		if got := p.popUnread([]byte(tc.text)); got == nil || got.op != tc.want {
			t.Errorf("%q: popped %+v, want the %c", tc.text, got, tc.want)
		}
	}
	var p pendingTable
	p.push(newCall('A', "k"))
	if got := p.popUnread([]byte("op must be A, R, K, Q or H")); got != nil {
		t.Errorf("no unreadable call: popped %+v", got)
	}
}

// TestAcquireWaitOverUnavailable: an acquire whose wait runs out while
// ERR unavailable is being retried says so: ErrTimeout, and the answer.
func TestAcquireWaitOverUnavailable(t *testing.T) {
	s := startFake14(t)
	c := newTestClient(t, s.addr())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), "k", time.Second, 300*time.Millisecond)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no leader") {
				t.Fatalf("wait over while unavailable: %v", err)
			}
			return
		case l := <-s.lines:
			f := strings.Fields(l.text)
			reply(t, l.nc, f[0]+" k ERR unavailable no leader")
		case <-time.After(5 * time.Second):
			t.Fatal("acquire did not end")
		}
	}
}
