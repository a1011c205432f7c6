package client

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// answerEater is a TCP proxy to a server that, once, lets the server's
// grant of a key reach it but not the client: it swallows the first
// "A <key> OK" line and cuts that connection, as a network that dies at
// the worst moment would. Everything else passes through.
type answerEater struct {
	ln     net.Listener
	target string
	key    string

	mu    sync.Mutex
	eaten bool
	ate   chan struct{} // closed when the grant was swallowed
}

func startAnswerEater(t *testing.T, target, key string) *answerEater {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &answerEater{ln: ln, target: target, key: key, ate: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go e.serve(c)
		}
	}()
	return e
}

func (e *answerEater) addr() string { return e.ln.Addr().String() }

func (e *answerEater) serve(client net.Conn) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", e.target, time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	r := bufio.NewReader(server)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "A "+e.key+" OK ") && e.eat() {
			return // the deferred closes cut both sides
		}
		if _, err := client.Write([]byte(line)); err != nil {
			return
		}
	}
}

// eat reports whether this grant is the one to swallow.
func (e *answerEater) eat() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.eaten {
		return false
	}
	e.eaten = true
	close(e.ate)
	return true
}

// TestLostGrantAnswerRetriedWithOwner: the server grants, its answer is
// lost with the connection, and the client's retry on its other
// connection, with the same owner, gets the same grant back within a
// second instead of queueing behind it for a lease.
func TestLostGrantAnswerRetriedWithOwner(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	const key = "lost/answer"
	e := startAnswerEater(t, n.ClientAddr, key)
	c := newTestClient(t, e.addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	start := time.Now()
	l, err := c.Acquire(ctx, key, 30*time.Second, WaitForever)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	select {
	case <-e.ate:
	default:
		t.Fatal("the proxy swallowed no grant: the test did not test anything")
	}
	if took > time.Second {
		t.Fatalf("the retry got the lock after %v, want under a second (not a 30 s lease)", took)
	}
	st, err := c.Query(ctx, key)
	if err != nil || !st.Held || st.Token != l.Token() || st.Owner != l.Owner() {
		t.Fatalf("query: %+v, %v; want held by token %d, owner %q", st, err, l.Token(), l.Owner())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if st, err := c.Query(ctx, key); err != nil || st.Held {
		t.Fatalf("after release: %+v, %v; want free: the lost grant and the retry were one", st, err)
	}
	t.Logf("lock back %v after the answer was lost", took)
}
