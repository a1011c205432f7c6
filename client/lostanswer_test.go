package client

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
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

func startAnswerEater(t testing.TB, target, key string) *answerEater {
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
	// The proxy is the way to the server: the client must not move to the
	// address the server names.
	c := newTestClientWith(t, []string{e.addr()}, WithFixedAddresses())
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

// BenchmarkLostAnswer measures how long a client waits for its lock when the
// server's grant is lost with its connection (the proxy above), from sending
// the acquire to holding the lock. With owners, the Go client's retry gets
// the lost grant back; without (a plain A, as every acquire was before
// protocol 1.1), the retry queues behind the lost grant until its lease of
// lostLease runs out. Reported per lost answer: the median, in ms. Each
// no-owner op takes a lease, so run it with a count:
//
//	go test ./client -run '^$' -bench LostAnswer -benchtime 5x
func BenchmarkLostAnswer(b *testing.B) {
	const lostLease = 2 * time.Second
	n := harness.StartNode(b, harness.Bin(b), harness.Options{Shards: 4})
	ctx := context.Background()
	b.Run("owner", func(b *testing.B) {
		lockBack(b, func(i int) time.Duration {
			key := fmt.Sprintf("lost/owner-%d-%d", b.N, i)
			e := startAnswerEater(b, n.ClientAddr, key)
			c, err := New([]string{e.addr()}, WithDialTimeout(2*time.Second), WithFixedAddresses())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			l, err := c.Acquire(ctx, key, lostLease, WaitForever)
			took := time.Since(start)
			if err != nil {
				b.Fatalf("acquire: %v", err)
			}
			<-e.ate
			if err := l.Release(ctx); err != nil {
				b.Fatalf("release: %v", err)
			}
			return took
		})
	})
	b.Run("no-owner", func(b *testing.B) {
		lockBack(b, func(i int) time.Duration {
			key := fmt.Sprintf("lost/plain-%d-%d", b.N, i)
			e := startAnswerEater(b, n.ClientAddr, key)
			acquire := fmt.Sprintf("A %s %d 0", key, lostLease.Milliseconds())
			lost := harness.Dial(b, e.addr())
			start := time.Now()
			lost.Send(acquire)
			<-e.ate
			retry := harness.Dial(b, n.ClientAddr)
			retry.Send(acquire)
			answer, err := retry.ReadLine(lostLease + 5*time.Second)
			took := time.Since(start)
			if err != nil {
				b.Fatalf("retry: %v", err)
			}
			var token uint64
			if _, err := fmt.Sscanf(answer, "A "+key+" OK %d", &token); err != nil {
				b.Fatalf("retry answered %q", answer)
			}
			retry.Do(b, fmt.Sprintf("R %s %d", key, token))
			lost.Close()
			retry.Close()
			return took
		})
	})
}

// lockBack runs op b.N times and reports the median of what it returns.
func lockBack(b *testing.B, op func(i int) time.Duration) {
	took := make([]time.Duration, 0, b.N)
	for i := range b.N {
		took = append(took, op(i))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "ms-to-lock")
}
