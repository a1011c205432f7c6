package harness

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// raftSink stands for the Raft port of one node behind a proxy: it hands
// every connection the proxy forwards to the test.
func raftSink(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			ch <- c
		}
	}()
	return l.Addr().String(), ch
}

// sendAs opens a connection to a node's proxy as node from would: its first
// bytes name from's advertised address the way dragonboat's first message
// batch does (a length byte, then the address).
func sendAs(t *testing.T, fromAddr, proxyAddr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, DefaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	first := append([]byte("magic+header "), byte(len(fromAddr)))
	first = append(first, fromAddr...)
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	return c
}

// arrives waits for the sink's next connection and checks that it carries
// want.
func arrives(t *testing.T, accepted <-chan net.Conn, want string) net.Conn {
	t.Helper()
	select {
	case c := <-accepted:
		arrivesOn(t, c, want)
		return c
	case <-time.After(DefaultTimeout):
		t.Fatalf("no connection forwarded carrying %q", want)
		return nil
	}
}

// closedByProxy checks that the proxy ends c: the read sees the end of the
// stream (or a reset) rather than a timeout.
func closedByProxy(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(DefaultTimeout))
	_, err := c.Read(make([]byte, 1))
	if err == nil || IsTimeout(err) {
		t.Fatalf("%s: the proxy did not close the connection: %v", what, err)
	}
	if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("%s: %v, want the end of the stream", what, err)
	}
}

// TestLinksCut: Cut(1, 2) stops what node 1 sends to node 2, open and new
// connections alike, while node 2's messages to node 1 still flow; Heal
// restores it.
func TestLinksCut(t *testing.T) {
	links := NewLinks()
	sink1, accepted1 := raftSink(t)
	sink2, accepted2 := raftSink(t)
	proxy1 := links.listen(t, 1, sink1)
	proxy2 := links.listen(t, 2, sink2)

	oneToTwo := sendAs(t, proxy1, proxy2)
	arrives(t, accepted2, proxy1)
	twoToOne := sendAs(t, proxy2, proxy1)
	fromTwo := arrives(t, accepted1, proxy2)

	links.Cut(1, 2)
	closedByProxy(t, oneToTwo, "open 1->2 after Cut(1, 2)")
	closedByProxy(t, sendAs(t, proxy1, proxy2), "new 1->2 after Cut(1, 2)")
	if len(accepted2) != 0 {
		t.Fatal("a 1->2 connection reached node 2 after Cut(1, 2)")
	}
	// The other direction, open and new, is untouched.
	if _, err := twoToOne.Write([]byte(" still 2->1")); err != nil {
		t.Fatal(err)
	}
	arrivesOn(t, fromTwo, " still 2->1")
	sendAs(t, proxy2, proxy1)
	arrives(t, accepted1, proxy2)

	links.Heal()
	sendAs(t, proxy1, proxy2)
	arrives(t, accepted2, proxy1)
}

// arrivesOn waits until want comes out of c.
func arrivesOn(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(DefaultTimeout))
	var got []byte
	for !strings.Contains(string(got), want) {
		b := make([]byte, 256)
		n, err := c.Read(b)
		got = append(got, b[:n]...)
		if err != nil {
			t.Fatalf("waiting for %q: got %q, %v", want, got, err)
		}
	}
}

// TestStartNodeEnv: Options.Env reaches the process.
func TestStartNodeEnv(t *testing.T) {
	n := StartNode(t, fakeBin(t), Options{Env: []string{"HARNESS_FAKE_SAY=hello-from-env"}})
	if !strings.Contains(n.Log(), "saying hello-from-env") {
		t.Errorf("the process did not see Options.Env; its log:\n%s", n.Log())
	}
}
