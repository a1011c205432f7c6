package main_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// The end of a client's input (docs/protocol.md): a client that pipes its
// requests in and half-closes the connection after the last one (printf
// ... | nc) gets the answer to every request, waits included, and then the
// server closes the connection; only a connection that is really gone (a
// reset) abandons its acquires. On the plain port and over TLS, where the
// end of input is close_notify.

// pipeConn is a client connection that can half-close.
type pipeConn struct {
	nc  net.Conn     // the connection requests go on: raw, or TLS over it
	raw *net.TCPConn // the TCP connection
	r   *bufio.Reader
}

// dialPipe connects to addr, over TLS when cfg is set.
func dialPipe(t *testing.T, addr string, cfg *tls.Config) *pipeConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, harness.DefaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeConn{nc: nc, raw: nc.(*net.TCPConn)}
	t.Cleanup(func() { p.raw.Close() })
	if cfg != nil {
		tc := tls.Client(nc, cfg)
		_ = nc.SetDeadline(time.Now().Add(harness.DefaultTimeout))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		_ = nc.SetDeadline(time.Time{})
		p.nc = tc
	}
	p.r = bufio.NewReader(p.nc)
	return p
}

// send writes the lines in one write.
func (p *pipeConn) send(t *testing.T, lines ...string) {
	t.Helper()
	if _, err := p.nc.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
}

// closeWrite ends the client's input: the TCP connection's FIN, or TLS's
// close_notify.
func (p *pipeConn) closeWrite(t *testing.T) {
	t.Helper()
	if err := p.nc.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// reset closes the TCP connection with a reset, as a client that goes away
// with unread answers (or SO_LINGER 0) does.
func (p *pipeConn) reset(t *testing.T) {
	t.Helper()
	if err := p.raw.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	_ = p.raw.Close()
}

// readLine reads one line within d, without its LF.
func (p *pipeConn) readLine(d time.Duration) (string, error) {
	_ = p.nc.SetReadDeadline(time.Now().Add(d))
	line, err := p.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// readLines reads n lines within d and returns them sorted.
func (p *pipeConn) readLines(t *testing.T, n int, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	var lines []string
	for len(lines) < n {
		line, err := p.readLine(time.Until(deadline))
		if err != nil {
			t.Fatalf("after %d of %d answers (%q): %v", len(lines), n, lines, err)
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return lines
}

// expectEnd fails t unless the server closes the connection within d,
// with nothing more said.
func (p *pipeConn) expectEnd(t *testing.T, d time.Duration) {
	t.Helper()
	line, err := p.readLine(d)
	switch {
	case err == nil:
		t.Fatalf("got %q, want the connection closed", line)
	case harness.IsTimeout(err):
		t.Fatalf("the connection is still open after %v", d)
	}
}

// transport is a port of the node and how to reach it.
type transport struct {
	name string
	addr string
	tls  *tls.Config // nil: plain TCP
}

// halfCloseNode starts a node that serves TLS too, and returns it with its
// two ports.
func halfCloseNode(t *testing.T) (*harness.Node, []transport) {
	t.Helper()
	ca := harness.NewCA(t, "halfclose")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2, TLS: &harness.ServerTLS{Cert: ca.Issue("server")}})
	return n, []transport{{"plain", n.ClientAddr, nil}, {"TLS", n.TLSAddr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}}}
}

// TestHalfClose: a client pipes in a grant of a free key, an acquire that
// waits behind a holder, one that times out, a query and a release, and
// half-closes. It gets every answer: the grant, the query's, the release's
// and the TIMEOUT at once or after their commit, and the waiting acquire's
// grant when the holder releases from another connection; then the server
// closes the connection. Both grants stay with it: the half-close is not a
// disconnect, nothing is released for nobody.
func TestHalfClose(t *testing.T) {
	t.Parallel()
	n, transports := halfCloseNode(t)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			key := func(name string) string { return "halfclose/" + tr.name + "/" + name }
			h := harness.Dial(t, n.ClientAddr)
			held := acquire(t, h, key("held"), 30000)
			busy := acquire(t, h, key("busy"), 30000)

			p := dialPipe(t, tr.addr, tr.tls)
			p.send(t, "A "+key("free")+" 10000 0", "A "+key("held")+" 10000 5000", "A "+key("busy")+" 10000 300",
				"Q "+key("busy"), "R "+key("none"))
			p.closeWrite(t)
			got := p.readLines(t, 4, answerWithin) // sorted: A busy, A free, Q, R
			free := parseU64(t, match(t, got[1], grantPattern(key("free")))[1])
			for i, want := range map[int]string{
				0: "A " + key("busy") + " TIMEOUT",
				2: fmt.Sprintf("Q %s HELD %d ", key("busy"), busy),
				3: "R " + key("none") + " NOTHELD",
			} {
				if !strings.HasPrefix(got[i], want) {
					t.Fatalf("answers %q: want one starting %q", got, want)
				}
			}

			// The acquire of the held key still waits: the holder lets go.
			do(t, h, fmt.Sprintf("R %s %d", key("held"), held), "R "+key("held")+" OK")
			line, err := p.readLine(answerWithin)
			if err != nil {
				t.Fatalf("the waiting acquire was not answered: %v", err)
			}
			granted := parseU64(t, match(t, line, grantPattern(key("held")))[1])
			p.expectEnd(t, answerWithin)

			queryHeld(t, h, key("free"), free)
			queryHeld(t, h, key("held"), granted)
		})
	}
}

// TestHalfCloseNothingDue: a half-closed connection whose requests are all
// answered is closed at once, and one that sent nothing too.
func TestHalfCloseNothingDue(t *testing.T) {
	t.Parallel()
	_, transports := halfCloseNode(t)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := dialPipe(t, tr.addr, tr.tls)
			p.send(t, "Q halfclose/nothing")
			if line, err := p.readLine(answerWithin); err != nil || line != "Q halfclose/nothing FREE" {
				t.Fatalf("got %q (%v), want Q halfclose/nothing FREE", line, err)
			}
			p.closeWrite(t)
			p.expectEnd(t, answerWithin)

			silent := dialPipe(t, tr.addr, tr.tls)
			silent.closeWrite(t)
			silent.expectEnd(t, answerWithin)
		})
	}
}

// TestResetAbandons: a client that resets its connection while its
// acquire waits is gone, as before, whether or not it half-closed first:
// its acquire is abandoned (or the grant that lands for it released at
// once), and the lock goes to the next waiter.
func TestResetAbandons(t *testing.T) {
	t.Parallel()
	n, transports := halfCloseNode(t)
	for _, tr := range transports {
		for _, halfFirst := range []bool{false, true} {
			name := tr.name + "/reset"
			if halfFirst {
				name = tr.name + "/half-close then reset"
			}
			t.Run(name, func(t *testing.T) {
				k := "reset/" + strings.ReplaceAll(name, " ", "-")
				h := harness.Dial(t, n.ClientAddr)
				t0 := acquire(t, h, k, 30000)
				gone := dialPipe(t, tr.addr, tr.tls)
				gone.send(t, "A "+k+" 30000 0", "Q "+k)
				if line, err := gone.readLine(answerWithin); err != nil || !strings.HasPrefix(line, fmt.Sprintf("Q %s HELD %d ", k, t0)) {
					t.Fatalf("got %q (%v), want Q %s HELD %d", line, err, k, t0)
				}
				live := harness.Dial(t, n.ClientAddr)
				live.Send("A "+k+" 30000 0", "Q "+k)
				expectHeld(t, live, k, t0)
				if halfFirst {
					gone.closeWrite(t)
				}
				gone.reset(t)

				do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")
				tok := readGrant(t, live, k, answerWithin)
				queryHeld(t, h, k, tok)
			})
		}
	}
}
