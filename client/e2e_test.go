package client

// End-to-end tests: the client against real batond processes (single node
// and three-node clusters) started by tools/harness.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

func startNode(t *testing.T) *harness.Node {
	t.Helper()
	return harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 4})
}

// connWith returns the first connection of c that has an unanswered
// request, waiting up to 5 s.
func connWith(t *testing.T, c *Client) *conn {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		conns := append([]*conn(nil), c.conns...)
		c.mu.Unlock()
		for _, cn := range conns {
			cn.mu.Lock()
			n := cn.pending.len()
			cn.mu.Unlock()
			if n > 0 {
				return cn
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no connection has an unanswered request")
	return nil
}

// TestManyGoroutines: goroutines share one client to acquire and release a
// few contended keys; holders never overlap and each key's tokens grow.
func TestManyGoroutines(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	const workers, rounds, keys = 32, 15, 4
	var (
		holders [keys]atomic.Int32
		mu      sync.Mutex
		last    [keys]uint64
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				k := (w + r) % keys
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				l, err := c.Acquire(ctx, fmt.Sprintf("many/%d", k), 5*time.Second, WaitForever)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if holders[k].Add(1) != 1 {
					errs <- fmt.Errorf("key %d: two holders", k)
				}
				mu.Lock()
				if l.Token() <= last[k] {
					errs <- fmt.Errorf("key %d: token %d after %d", k, l.Token(), last[k])
				}
				last[k] = l.Token()
				mu.Unlock()
				holders[k].Add(-1)
				if err := l.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSameKeyPipelined: many acquires, queries and releases of one key in
// flight on the same two connections at once are each paired with their
// own answer.
func TestSameKeyPipelined(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)
	const waiters = 24
	var (
		held   atomic.Int32
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
	)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, "pipe", 10*time.Second, WaitForever)
			if err != nil {
				t.Error(err)
				return
			}
			if held.Add(1) != 1 {
				t.Error("two holders of pipe")
			}
			// While holding, the key's state must show our token.
			st, err := c.Query(ctx, "pipe")
			if err != nil || !st.Held || st.Token != l.Token() {
				t.Errorf("query while holding %d: %+v, %v", l.Token(), st, err)
			}
			mu.Lock()
			tokens = append(tokens, l.Token())
			mu.Unlock()
			held.Add(-1)
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(tokens) != waiters {
		t.Fatalf("%d grants, want %d", len(tokens), waiters)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens in grant order %v", tokens)
		}
	}
}

// TestConnectionCutMidAcquire: the connection an acquire waits on is closed
// under the client; the acquire goes on on the other connection and is
// granted when the holder releases.
func TestConnectionCutMidAcquire(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	holder := newTestClient(t, n.ClientAddr)
	c := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 20*time.Second)
	first, err := holder.Acquire(ctx, "cut", 10*time.Second, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   *Lock
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, err := c.Acquire(ctx, "cut", 10*time.Second, WaitForever)
		done <- res{l, err}
	}()
	cn := connWith(t, c)
	cn.drop()
	// Give the retry time to queue on the other connection, behind nobody.
	time.Sleep(200 * time.Millisecond)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("acquire after its connection was cut: %v", r.err)
		}
		if r.l.Token() <= first.Token() {
			t.Fatalf("token %d after %d", r.l.Token(), first.Token())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("acquire not granted 5s after the holder released")
	}
}

// TestOneOfTwoConnectionsDropped: with a single address, dropping one of its
// two connections again and again does not fail a request.
func TestOneOfTwoConnectionsDropped(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)
	if c.connCount() != 2 {
		t.Fatalf("%d connections to one address, want 2", c.connCount())
	}
	stop := make(chan struct{})
	var dropper sync.WaitGroup
	dropper.Add(1)
	go func() {
		defer dropper.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			c.mu.Lock()
			cn := c.conns[0]
			c.mu.Unlock()
			cn.drop()
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				key := fmt.Sprintf("drop/%d/%d", w, i)
				// A grant whose answer was on a connection as it was cut
				// holds the key for its lease: nobody can know it is ours.
				// The retry then waits that short lease out.
				l, err := c.Acquire(ctx, key, 300*time.Millisecond, 5*time.Second)
				if err != nil {
					t.Errorf("acquire %s: %v", key, err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Errorf("release %s: %v", key, err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(stop)
	dropper.Wait()
}

// TestReleaseWhileServerPaused: a release sent while the only server hangs
// goes through when it comes back within the window, and fails after the
// window when it does not.
func TestReleaseWhileServerPaused(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	other := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)

	l, err := c.Acquire(ctx, "paused", 30*time.Second, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	n.Pause()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- l.Release(context.Background()) }()
	time.Sleep(2 * time.Second)
	n.Resume()
	if err := <-done; err != nil {
		t.Fatalf("release across a 2s pause: %v", err)
	}
	t.Logf("release across a 2s pause answered after %v", time.Since(start))
	if _, err := other.Acquire(ctx, "paused", time.Second, NoWait); err != nil {
		t.Fatalf("the key is not free after the release: %v", err)
	}

	l, err = c.Acquire(ctx, "paused2", 30*time.Second, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	n.Pause()
	start = time.Now()
	err = l.Release(context.Background())
	el := time.Since(start)
	n.Resume()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("release with the server paused for good: %v", err)
	}
	if el < ReleaseWindow-100*time.Millisecond || el > ReleaseWindow+2*time.Second {
		t.Fatalf("release gave up after %v, want about %v", el, ReleaseWindow)
	}
	t.Logf("release with the server hung: %v after %v", err, el)
}

// TestReleaseWhileDisconnected: the connections are cut and the server
// refuses new ones for 2 s; the release waits for a connection and goes
// through within the window.
func TestReleaseWhileDisconnected(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	var refuse atomic.Bool
	d := &net.Dialer{}
	c, err := New([]string{n.ClientAddr}, WithDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("refused by the test")
		}
		return d.DialContext(ctx, "tcp", addr)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)
	l, err := c.Acquire(ctx, "offline", 30*time.Second, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	c.mu.Lock()
	for _, cn := range c.conns {
		cn.drop()
	}
	c.mu.Unlock()
	time.AfterFunc(2*time.Second, func() { refuse.Store(false) })
	start := time.Now()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release across a 2s outage: %v", err)
	}
	t.Logf("release across a 2s outage answered after %v", time.Since(start))
	st, err := c.Query(ctx, "offline")
	if err != nil || st.Held {
		t.Fatalf("after the release: %+v, %v", st, err)
	}
}

// TestCancelWhileWaiting: a waiter whose context is cancelled does not end
// up holding the lock: once the holder releases, another client gets it
// promptly.
func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	holder := newTestClient(t, n.ClientAddr)
	waiter := newTestClient(t, n.ClientAddr)
	third := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)
	for _, wait := range []time.Duration{WaitForever, 20 * time.Second} {
		key := fmt.Sprintf("cancel/%v", wait)
		h, err := holder.Acquire(ctx, key, 20*time.Second, NoWait)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := waiter.Acquire(wctx, key, 20*time.Second, wait)
			done <- err
		}()
		connWith(t, waiter)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("wait %v: acquire after cancel: %v", wait, err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The server grants the abandoned acquire first (FIFO); the waiter's
		// client releases it at once.
		start := time.Now()
		for {
			_, err := third.TryAcquire(ctx, key, time.Second)
			if err == nil {
				t.Logf("wait %v: free again %v after the holder released", wait, time.Since(start))
				break
			}
			if !errors.Is(err, ErrTimeout) || time.Since(start) > 3*time.Second {
				t.Fatalf("wait %v: key still taken %v after release: %v", wait, time.Since(start), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestKeepAliveAndLoss: a kept-alive lock outlives many leases; when someone
// else force-releases it, Done closes and Err says it was lost.
func TestKeepAliveAndLoss(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)
	l, err := c.Acquire(ctx, "ka", 600*time.Millisecond, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	l.KeepAlive()
	time.Sleep(2 * time.Second)
	st, err := c.Query(ctx, "ka")
	if err != nil || !st.Held || st.Token != l.Token() {
		t.Fatalf("after 2s of 600ms leases kept alive: %+v, %v", st, err)
	}
	select {
	case <-l.Done():
		t.Fatalf("Done closed while kept alive: %v", l.Err())
	default:
	}
	if err := c.ForceRelease(ctx, "ka"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed after the lock was taken away")
	}
	if err := l.Err(); !errors.Is(err, ErrLost) || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Err after loss: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release of a lost lock: %v", err)
	}

	// Without keep-alive, Done closes when the lease runs out.
	l, err = c.Acquire(ctx, "ka2", 300*time.Millisecond, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), ErrLost) {
			t.Fatalf("Err after the lease ran out: %v", l.Err())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed after the lease ran out")
	}
	// Released: Done closed, Err nil.
	l, err = c.Acquire(ctx, "ka3", 10*time.Second, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	l.KeepAlive()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if l.Err() != nil || l.Release(ctx) != nil {
		t.Fatalf("after release: Err %v", l.Err())
	}
}

// askOn sends one line on a fresh connection, which it closes, and
// returns the answer, or the error as text.
func askOn(cn *harness.Conn, line string) string {
	defer cn.Close()
	cn.Send(line)
	got, err := cn.ReadLine(2 * time.Second)
	if err != nil {
		return err.Error()
	}
	return got
}

// clusterClient is a test client of every node of a cluster.
func clusterClient(t *testing.T, nodes []*harness.Node) *Client {
	t.Helper()
	addrs := make([]string, len(nodes))
	for i, nd := range nodes {
		addrs[i] = nd.ClientAddr
	}
	return newTestClient(t, addrs...)
}

// settledLeader waits until the first node of the cluster (the first in
// priority) serves key and the others send clients to it, and returns it.
func settledLeader(t *testing.T, nodes []*harness.Node, key string) *harness.Node {
	t.Helper()
	leader := nodes[0]
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		last = ""
		for _, nd := range nodes {
			got := askOn(nd.Dial(t), "Q "+key)
			ok := got == "Q "+key+" MOVED "+leader.ClientAddr
			if nd == leader {
				ok = got == "Q "+key+" FREE" || strings.HasPrefix(got, "Q "+key+" HELD ")
			}
			if !ok {
				last = fmt.Sprintf("node %d answers %q", nd.ID, got)
				break
			}
		}
		if last == "" {
			return leader
		}
	}
	t.Fatalf("node 1 does not lead %s after 20s: %s", key, last)
	return nil
}

// TestMovedInCluster: a client given only a follower's address follows
// MOVED to the leader and prefers it from then on.
func TestMovedInCluster(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 1})
	leader := settledLeader(t, nodes, "mv")
	follower := nodes[2]
	c := newTestClient(t, follower.ClientAddr)
	ctx := ctxFor(t, 20*time.Second)
	l, err := c.Acquire(ctx, "mv", 10*time.Second, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	preferred, conns := c.preferred, len(c.conns)
	c.mu.Unlock()
	if preferred != leader.ClientAddr || conns != 3 {
		t.Fatalf("after MOVED: preferred %q (leader %s), %d connections", preferred, leader.ClientAddr, conns)
	}
}

// TestLeaderKilledDuringStream: kill -9 of the leader of a three-node
// cluster while goroutines acquire and release a few keys through one
// client. No caller sees an error (each has a 15 s deadline), and each key's
// tokens keep growing.
func TestLeaderKilledDuringStream(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 1})
	leader := settledLeader(t, nodes, "stream/0")
	c := clusterClient(t, nodes)

	const workers, keys = 6, 3
	var (
		mu       sync.Mutex
		last     [keys]uint64
		grantsAt []time.Time
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := (w + i) % keys
				key := fmt.Sprintf("stream/%d", k)
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				l, err := c.Acquire(ctx, key, 3*time.Second, WaitForever)
				if err != nil {
					cancel()
					t.Errorf("acquire %s: %v", key, err)
					return
				}
				mu.Lock()
				if l.Token() <= last[k] {
					t.Errorf("%s: token %d after %d", key, l.Token(), last[k])
				}
				last[k] = l.Token()
				grantsAt = append(grantsAt, time.Now())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				err = l.Release(ctx)
				cancel()
				if err != nil && !errors.Is(err, ErrNotHeld) {
					// NOTHELD is possible: a lease that ran out while no
					// leader could take the release.
					t.Errorf("release %s: %v", key, err)
					return
				}
			}
		}()
	}
	grantsSince := func(at time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, g := range grantsAt {
			if g.After(at) {
				n++
			}
		}
		return n
	}
	time.Sleep(time.Second)
	leader.Kill() // returns once the process is gone
	killedAt := time.Now()
	deadline := killedAt.Add(20 * time.Second)
	for grantsSince(killedAt) < 100 && time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	before, after := 0, 0
	var firstAfter time.Time
	for _, g := range grantsAt {
		if g.After(killedAt) {
			if after == 0 {
				firstAfter = g
			}
			after++
		} else {
			before++
		}
	}
	if before == 0 || after < 100 {
		t.Fatalf("grants: %d before the kill, %d after", before, after)
	}
	var gap time.Duration
	for i := 1; i < len(grantsAt); i++ {
		gap = max(gap, grantsAt[i].Sub(grantsAt[i-1]))
	}
	t.Logf("%d grants before the kill, %d after; the first %v after the kill; longest time without a grant %v",
		before, after, firstAfter.Sub(killedAt), gap)
}

// TestLeaderStoppedMidAcquire: the leader of a three-node cluster is
// stopped with SIGSTOP while an acquire waits on it: its connection stays
// open but nothing comes back. The client notices the silence, gives the
// connection up and sends the acquire again, to the new leader, long before
// the acquire's context ends.
func TestLeaderStoppedMidAcquire(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 4})
	const key = "stopped"
	leader := settledLeader(t, nodes, key)
	c := clusterClient(t, nodes)
	ctx := ctxFor(t, 30*time.Second)

	// The client learns the leader from a follower's MOVED; from then on
	// the acquire goes to it first.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := c.Query(ctx, key); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		preferred := c.preferred
		c.mu.Unlock()
		if preferred == leader.ClientAddr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client prefers %q, not the leader %s", preferred, leader.ClientAddr)
		}
	}

	leader.Pause()
	paused := true
	t.Cleanup(func() {
		if paused {
			leader.Resume()
		}
	})
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(actx, key, 10*time.Second, WaitForever)
	el := time.Since(start)
	if err != nil {
		t.Fatalf("acquire with the leader stopped, after %v: %v", el, err)
	}
	// The stall timeout, a MOVED and a commit, with room for a busy machine.
	if el > 6*time.Second {
		t.Fatalf("granted after %v, with a stall timeout of %v", el, DefaultStallTimeout)
	}
	c.mu.Lock()
	conns := append([]*conn(nil), c.conns...)
	grantedBy := c.preferred
	c.mu.Unlock()
	for _, cn := range conns {
		if cn.addr == leader.ClientAddr && !cn.endedSilent() {
			t.Fatalf("the connection to the stopped leader was not given up for silence: %v", cn.lastError())
		}
	}
	t.Logf("granted by %s after %v with node %d stopped (token %d)", grantedBy, el, leader.ID, l.Token())

	leader.Resume()
	paused = false
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after the old leader resumed: %v", err)
	}
}

// TestOwnersAgainstServer: the server keeps the owner an acquire names and
// Query shows it; an acquire with the holder's owner (WithOwner) gets the
// same grant back at once with its lease renewed, while any other owner
// waits for it.
func TestOwnersAgainstServer(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClientWith(t, []string{n.ClientAddr}, WithOwnerPrefix("e2e:"))
	ctx := ctxFor(t, 20*time.Second)

	l, err := c.TryAcquire(ctx, "owners/random", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Query(ctx, "owners/random"); err != nil || st.Token != l.Token() || st.Owner != l.Owner() || !strings.HasPrefix(st.Owner, "e2e:") {
		t.Fatalf("query: %+v, %v; want token %d of owner %q", st, err, l.Token(), l.Owner())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	first, err := c.Acquire(ctx, "owners/named", time.Second, NoWait, WithOwner("job-17"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	again, err := c.Acquire(ctx, "owners/named", 20*time.Second, NoWait, WithOwner("job-17"))
	if err != nil || again.Token() != first.Token() || again.Owner() != "job-17" {
		t.Fatalf("acquire with the holder's owner: %v, %v; want token %d", again, err, first.Token())
	}
	st, err := c.Query(ctx, "owners/named")
	if err != nil || st.Token != first.Token() || st.Owner != "job-17" || st.Remaining <= time.Second {
		t.Fatalf("query: %+v, %v; want token %d of job-17 with its lease renewed to 20s", st, err, first.Token())
	}
	if _, err := c.TryAcquire(ctx, "owners/named", time.Second); !errors.Is(err, ErrTimeout) {
		t.Fatalf("another owner's try-lock: %v, want ErrTimeout", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Query(ctx, "owners/named"); err != nil || st.Held {
		t.Fatalf("after release: %+v, %v", st, err)
	}
}
