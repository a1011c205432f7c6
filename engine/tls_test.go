package engine

import (
	"context"
	"crypto/tls"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
	"github.com/baton-dev/baton/tools/harness"
)

// These tests run the TLS listener in-process on a Node without Raft
// (testNode): the transport's own work, the handshake, the reader and the
// writer, closing, the limits of connections and of unsent answers. What the
// node serves over TLS with Raft underneath is cmd/batond's end-to-end
// security tests.

// startTestTLS serves n over TLS on a free port with a certificate of ca;
// with clientCA, clients must present a certificate it signed.
func startTestTLS(t *testing.T, n *Node, ca *harness.CA, clientCA *harness.CA) *tlsServer {
	t.Helper()
	cert := ca.Issue("node")
	cfg := &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCA.Pool, tls.RequireAndVerifyClientCert
	}
	ts, err := startTLS(n, harness.FreeAddr(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ts.stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return ts
}

// expectEnd fails t unless the server ends c (EOF or reset) within d.
func expectEnd(t *testing.T, c *harness.Conn, d time.Duration) {
	t.Helper()
	line, err := c.ReadLine(d)
	if err == nil {
		t.Fatalf("got %q, want the connection closed", line)
	}
	if harness.IsTimeout(err) {
		t.Fatalf("the connection is still open after %v", d)
	}
}

func TestTLSServes(t *testing.T) {
	n := testNode(t, "")
	ca := harness.NewCA(t, "ca")
	ts := startTestTLS(t, n, ca, nil)
	c := harness.DialTLS(t, ts.ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
	c.Send("Q a", "Q b", "A bad 0 0", "x")
	got, err := c.ReadLines(4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Q a FREE", "Q b FREE", "A bad ERR badrequest lease_ms must be 1..86400000",
		"? - ERR badrequest op must be A, R, K, Q, H, C, M, S, W or U"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	// A line split over two writes (two TLS records) waits for its end.
	if _, err := c.Write([]byte("Q sp")); err != nil {
		t.Fatal(err)
	}
	c.ExpectNothing(t, 100*time.Millisecond)
	c.Send("lit")
	c.Expect(t, "Q split FREE")
}

// TestTLSClosing: a refused secret and an overlong line are answered, then
// the server closes the connection, as on the plain port.
func TestTLSClosing(t *testing.T) {
	ca := harness.NewCA(t, "ca")
	client := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}
	for _, tc := range []struct {
		name, secret, send, answer string
	}{
		{"request before H", "s3cret", "Q k\nH s3cret\n", "H - ERR auth"},
		{"wrong secret", "s3cret", "H nope\n", "H - ERR auth"},
		{"line too long", "", strings.Repeat("x", 3000), "? - ERR toolong line longer than 1024 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testNode(t, tc.secret)
			ts := startTestTLS(t, n, ca, nil)
			c := harness.DialTLS(t, ts.ln.Addr().String(), client)
			if _, err := c.Write([]byte(tc.send)); err != nil {
				t.Fatal(err)
			}
			c.Expect(t, tc.answer)
			expectEnd(t, c, 5*time.Second)
			waitConns(t, ts, 0)
		})
	}
	t.Run("right secret", func(t *testing.T) {
		ts := startTestTLS(t, testNode(t, "s3cret"), ca, nil)
		c := harness.DialTLS(t, ts.ln.Addr().String(), client).Hello(t, "s3cret")
		c.Send("Q k")
		c.Expect(t, "Q k FREE")
	})
}

func TestTLSClientCertificate(t *testing.T) {
	ca, clients, other := harness.NewCA(t, "ca"), harness.NewCA(t, "clients"), harness.NewCA(t, "other")
	ts := startTestTLS(t, testNode(t, ""), ca, clients)
	addr := ts.ln.Addr().String()

	c := harness.DialTLS(t, addr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1",
		Certificates: []tls.Certificate{clients.Issue("app").TLS}})
	c.Send("Q k")
	c.Expect(t, "Q k FREE")

	stranger, ownCA := other.Issue("stranger").TLS, ca.Issue("app").TLS
	for name, cert := range map[string]*tls.Certificate{
		"no certificate":                     nil,
		"certificate of another CA":          &stranger,
		"certificate of the server's own CA": &ownCA,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}
			if cert != nil {
				// Sent even though the server names the CAs it takes (a
				// Go client would send none that does not fit).
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
			}
			conn, err := tls.Dial("tcp", addr, cfg)
			if err == nil {
				// TLS 1.3: the client's part of the handshake is over before
				// the server checks its certificate; the refusal comes next.
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = conn.Write([]byte("Q k\n"))
				_, err = io.ReadAll(conn)
			}
			if err == nil {
				t.Fatal("served without a client certificate the CA signed")
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestTLSCutsOffNonReader: a client that stops reading is disconnected, as
// on the plain port, once more than MaxUnsentPerConn of answers wait for it
// (queued, and the write under way), or once the node holds more than
// MaxUnsent of unsent answers and this connection has the most; the
// limit hit is logged and its connection's state is closed.
func TestTLSCutsOffNonReader(t *testing.T) {
	text := []byte(strings.Repeat("x", 1000))
	answer := codec.Response{Op: 'Q', Key: []byte("k"), Status: codec.StatusErr, Code: []byte("internal"), Text: text}
	// flood queues answers as the shards would, far more than the socket
	// buffers take: the writer blocks, and what waits grows past the limit.
	flood := func(t *testing.T, cs *connState) {
		for sent := 0; sent < 32<<20 && !cs.isClosed(); sent += len(text) {
			cs.send(&answer, nil)
		}
	}
	// behindSmallWrite has the writer block on a write of 32 answers, half
	// of the node's limit, then queues the rest behind it: the limit counts
	// those too.
	behindSmallWrite := func(t *testing.T, cs *connState) {
		taken := func() bool {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			return cs.out == nil
		}
		for sent := 0; ; sent += 32 * len(text) {
			if sent > 64<<20 {
				t.Fatal("the socket never stopped taking answers")
			}
			for range 32 {
				cs.send(&answer, nil)
			}
			// Taken at once while the writer keeps up; left queued for a
			// while means the write before them blocks on the client.
			deadline := time.Now().Add(200 * time.Millisecond)
			for !taken() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if !taken() {
				break
			}
		}
		for sent := 0; sent < 1<<20; sent += len(text) {
			cs.send(&answer, nil)
		}
	}
	onTheNode := withLimits(func(l *Limits) { l.MaxUnsentPerConn, l.MaxUnsent = 1<<30, 64<<10 })
	for _, tc := range []struct {
		name   string
		limits Limits
		fill   func(*testing.T, *connState)
		limit  limitKind
	}{
		{"per connection", withLimits(func(l *Limits) { l.MaxUnsentPerConn = 1 << 20 }), flood, limitUnsentPerConn},
		{"on the node", onTheNode, flood, limitUnsent},
		{"on the node, queued behind a small write", onTheNode, behindSmallWrite, limitUnsent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := limitedShard(t, tc.limits).node
			ca := harness.NewCA(t, "ca")
			ts := startTestTLS(t, n, ca, nil)
			c := harness.DialTLS(t, ts.ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
			c.Send("Q k")
			c.Expect(t, "Q k FREE")
			cs := waitConns(t, ts, 1)[0].cs

			tc.fill(t, cs)
			// The sweeper starts only now, most likely while the writer is
			// blocked: it cuts the connection off from outside (recheck).
			stop, swept := make(chan struct{}), make(chan struct{})
			go func() { defer close(swept); n.adm.unsent.runSweeper(stop) }()
			defer func() { close(stop); <-swept }()
			waitConns(t, ts, 0)
			if !cs.isClosed() {
				t.Fatal("the connection ended but its state is not closed")
			}
			if limit, cut := cs.cutOffBy(); !cut || limit != tc.limit {
				t.Errorf("cut off %v by limit %d, want limit %d", cut, limit, tc.limit)
			}
			if n.adm.hits.counts[tc.limit].Load() != 1 {
				t.Errorf("%d hits of the limit logged, want 1", n.adm.hits.counts[tc.limit].Load())
			}
			if sum := n.adm.unsent.sum.Load(); sum != 0 {
				t.Errorf("%d unsent bytes left in the ledger", sum)
			}
		})
	}
}

// TestTLSConnLimitAndCounts: TLS connections count against MaxConns with
// the others (one past it is closed at once) and in the connection series.
func TestTLSConnLimitAndCounts(t *testing.T) {
	n := limitedShard(t, withLimits(func(l *Limits) { l.MaxConns = 1 })).node
	ca := harness.NewCA(t, "ca")
	ts := startTestTLS(t, n, ca, nil)
	client := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}
	c := harness.DialTLS(t, ts.ln.Addr().String(), client)
	c.Send("Q k")
	c.Expect(t, "Q k FREE")
	if open, accepted := n.metrics.connsOpen.Load(), n.metrics.connsAccepted.Get(); open != 1 || accepted != 1 {
		t.Fatalf("%d connections open, %d accepted; want 1 and 1", open, accepted)
	}

	if conn, err := tls.Dial("tcp", ts.ln.Addr().String(), client); err == nil {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte("Q k\n"))
		b, err := io.ReadAll(conn)
		conn.Close()
		if err == nil && len(b) > 0 {
			t.Fatalf("a connection past MaxConns was served: %q", b)
		}
	}
	if n.adm.hits.counts[limitConns].Load() != 1 {
		t.Errorf("%d refused connections logged, want 1", n.adm.hits.counts[limitConns].Load())
	}
	c.Send("Q k") // the first one is still served
	c.Expect(t, "Q k FREE")

	_ = c.Close()
	waitConns(t, ts, 0)
	waitFor(t, "the connection counted out", func() bool { return n.adm.conns.Load() == 0 && n.metrics.connsOpen.Load() == 0 })
	c = harness.DialTLS(t, ts.ln.Addr().String(), client) // room again
	c.Send("Q k")
	c.Expect(t, "Q k FREE")
}

// waitConns waits until ts has want connections past their handshake, and
// returns them.
func waitConns(t *testing.T, ts *tlsServer, want int) []*streamConn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conns := ts.streams.list()
		if len(conns) == want {
			return conns
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d TLS connections, want %d", len(conns), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTLSStop: stopping the listener ends every connection, abandoning
// its state as a disconnect does, and takes no more.
func TestTLSStop(t *testing.T) {
	ca := harness.NewCA(t, "ca")
	cert := ca.Issue("node")
	ts, err := startTLS(testNode(t, ""), harness.FreeAddr(t), &tls.Config{Certificates: []tls.Certificate{cert.TLS}})
	if err != nil {
		t.Fatal(err)
	}
	addr := ts.ln.Addr().String()
	client := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}
	c := harness.DialTLS(t, addr, client)
	c.Send("Q k")
	c.Expect(t, "Q k FREE")
	cs := waitConns(t, ts, 1)[0].cs
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.stop(ctx); err != nil {
		t.Fatal(err)
	}
	expectEnd(t, c, 5*time.Second)
	if !cs.isClosed() {
		t.Error("a connection outlived the stop")
	}
	if conn, err := tls.Dial("tcp", addr, client); err == nil {
		conn.Close()
		t.Error("a connection was accepted after the stop")
	}
}
