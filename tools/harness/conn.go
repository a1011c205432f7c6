package harness

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// DefaultTimeout bounds Dial and the reads of Expect.
const DefaultTimeout = 5 * time.Second

// writeTimeout bounds one Write: a server that stops reading must not hang
// the test.
const writeTimeout = 30 * time.Second

// Conn is a line-protocol connection for tests. Lines are returned exactly
// as the server sent them minus the LF, so a stray CR shows. It belongs to
// the test that dialed it (Send fails that test) and is closed when that
// test ends. Reads and writes may run in different goroutines; two
// goroutines must not read at once.
type Conn struct {
	t       testing.TB
	nc      net.Conn
	r       *bufio.Reader
	partial []byte // a line's beginning read before a read timed out
}

// Dial connects to addr (a 127.0.0.1 address) or fails the test.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, DefaultTimeout)
	if err != nil {
		t.Fatalf("harness: dial %s: %v", addr, err)
	}
	c := &Conn{t: t, nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	t.Cleanup(func() { c.nc.Close() })
	return c
}

// DialTLS connects to addr (a 127.0.0.1 address) over TLS configured by
// cfg, handshake included, or fails the test. Under TLS 1.3 a server that
// refuses the client's certificate says so after the client's handshake
// is complete: on the first read.
func DialTLS(t testing.TB, addr string, cfg *tls.Config) *Conn {
	t.Helper()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: DefaultTimeout}, Config: cfg}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("harness: dial %s over TLS: %v", addr, err)
	}
	c := &Conn{t: t, nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	t.Cleanup(func() { c.nc.Close() })
	return c
}

// Dial connects to the node's client address, as Dial does, and says its
// secret (Hello) when it has one (Options.Secret).
func (n *Node) Dial(t testing.TB) *Conn {
	t.Helper()
	c := Dial(t, n.ClientAddr)
	if n.Secret != "" {
		c.Hello(t, n.Secret)
	}
	return c
}

// Hello sends "H <secret>" and fails t unless the answer is "H - OK"; it
// returns c, for harness.Dial(t, addr).Hello(t, secret).
func (c *Conn) Hello(t testing.TB, secret string) *Conn {
	t.Helper()
	c.Send("H " + secret)
	c.Expect(t, "H - OK")
	return c
}

// Send writes the lines, each followed by LF, in ONE write, so that the
// server sees them as a pipeline. It fails the test if the write fails.
func (c *Conn) Send(lines ...string) {
	c.t.Helper()
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	b := make([]byte, 0, n)
	for _, l := range lines {
		b = append(b, l...)
		b = append(b, '\n')
	}
	if _, err := c.Write(b); err != nil {
		c.t.Fatalf("harness: send to %s: %v", c.nc.RemoteAddr(), err)
	}
}

// Write writes p as it is (no LF added) in one call. Unlike Send it
// returns its error, so it may be called from a helper goroutine, e.g. to
// write a pipeline larger than the socket buffers while the test reads.
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.nc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return 0, err
	}
	return c.nc.Write(p)
}

// ReadLine returns the next line without its LF, waiting at most timeout.
// After a timeout (a net.Error with Timeout() true) the connection is still
// usable, and a partly received line is kept for the next call.
func (c *Conn) ReadLine(timeout time.Duration) (string, error) {
	if err := c.nc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	for {
		frag, err := c.r.ReadSlice('\n')
		c.partial = append(c.partial, frag...)
		switch err {
		case nil:
			line := string(c.partial[:len(c.partial)-1])
			c.partial = c.partial[:0]
			return line, nil
		case bufio.ErrBufferFull:
			continue
		default:
			return "", err
		}
	}
}

// ReadLines reads n lines, all within timeout.
func (c *Conn) ReadLines(n int, timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	lines := make([]string, 0, n)
	for len(lines) < n {
		l, err := c.ReadLine(time.Until(deadline))
		if err != nil {
			return lines, fmt.Errorf("after %d of %d lines: %w", len(lines), n, err)
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// Expect reads one line, waiting at most DefaultTimeout, and fails t unless
// it is want.
func (c *Conn) Expect(t testing.TB, want string) {
	t.Helper()
	c.ExpectWithin(t, DefaultTimeout, want)
}

// ExpectWithin reads one line, waiting at most d, and fails t unless it is
// want.
func (c *Conn) ExpectWithin(t testing.TB, d time.Duration, want string) {
	t.Helper()
	got, err := c.ReadLine(d)
	if err != nil {
		t.Fatalf("want %q, got error: %v", want, err)
	}
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// ExpectNothing fails t if a line (or the end of the stream) arrives
// within d.
func (c *Conn) ExpectNothing(t testing.TB, d time.Duration) {
	t.Helper()
	got, err := c.ReadLine(d)
	if err == nil {
		t.Fatalf("got %q, want nothing yet", got)
	}
	if !IsTimeout(err) {
		t.Fatalf("want nothing yet, got error: %v", err)
	}
}

// Do sends one line and returns the next line read (DefaultTimeout). Use it
// only when no other answer is due on the connection.
func (c *Conn) Do(t testing.TB, line string) string {
	t.Helper()
	c.Send(line)
	got, err := c.ReadLine(DefaultTimeout)
	if err != nil {
		t.Fatalf("%q: no answer: %v", line, err)
	}
	return got
}

// AwaitSharedHolds waits until the node serves S (protocol 1.4) for key,
// of permits: a cluster's version rises to 4 a moment after it starts
// (once every member reported its build), and until then S is answered ERR
// unavailable with the reason. The probe's grant is released. It fails t
// after 20 s, or at once on any other answer. Use it only when no other
// answer is due on the connection.
func (c *Conn) AwaitSharedHolds(t testing.TB, key string, permits int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		probe := c.Do(t, fmt.Sprintf("S %s %d 60000 -1", key, permits))
		if tok, ok := strings.CutPrefix(probe, "S "+key+" OK "); ok {
			if got := c.Do(t, "R "+key+" "+tok); got != "R "+key+" OK" {
				t.Fatalf("the release of the probe's grant: %q", got)
			}
			return
		}
		if !strings.Contains(probe, "cluster version") || time.Now().After(deadline) {
			t.Fatalf("waiting for shared holds to be served: %q", probe)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// IsTimeout reports whether err is (or wraps) a read or write deadline
// passing.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
