package client

// Tests against a scripted in-process server: the test reads the request
// lines the client sends and writes whatever answers it wants, in whatever
// order, so that pairing, retries and clean-up can be checked line by line.
// Heartbeats (stall.go) are the exception: the fake counts them and answers
// them itself, as a live server would, unless told to play a hung one. So
// are the address refreshes (C -, refresh.go): the fake counts them and
// answers them as a server from before protocol 1.3 does, unless told to
// answer them otherwise (setCluster).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer accepts connections on 127.0.0.1 and funnels every request
// line, with the connection it came on, into one channel; heartbeats are
// counted and answered instead.
type fakeServer struct {
	t     *testing.T
	ln    net.Listener
	lines chan fakeLine
	// hung: heartbeats are not answered, as by a server that stopped.
	hung atomic.Bool
	// cluster answers C - (see setCluster).
	cluster atomic.Pointer[func(net.Conn) string]

	mu            sync.Mutex
	conns         []net.Conn
	heartbeats    map[net.Conn]int           // heartbeat queries received on each connection
	heartbeatSeen chan struct{}              // closed (and replaced) on every heartbeat
	clusterAsks   int                        // C - received
	clusterSeen   chan struct{}              // closed (and replaced) on every C -
	ended         map[net.Conn]chan struct{} // closed when the client closes the connection (or it fails)
	frozen        map[net.Conn]bool          // connections whose heartbeats go unanswered (freeze)
}

type fakeLine struct {
	nc   net.Conn
	text string
}

func startFake(t *testing.T) *fakeServer {
	t.Helper()
	return startFakeAt(t, "127.0.0.1:0")
}

// startFakeAt is startFake on a given address (a server coming back).
func startFakeAt(t *testing.T, addr string) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serveFake(t, ln)
}

// serveFake is startFake on a listener of the caller's (a TLS one).
func serveFake(t *testing.T, ln net.Listener) *fakeServer {
	t.Helper()
	s := &fakeServer{
		t: t, ln: ln, lines: make(chan fakeLine, 1024),
		heartbeats: make(map[net.Conn]int), heartbeatSeen: make(chan struct{}),
		clusterSeen: make(chan struct{}), ended: make(map[net.Conn]chan struct{}),
		frozen: make(map[net.Conn]bool),
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			ended := make(chan struct{})
			s.mu.Lock()
			s.conns = append(s.conns, nc)
			s.ended[nc] = ended
			s.mu.Unlock()
			go func() {
				defer close(ended)
				sc := bufio.NewScanner(nc)
				for sc.Scan() {
					if sc.Text() == heartbeatLine {
						s.heartbeat(nc)
						continue
					}
					if sc.Text() == clusterLine {
						s.clusterAsked(nc)
						continue
					}
					s.lines <- fakeLine{nc, sc.Text()}
				}
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

// heartbeatLine is a heartbeat as the fake reads it.
const heartbeatLine = "Q " + HeartbeatKey

// heartbeat counts a heartbeat that came on nc and, unless the fake plays a
// hung server, answers it.
func (s *fakeServer) heartbeat(nc net.Conn) {
	s.mu.Lock()
	s.heartbeats[nc]++
	close(s.heartbeatSeen)
	s.heartbeatSeen = make(chan struct{})
	frozen := s.frozen[nc]
	s.mu.Unlock()
	if !s.hung.Load() && !frozen {
		// The client may have closed nc meanwhile; the test does not care.
		_, _ = nc.Write([]byte(heartbeatLine + " FREE\n"))
	}
}

// clusterLine is an address refresh as the fake reads it.
const clusterLine = "C -"

// oldServerAnswer is what a server from before protocol 1.3 answers C and
// M: it cannot read their op.
const oldServerAnswer = "? - ERR badrequest op must be A, R, K, Q or H"

// setCluster makes the fake answer C - with what answer returns for the
// connection it came on: a line without its LF, or "" for no answer.
func (s *fakeServer) setCluster(answer func(nc net.Conn) string) {
	s.cluster.Store(&answer)
}

// setMembers makes the fake answer C - with the client addresses addrs.
func (s *fakeServer) setMembers(addrs ...string) {
	s.setCluster(func(net.Conn) string { return "C - OK " + strings.Join(addrs, ",") })
}

// clusterAsked counts a C - and answers it.
func (s *fakeServer) clusterAsked(nc net.Conn) {
	answer := oldServerAnswer
	if f := s.cluster.Load(); f != nil {
		answer = (*f)(nc)
	}
	if answer != "" {
		_, _ = nc.Write([]byte(answer + "\n"))
	}
	// Counted once answered, so that a test that waited for a count sees
	// the answer's effect next.
	s.mu.Lock()
	s.clusterAsks++
	close(s.clusterSeen)
	s.clusterSeen = make(chan struct{})
	s.mu.Unlock()
}

// clusterCount is the number of C - received so far.
func (s *fakeServer) clusterCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clusterAsks
}

// waitCluster waits until n C - have come, failing the test after 5 s.
func (s *fakeServer) waitCluster(n int) {
	s.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		s.mu.Lock()
		got, seen := s.clusterAsks, s.clusterSeen
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-seen:
		case <-timeout:
			s.t.Fatalf("fake server: %d C - within 5s, want %d", got, n)
		}
	}
}

// heartbeatCounts returns how many heartbeats came on each connection
// accepted so far, those with none included.
func (s *fakeServer) heartbeatCounts() map[net.Conn]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := make(map[net.Conn]int, len(s.conns))
	for _, nc := range s.conns {
		counts[nc] = s.heartbeats[nc]
	}
	return counts
}

// waitHeartbeats waits until n heartbeats have come on nc, failing the test
// after 5 s.
func (s *fakeServer) waitHeartbeats(nc net.Conn, n int) {
	s.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		s.mu.Lock()
		got, seen := s.heartbeats[nc], s.heartbeatSeen
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-seen:
		case <-timeout:
			s.t.Fatalf("fake server: %d heartbeats on %v within 5s, want %d", got, nc.RemoteAddr(), n)
		}
	}
}

// waitConns waits until the fake has accepted n connections, failing the
// test after 5 s.
func (s *fakeServer) waitConns(n int) {
	s.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		got := len(s.conns)
		s.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("fake server: %d connections within 5s, want %d", got, n)
		}
	}
}

// waitEnded waits until the stream of nc ends (the client closed it),
// failing the test after 5 s.
func (s *fakeServer) waitEnded(nc net.Conn) {
	s.t.Helper()
	s.mu.Lock()
	ended := s.ended[nc]
	s.mu.Unlock()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		s.t.Fatalf("fake server: the client did not close its connection %v within 5s", nc.RemoteAddr())
	}
}

// freeze makes nc play a hung server: its heartbeats go unanswered (what
// else it gets is the test's to answer, or not).
func (s *fakeServer) freeze(nc net.Conn) {
	s.mu.Lock()
	s.frozen[nc] = true
	s.mu.Unlock()
}

// openCount is the number of accepted connections whose stream has not
// ended.
func (s *fakeServer) openCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, nc := range s.conns {
		select {
		case <-s.ended[nc]:
		default:
			n++
		}
	}
	return n
}

// accepted returns the connections accepted so far.
func (s *fakeServer) accepted() []net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Conn(nil), s.conns...)
}

func (s *fakeServer) close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nc := range s.conns {
		nc.Close()
	}
}

// next returns the next request line, failing the test after 5 s.
func (s *fakeServer) next() fakeLine {
	s.t.Helper()
	select {
	case l := <-s.lines:
		return l
	case <-time.After(5 * time.Second):
		s.t.Fatal("fake server: no request within 5s")
		return fakeLine{}
	}
}

// nothing fails the test if a request arrives within d.
func (s *fakeServer) nothing(d time.Duration) {
	s.t.Helper()
	select {
	case l := <-s.lines:
		s.t.Fatalf("fake server: unexpected request %q", l.text)
	case <-time.After(d):
	}
}

func reply(t *testing.T, nc net.Conn, lines ...string) {
	t.Helper()
	if _, err := nc.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
}

// recv waits up to 5 s for a caller's result.
func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not return within 5s")
		return nil
	}
}

func newTestClient(t *testing.T, addrs ...string) *Client {
	t.Helper()
	return newTestClientWith(t, addrs)
}

// newTestClientWith is newTestClient with options of the test's own.
func newTestClientWith(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addrs, append([]Option{WithDialTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestPairingOutOfOrder: answers of different keys come back in reverse
// order, answers of the same key in order, all on one connection; every
// caller gets its own.
func TestPairingOutOfOrder(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	ctx := ctxFor(t, 10*time.Second)

	keys := []string{"a", "b", "a", "c", "a"}
	type res struct {
		i     int
		token uint64
		err   error
	}
	results := make(chan res, len(keys))
	var got []fakeLine
	for i, k := range keys {
		go func() {
			l, err := c.Acquire(ctx, k, time.Second, WaitForever)
			if err != nil {
				results <- res{i, 0, err}
				return
			}
			results <- res{i, l.Token(), nil}
		}()
		// One at a time, so that the order on the wire is known.
		got = append(got, s.next())
	}
	// Answer on the connection each came on: tokens 100+i, the same key's
	// answers in request order but behind the others.
	byKey := make(map[string][]int)
	for i, l := range got {
		f := strings.Fields(l.text)
		if len(f) != 5 || f[0] != "A" || f[1] != keys[i] || f[2] != "1000" {
			t.Fatalf("request %d: %q", i, l.text)
		}
		byKey[keys[i]] = append(byKey[keys[i]], i)
	}
	for _, k := range []string{"c", "b", "a"} {
		for _, i := range byKey[k] {
			reply(t, got[i].nc, fmt.Sprintf("A %s OK %d", k, 100+i))
		}
	}
	for range keys {
		var r res
		select {
		case r = <-results:
		case <-time.After(5 * time.Second):
			t.Fatal("a caller got no answer within 5s")
		}
		if r.err != nil || r.token != uint64(100+r.i) {
			t.Fatalf("caller %d (key %s): token %d, %v; want %d", r.i, keys[r.i], r.token, r.err, 100+r.i)
		}
	}
}

// TestUnexpectedAnswerDropsConnection: an answer nobody asked for means the
// stream cannot be trusted; the request on it is retried on the other
// connection.
func TestUnexpectedAnswerDropsConnection(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	ctx := ctxFor(t, 10*time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctx, "k")
		done <- err
	}()
	first := s.next()
	reply(t, first.nc, "Q other FREE")
	second := s.next()
	if second.text != "Q k" || second.nc == first.nc {
		t.Fatalf("retry %q on the same connection: %v", second.text, second.nc == first.nc)
	}
	reply(t, second.nc, "Q k FREE")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestAbandonedGrantIsReleased: a caller whose context ends before the grant
// arrives does not hold the lock; the client releases it with its token.
func TestAbandonedGrantIsReleased(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", 5*time.Second, WaitForever)
		done <- err
	}()
	req := s.next()
	if !strings.HasPrefix(req.text, "A k 5000 0 ") {
		t.Fatalf("request %q", req.text)
	}
	cancel()
	if err := recv(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire after cancel: %v", err)
	}
	reply(t, req.nc, "A k OK 4242")
	rel := s.next()
	if rel.text != "R k 4242" {
		t.Fatalf("after an abandoned grant: %q, want R k 4242", rel.text)
	}
	reply(t, rel.nc, "R k OK")
}

// TestWaitFollowsDeadline: the wait sent is the smaller of the wait asked
// for and the context's time left; a try-lock stays -1.
func TestWaitFollowsDeadline(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	for _, tc := range []struct {
		ctxd time.Duration // 0: no deadline
		wait time.Duration
		lo   int64 // wait_ms bounds
		hi   int64
	}{
		{0, WaitForever, 0, 0},
		{0, 1500 * time.Microsecond, 2, 2}, // rounded up
		{0, NoWait, -1, -1},
		{2 * time.Second, NoWait, -1, -1},
		{2 * time.Second, WaitForever, 1500, 2000},
		{2 * time.Second, time.Hour, 1500, 2000},
		{time.Hour, 300 * time.Millisecond, 300, 300},
	} {
		ctx := context.Background()
		if tc.ctxd > 0 {
			ctx = ctxFor(t, tc.ctxd)
		}
		done := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, "w", time.Second, tc.wait)
			if err == nil && l.Token() != 9 {
				err = fmt.Errorf("token %d", l.Token())
			}
			done <- err
		}()
		req := s.next()
		var lease, wait int64
		if _, err := fmt.Sscanf(req.text, "A w %d %d", &lease, &wait); err != nil {
			t.Fatalf("%q: %v", req.text, err)
		}
		if wait < tc.lo || wait > tc.hi {
			t.Errorf("ctx %v, wait %v: wait_ms %d, want %d..%d", tc.ctxd, tc.wait, wait, tc.lo, tc.hi)
		}
		reply(t, req.nc, "A w OK 9")
		if err := recv(t, done); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeadlineIsTimeout: a context deadline that ends a waiting acquire is
// both ErrTimeout and context.DeadlineExceeded, whether the server's
// TIMEOUT or the deadline comes first.
func TestDeadlineIsTimeout(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())

	// The server answers TIMEOUT at once.
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctxFor(t, time.Second), "d", time.Second, WaitForever)
		done <- err
	}()
	req := s.next()
	reply(t, req.nc, "A d TIMEOUT")
	if err := recv(t, done); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TIMEOUT under a deadline: %v", err)
	}

	// The server never answers.
	start := time.Now()
	_, err := c.Acquire(ctxFor(t, 200*time.Millisecond), "d", time.Second, WaitForever)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("deadline of 200ms returned after %v", el)
	}
	// The server answers the abandoned request (as a real one would, when
	// its wait_ms runs out), so that the next answer of (A, d) on that
	// connection is the next request's.
	req = s.next()
	reply(t, req.nc, "A d TIMEOUT")

	// A wait of its own ending is ErrTimeout only.
	go func() {
		_, err := c.Acquire(context.Background(), "d", time.Second, 100*time.Millisecond)
		done <- err
	}()
	req = s.next()
	reply(t, req.nc, "A d TIMEOUT")
	if err := recv(t, done); !errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait ran out: %v", err)
	}
}

// TestUnavailableRetried: ERR unavailable is retried with backoff; other
// ERR answers reach the caller as *ServerError.
func TestUnavailableRetried(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctxFor(t, 10*time.Second), "u")
		done <- err
	}()
	for range 3 {
		req := s.next()
		reply(t, req.nc, "Q u ERR unavailable no leader for this key right now, retry")
	}
	req := s.next()
	reply(t, req.nc, "Q u FREE")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}

	go func() {
		_, err := c.Query(ctxFor(t, 10*time.Second), "u")
		done <- err
	}()
	req = s.next()
	reply(t, req.nc, "Q u ERR overloaded too many")
	err := recv(t, done)
	var se *ServerError
	if !errors.As(err, &se) || se.Code != "overloaded" || se.Text != "too many" || errors.Is(err, ErrUnavailable) {
		t.Fatalf("overloaded: %v", err)
	}

	// Unavailable until the deadline: the error says so.
	go func() {
		_, err := c.Query(ctxFor(t, 300*time.Millisecond), "u")
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("unavailable until the deadline: %v", err)
			}
			return
		case l := <-s.lines:
			reply(t, l.nc, "Q u ERR unavailable no leader")
		case <-time.After(5 * time.Second):
			t.Fatal("query did not end")
		}
	}
}

// TestUnavailableTriesAnotherNode: a preferred node that answers ERR
// unavailable (say it is cut off from the others, who elected a new leader)
// is not asked again at once: the retry goes to another node, whose MOVED
// leads to the new leader.
func TestUnavailableTriesAnotherNode(t *testing.T) {
	old, other := startFake(t), startFake(t)
	c := newTestClient(t, old.addr(), other.addr())
	old.waitConns(1)
	other.waitConns(1)
	done := make(chan error, 1)
	query := func() {
		go func() {
			_, err := c.Query(ctxFor(t, 10*time.Second), "u")
			done <- err
		}()
	}
	// Make old the preferred node: whoever is asked first sends the client
	// there.
	query()
	var req fakeLine
	select {
	case req = <-other.lines:
	case req = <-old.lines:
	case <-time.After(5 * time.Second):
		t.Fatal("no request")
	}
	reply(t, req.nc, "Q u MOVED "+old.addr())
	req = old.next()
	reply(t, req.nc, "Q u FREE")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		query()
		req = old.next() // preferred
		reply(t, req.nc, "Q u ERR unavailable leadership is changing or unknown, retry")
		req = other.next()
		reply(t, req.nc, "Q u MOVED "+old.addr())
		req = old.next()
		reply(t, req.nc, "Q u FREE")
		if err := recv(t, done); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMovedToLostNodeRedialsAtOnce: a node the client lost (it was down
// when the connection last dialled) that comes back and is named by MOVED
// is dialled again at once, not at the next scheduled redial.
func TestMovedToLostNodeRedialsAtOnce(t *testing.T) {
	back, other := startFake(t), startFake(t)
	addr := back.addr()
	long := func(o *options) { o.redialInterval = time.Minute }
	c := newTestClientWith(t, []string{addr, other.addr()}, long)
	back.waitConns(1)
	other.waitConns(1)
	back.close() // down: the connection's redial fails, the next is a minute away
	lost := c.conns[0]
	for deadline := time.Now().Add(5 * time.Second); lost.state.Load() != stateDown; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection to the closed server is not down")
		}
	}
	back = startFakeAt(t, addr)

	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctxFor(t, 10*time.Second), "m")
		done <- err
	}()
	// other sends it to the node that came back, as often as it is asked,
	// until the client has dialled that node: seconds, not the minute.
	timeout := time.After(5 * time.Second)
	for served := false; !served; {
		select {
		case req := <-other.lines:
			reply(t, req.nc, "Q m MOVED "+addr)
		case req := <-back.lines:
			reply(t, req.nc, "Q m FREE")
			served = true
		case <-timeout:
			t.Fatal("the node named by MOVED was not dialled again within 5 s")
		}
	}
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestMovedFollowedAndPreferred: MOVED to a node the client does not know
// makes it dial that node, send there, and send there first from then on.
func TestMovedFollowedAndPreferred(t *testing.T) {
	follower, leader := startFake(t), startFake(t)
	c := newTestClient(t, follower.addr())
	ctx := ctxFor(t, 10*time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctx, "m")
		done <- err
	}()
	req := follower.next()
	reply(t, req.nc, "Q m MOVED "+leader.addr())
	req = leader.next()
	reply(t, req.nc, "Q m FREE")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		go func() {
			_, err := c.Query(ctx, "m")
			done <- err
		}()
		req = leader.next()
		reply(t, req.nc, "Q m FREE")
		if err := recv(t, done); err != nil {
			t.Fatal(err)
		}
	}
	follower.nothing(100 * time.Millisecond)
}

// TestReleaseNotHeldAfterLostConnection: when the connection fails under a
// release, the release is sent again; NOTHELD then means the first one
// went through.
func TestReleaseNotHeldAfterLostConnection(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	done := make(chan error, 1)
	go func() { done <- c.Release(context.Background(), "r", 77) }()
	req := s.next()
	if req.text != "R r 77" {
		t.Fatalf("%q", req.text)
	}
	req.nc.Close()
	req = s.next()
	if req.text != "R r 77" {
		t.Fatalf("retry %q", req.text)
	}
	reply(t, req.nc, "R r NOTHELD")
	if err := recv(t, done); err != nil {
		t.Fatalf("release: %v", err)
	}
	// Without doubt, NOTHELD is ErrNotHeld.
	go func() { done <- c.Release(context.Background(), "r", 77) }()
	req = s.next()
	reply(t, req.nc, "R r NOTHELD")
	if err := recv(t, done); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release: %v", err)
	}
}

// TestForceReleaseNotRepeated: a tokenless release whose connection fails is
// not sent again (it could free the next holder).
func TestForceReleaseNotRepeated(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	done := make(chan error, 1)
	go func() { done <- c.ForceRelease(context.Background(), "f") }()
	req := s.next()
	if req.text != "R f" {
		t.Fatalf("%q", req.text)
	}
	req.nc.Close()
	if err := recv(t, done); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("force-release on a lost connection: %v", err)
	}
	s.nothing(300 * time.Millisecond)
}

func TestBadArguments(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	ctx := context.Background()
	for name, err := range map[string]error{
		"empty key":  func() error { _, err := c.Acquire(ctx, "", time.Second, 0); return err }(),
		"space":      func() error { _, err := c.Acquire(ctx, "a b", time.Second, 0); return err }(),
		"long key":   func() error { _, err := c.Query(ctx, strings.Repeat("k", 251)); return err }(),
		"lease 0":    func() error { _, err := c.Acquire(ctx, "k", 0, 0); return err }(),
		"lease 25h":  func() error { _, err := c.Acquire(ctx, "k", 25*time.Hour, 0); return err }(),
		"wait 25h":   func() error { _, err := c.Acquire(ctx, "k", time.Second, 25*time.Hour); return err }(),
		"token 0":    c.Release(ctx, "k", 0),
		"extend 0":   c.Extend(ctx, "k", 1, 0),
		"extend tok": c.Extend(ctx, "k", 0, time.Second),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	s.nothing(100 * time.Millisecond)
	for _, addrs := range [][]string{nil, {""}, {"nohostport"}} {
		if _, err := New(addrs); err == nil {
			t.Errorf("New(%q): no error", addrs)
		}
	}
}

func TestCannotConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newTestClient(t, addr)
	start := time.Now()
	_, err = c.Acquire(context.Background(), "k", time.Second, 0)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("acquire with no server: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v", el)
	}
}

func TestClosed(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), "k", time.Second, 0)
		done <- err
	}()
	s.next()
	c.Close()
	if err := recv(t, done); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire under Close: %v", err)
	}
	if _, err := c.Query(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("query after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
