package client

// The address refresh (refresh.go) against the fake server: when the
// client asks C - (on connecting, on a lost connection, on MOVED to a node
// it does not know, every refresh interval), what it makes of the answer,
// and that nothing sent on a connection it leaves is lost.

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// quickRefresh lets refreshes follow each other closely; the period stays
// long, so that only the events under test make the client ask.
func quickRefresh(o *options) { o.refreshGap = 10 * time.Millisecond }

// refreshEvery makes the period d (and the gap short).
func refreshEvery(d time.Duration) Option {
	return func(o *options) {
		o.refreshInterval = d
		o.refreshGap = 10 * time.Millisecond
	}
}

// waitAddrs waits until the pool's connections are to want (in any
// order), failing the test after 5 s.
func waitAddrs(t *testing.T, c *Client, want ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got = slices.Sorted(slices.Values(c.addrs())); slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("the pool's addresses are %q after 5s, want %q", got, want)
}

// waitAsked waits until the fakes together have been asked C - n times,
// failing the test after 5 s.
func waitAsked(t *testing.T, n int, fakes ...*fakeServer) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		got = 0
		for _, s := range fakes {
			got += s.clusterCount()
		}
		if got >= n {
			return
		}
	}
	t.Fatalf("C - asked %d times within 5s, want %d", got, n)
}

// queryOn sends Q key through c and answers it FREE on whichever of the
// fakes it reaches (following the client through nothing else); it returns
// the fake that served it.
func queryOn(t *testing.T, c *Client, key string, fakes ...*fakeServer) *fakeServer {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctxFor(t, 10*time.Second), key)
		done <- err
	}()
	var served *fakeServer
	timeout := time.After(5 * time.Second)
	for served == nil {
		for _, f := range fakes {
			select {
			case l := <-f.lines:
				if l.text != "Q "+key {
					t.Fatalf("%s got %q, want Q %s", f.addr(), l.text, key)
				}
				reply(t, l.nc, "Q "+key+" FREE")
				served = f
			default:
			}
		}
		select {
		case <-timeout:
			t.Fatalf("Q %s reached none of the fakes within 5s", key)
		case <-time.After(time.Millisecond):
		}
	}
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	return served
}

// TestRefreshOnConnect: once connected, the client asks C - and moves its
// connections to the addresses it names; the connections to the address it
// was given, which is not among them, are closed, and requests go to the
// new ones.
func TestRefreshOnConnect(t *testing.T) {
	seed, a, b := startFake(t), startFake(t), startFake(t)
	for _, s := range []*fakeServer{seed, a, b} {
		s.setMembers(a.addr(), b.addr())
	}
	c := newTestClientWith(t, []string{seed.addr()}, quickRefresh)
	seed.waitCluster(1)
	waitAddrs(t, c, a.addr(), b.addr())
	// The second connection to seed may have been retired before it was
	// dialled: every one that was is closed.
	for _, nc := range seed.accepted() {
		seed.waitEnded(nc)
	}
	for i := range 4 {
		if got := queryOn(t, c, "k", seed, a, b); got == seed {
			t.Fatalf("query %d went to the address the cluster no longer names", i)
		}
	}
}

// TestRefreshOnLostConnection: a connection that is lost makes the client
// ask again; the node that went is replaced by the one the answer names.
func TestRefreshOnLostConnection(t *testing.T) {
	a, b, d := startFake(t), startFake(t), startFake(t)
	all := []*fakeServer{a, b, d}
	for _, s := range all {
		s.setMembers(a.addr(), b.addr())
	}
	c := newTestClientWith(t, []string{a.addr(), b.addr()}, quickRefresh)
	waitAsked(t, 1, a, b) // on connecting
	b.waitConns(1)        // up, so that closing b loses it
	for _, s := range all {
		s.setMembers(a.addr(), d.addr())
	}
	asked := a.clusterCount()
	b.close() // b leaves: its connection is lost, and it takes no new one
	a.waitCluster(asked + 1)
	waitAddrs(t, c, a.addr(), d.addr())
	d.waitConns(1)
	if got := queryOn(t, c, "k", a, d); got != a && got != d {
		t.Fatalf("served by %v", got)
	}
}

// TestRefreshOnMovedToUnknownNode: MOVED to a node the client does not
// know is followed, and makes the client ask for the members, whose answer
// then replaces the node the client no longer needs.
func TestRefreshOnMovedToUnknownNode(t *testing.T) {
	a, b, d := startFake(t), startFake(t), startFake(t)
	all := []*fakeServer{a, b, d}
	for _, s := range all {
		s.setMembers(a.addr(), b.addr())
	}
	c := newTestClientWith(t, []string{a.addr(), b.addr()}, quickRefresh)
	waitAsked(t, 1, a, b) // on connecting
	for _, s := range all {
		s.setMembers(b.addr(), d.addr())
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctxFor(t, 10*time.Second), "m")
		done <- err
	}()
	var req fakeLine
	select {
	case req = <-a.lines:
	case req = <-b.lines:
	case <-time.After(5 * time.Second):
		t.Fatal("no request")
	}
	reply(t, req.nc, "Q m MOVED "+d.addr())
	req = d.next()
	reply(t, req.nc, "Q m FREE")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	waitAddrs(t, c, b.addr(), d.addr())
	for _, nc := range a.accepted() {
		a.waitEnded(nc)
	}
}

// TestRefreshPeriod: with nothing else happening, the client asks every
// refresh interval, and takes what the answer says.
func TestRefreshPeriod(t *testing.T) {
	a, b := startFake(t), startFake(t)
	a.setMembers(a.addr())
	c := newTestClientWith(t, []string{a.addr()}, refreshEvery(20*time.Millisecond))
	a.waitCluster(5) // one on connecting, then one every 20 ms
	if got := c.addrs(); !slices.Equal(got, []string{a.addr(), a.addr()}) {
		t.Fatalf("pool %q after answers naming only %s", got, a.addr())
	}
	a.setMembers(b.addr())
	waitAddrs(t, c, b.addr(), b.addr())
	b.waitCluster(a.clusterCount() + 2) // it goes on asking, the new node now
}

// TestRefreshOldServer: a server from before protocol 1.3 answers C - with
// "? - ERR badrequest"; the client pairs that answer with its C -, keeps
// its addresses and connections, and serves requests as before, also
// those waiting on the connection at the time. Members says why it has no
// answer.
func TestRefreshOldServer(t *testing.T) {
	s := startFake(t) // answers C - as an old server
	c := newTestClientWith(t, []string{s.addr()}, refreshEvery(20*time.Millisecond))
	s.waitCluster(1)
	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctxFor(t, 10*time.Second), "k")
		done <- err
	}()
	req := s.next()
	s.waitCluster(s.clusterCount() + 2) // asked and answered while Q k waits
	reply(t, req.nc, "Q k FREE")
	if err := recv(t, done); err != nil {
		t.Fatalf("query on an old server: %v", err)
	}
	if got := c.addrs(); !slices.Equal(got, []string{s.addr(), s.addr()}) {
		t.Fatalf("pool %q, want the address it was given", got)
	}
	if n := len(s.accepted()); n != 2 {
		t.Fatalf("%d connections: the old server's answers to C - cost a connection", n)
	}
	_, err := c.Members(ctxFor(t, 5*time.Second))
	var se *ServerError
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, &se) || se.Code != "badrequest" {
		t.Fatalf("Members on an old server: %v", err)
	}

	// A server whose codec knows C but which does not serve it.
	s.setCluster(func(net.Conn) string { return "C - ERR badrequest unknown request" })
	if _, err := c.Members(ctxFor(t, 5*time.Second)); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Members answered C - ERR badrequest: %v", err)
	}

	// An answer that does not fit C (a server that routes it as a lock
	// request): the refresh fails, the connection stays.
	s.setCluster(func(net.Conn) string { return "C - MOVED 127.0.0.1:1" })
	if _, err := c.Members(ctxFor(t, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "bad answer") {
		t.Fatalf("Members answered C - MOVED: %v", err)
	}
	s.waitCluster(s.clusterCount() + 2)
	if got := queryOn(t, c, "k", s); got != s {
		t.Fatal("query")
	}
	if n := len(s.accepted()); n != 2 {
		t.Fatalf("%d connections: an unreadable answer to C - cost a connection", n)
	}
}

// TestRefreshIgnoresUnusableAnswers: an answer that names no address, or
// one that cannot be read, leaves the pool as it is; Members reports it.
func TestRefreshIgnoresUnusableAnswers(t *testing.T) {
	a, b := startFake(t), startFake(t)
	c := newTestClientWith(t, []string{a.addr(), b.addr()}, refreshEvery(20*time.Millisecond))
	for _, answer := range []string{
		"C - OK",
		"C - OK ,",
		"C - OK nohostport",
		"C - OK " + a.addr() + ",,nohostport",
		"C - OK " + a.addr() + " " + b.addr(),
	} {
		for _, s := range []*fakeServer{a, b} {
			s.setCluster(func(net.Conn) string { return answer })
		}
		// Refreshes run one at a time: two more asks, and the one that
		// got this answer is done with it.
		waitAsked(t, a.clusterCount()+b.clusterCount()+2, a, b)
		if got := slices.Sorted(slices.Values(c.addrs())); !slices.Equal(got, slices.Sorted(slices.Values([]string{a.addr(), b.addr()}))) {
			t.Fatalf("after %q: pool %q", answer, got)
		}
		if addrs, err := c.Members(ctxFor(t, 5*time.Second)); err == nil {
			t.Errorf("Members answered %q: %q, no error", answer, addrs)
		}
	}
	if got := queryOn(t, c, "k", a, b); got == nil {
		t.Fatal("no server")
	}
}

// TestRefreshKeepsRequestsInFlight: a request waiting on a connection that
// a refresh leaves out gets its answer there; the connection takes no new
// request, and closes once it owes nothing.
func TestRefreshKeepsRequestsInFlight(t *testing.T) {
	old, neu := startFake(t), startFake(t)
	old.setMembers(old.addr())
	c := newTestClientWith(t, []string{old.addr()}, refreshEvery(20*time.Millisecond))
	old.waitCluster(1)
	done := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctxFor(t, 10*time.Second), "w", time.Second, WaitForever)
		if err == nil && l.Token() != 5 {
			err = errors.New("wrong token")
		}
		done <- err
	}()
	waiting := old.next()
	old.setMembers(neu.addr())
	waitAddrs(t, c, neu.addr(), neu.addr())
	if got := queryOn(t, c, "k", old, neu); got != neu {
		t.Fatal("a new request went to the connection the refresh left")
	}
	reply(t, waiting.nc, "A w OK 5")
	if err := recv(t, done); err != nil {
		t.Fatalf("acquire waiting across the refresh: %v", err)
	}
	for _, nc := range old.accepted() {
		old.waitEnded(nc)
	}
}

// TestFollowsReplacedMembers: a client made with the addresses of three
// members keeps working while each of them is replaced in turn, until
// none of them is left.
func TestFollowsReplacedMembers(t *testing.T) {
	var nodes []*fakeServer
	for range 6 {
		nodes = append(nodes, startFake(t))
	}
	members := func(list ...*fakeServer) {
		var addrs []string
		for _, s := range list {
			addrs = append(addrs, s.addr())
		}
		for _, s := range nodes {
			s.setMembers(addrs...)
		}
	}
	addrsOf := func(list []*fakeServer) []string {
		var out []string
		for _, s := range list {
			out = append(out, s.addr())
		}
		return out
	}
	current := nodes[:3:3]
	members(current...)
	c := newTestClientWith(t, addrsOf(current), quickRefresh)
	for _, s := range current {
		s.waitConns(1) // up, so that closing it loses a connection
	}
	for i := range 3 {
		gone, added := current[0], nodes[3+i]
		current = append(current[1:len(current):len(current)], added)
		members(current...)
		gone.close()
		waitAddrs(t, c, addrsOf(current)...)
		for range 3 {
			if got := queryOn(t, c, "k", nodes...); !slices.Contains(current, got) {
				t.Fatalf("replacement %d: served by %s, not a member", i+1, got.addr())
			}
		}
	}
}

// TestRefreshTLS: on a TLS client the refresh takes the addresses the
// server names on a TLS connection (its TLS addresses), and the client
// speaks TLS to them.
func TestRefreshTLS(t *testing.T) {
	ca := harness.NewCA(t, "test-ca")
	cert := ca.Issue("fake")
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert.TLS}})
	}
	a, b := serveFake(t, listen()), serveFake(t, listen())
	plain := startFake(t) // what a plain connection would be told
	for _, s := range []*fakeServer{a, b} {
		s.setCluster(func(nc net.Conn) string {
			if _, ok := nc.(*tls.Conn); ok {
				return "C - OK " + b.addr()
			}
			return "C - OK " + plain.addr()
		})
	}
	c := newTestClientWith(t, []string{a.addr()}, WithTLS(&tls.Config{RootCAs: ca.Pool}), quickRefresh)
	waitAddrs(t, c, b.addr(), b.addr())
	if got := queryOn(t, c, "k", a, b, plain); got != b {
		t.Fatalf("served by %s, want the TLS address the refresh named", got.addr())
	}
	if n := len(plain.accepted()); n != 0 {
		t.Fatalf("%d connections to the plain address", n)
	}
}

// TestFixedAddresses: WithFixedAddresses never asks.
func TestFixedAddresses(t *testing.T) {
	a, b := startFake(t), startFake(t)
	a.setMembers(b.addr())
	c := newTestClientWith(t, []string{a.addr()}, WithFixedAddresses(), refreshEvery(time.Millisecond))
	a.waitConns(2)
	if got := queryOn(t, c, "k", a, b); got != a {
		t.Fatal("served elsewhere")
	}
	a.accepted()[0].Close() // a lost connection
	a.waitConns(3)
	if n := a.clusterCount(); n != 0 {
		t.Fatalf("%d C - with fixed addresses", n)
	}
	if got := c.addrs(); !slices.Equal(got, []string{a.addr(), a.addr()}) {
		t.Fatalf("pool %q", got)
	}
	// Members still asks when told to.
	addrs, err := c.Members(ctxFor(t, 5*time.Second))
	if err != nil || !slices.Equal(addrs, []string{b.addr()}) {
		t.Fatalf("Members: %q, %v", addrs, err)
	}
}

// TestMembers: the answer of C - split, with ERR unavailable retried.
func TestMembers(t *testing.T) {
	s := startFake(t)
	c := newTestClientWith(t, []string{s.addr()}, WithFixedAddresses())
	answers := []string{"C - ERR unavailable shutting down", "C - OK 10.0.0.1:7700, 10.0.0.2:7700,[::1]:7700"}
	s.setCluster(func(net.Conn) string {
		a := answers[0]
		if len(answers) > 1 {
			answers = answers[1:]
		}
		return a
	})
	addrs, err := c.Members(ctxFor(t, 5*time.Second))
	if want := []string{"10.0.0.1:7700", "10.0.0.2:7700", "[::1]:7700"}; err != nil || !slices.Equal(addrs, want) {
		t.Fatalf("Members: %q, %v; want %q", addrs, err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Members(ctx); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "baton: members: ") {
		t.Fatalf("Members, cancelled: %v", err)
	}
}
