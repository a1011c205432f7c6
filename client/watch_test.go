package client

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// nextState reads the watch's next state within d.
func nextState(t *testing.T, ch <-chan State, d time.Duration) State {
	t.Helper()
	select {
	case st, ok := <-ch:
		if !ok {
			t.Fatal("the watch's channel closed")
		}
		return st
	case <-time.After(d):
		t.Fatalf("no state within %v", d)
	}
	return State{}
}

// TestWatchSingleNode: a watch starts with the key's state, then gets one
// state per change with every grant's token; cancelling its context
// closes the channel.
func TestWatchSingleNode(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)
	wctx, stop := context.WithCancel(ctx)
	ch, err := c.Watch(wctx, "w/single")
	if err != nil {
		t.Fatal(err)
	}
	if st := nextState(t, ch, 5*time.Second); st.Held || st.Holders != 0 {
		t.Fatalf("first state %+v, want free", st)
	}
	l, err := c.Acquire(ctx, "w/single", 10*time.Second, WaitForever)
	if err != nil {
		t.Fatal(err)
	}
	if st := nextState(t, ch, 5*time.Second); !st.Held || st.Token != l.Token() || st.Owner != l.Owner() || st.Holders != 1 || st.Permits != 1 {
		t.Fatalf("state after the grant %+v, want held by token %d, owner %s", st, l.Token(), l.Owner())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := nextState(t, ch, 5*time.Second); st.Held {
		t.Fatalf("state after the release %+v, want free", st)
	}
	stop()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a state after the context ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel is still open 5 s after the context ended")
	}
	if _, err := c.Watch(ctx, "bad key"); err == nil {
		t.Error("a watch of a key with a space: no error")
	}
}

// TestWatchFailover: the leader of a 3-node cluster is killed (-9) under a
// watch of a key it holds; the watch goes on on the new leader, with the
// same grant, and sees its release there.
func TestWatchFailover(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2})
	const key = "w/failover"
	leader := settledLeader(t, nodes, key)
	c := clusterClient(t, nodes)
	ctx := ctxFor(t, 60*time.Second)
	l, err := c.Acquire(ctx, key, time.Minute, WaitForever)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st := nextState(t, ch, 10*time.Second); st.Token != l.Token() {
		t.Fatalf("first state %+v, want held by token %d", st, l.Token())
	}
	leader.Kill()
	// The watch comes back on the new leader with the state there: the
	// same grant (it committed on a majority).
	if st := nextState(t, ch, 30*time.Second); st.Token != l.Token() {
		t.Fatalf("state on the new leader %+v, want held by token %d", st, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := nextState(t, ch, 10*time.Second); st.Held {
		t.Fatalf("state after the release on the new leader %+v, want free", st)
	}
}

// TestElection: two candidates on one key; the first leads and everybody
// sees its value; the second waits; when the first resigns the second
// leads; Observe sees each leader and "nobody" in between or not (a
// hand-off in one commit goes straight to the next leader); a leader that
// is killed (its client closed, its lease running out) is replaced, and
// its Done channel closes no later than its successor's campaign returns.
func TestElection(t *testing.T) {
	t.Parallel()
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2, HTTP: true})
	ctx := ctxFor(t, 60*time.Second)
	a, b, observer := newTestClient(t, n.ClientAddr), newTestClient(t, n.ClientAddr), newTestClient(t, n.ClientAddr)
	const lease = 2 * time.Second
	ea, err := a.Election("elect/web", lease)
	if err != nil {
		t.Fatal(err)
	}
	eb, _ := b.Election("elect/web", lease)
	eo, _ := observer.Election("elect/web", lease)
	seen, err := eo.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nextLeader := func() Leader {
		t.Helper()
		select {
		case l := <-seen:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no leader change observed in 10 s")
		}
		return Leader{}
	}
	if l := nextLeader(); l.Leading() {
		t.Fatalf("first observed %+v, want nobody", l)
	}
	la, err := ea.Campaign(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(); l.Value != "node-a" || l.Token != la.Token() {
		t.Fatalf("observed %+v, want node-a with token %d", l, la.Token())
	}
	if l, err := eb.Leader(ctx); err != nil || l.Value != "node-a" {
		t.Fatalf("Leader: %+v, %v; want node-a", l, err)
	}
	won := make(chan *Lock, 1)
	go func() {
		lb, err := eb.Campaign(ctx, "node-b")
		if err != nil {
			t.Error(err)
		}
		won <- lb
	}()
	// node-b waits in line: its campaign is queued on the server before
	// node-a resigns (the queue's order makes it the next leader).
	waitQueued(t, n)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-won
	if lb == nil {
		t.FailNow()
	}
	if l := nextLeader(); l.Value != "node-b" || l.Token <= la.Token() {
		t.Fatalf("observed %+v, want node-b with a token above %d", l, la.Token())
	}

	// node-b's client dies: its lease runs out (no more extends) and node-a,
	// campaigning again, leads; node-b's Done closed by then.
	b.Close()
	la2, err := ea.Campaign(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lb.Done():
	default:
		t.Fatal("node-a leads again while node-b's leadership is not done")
	}
	for l := nextLeader(); l.Value != "node-a"; l = nextLeader() {
		if l.Leading() {
			t.Fatalf("observed %+v between node-b and node-a", l)
		}
	}
	if err := la2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitQueued waits until an acquire waits in the node's queues: the
// node's baton_waiters gauge (its /metrics) is 1.
func waitQueued(t *testing.T, n *harness.Node) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + n.HTTPAddr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if regexp.MustCompile(`(?m)^baton_waiters 1$`).Match(body) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no acquire waits on node %d after 10 s (metrics: %v)", n.ID, err)
		}
	}
}

// TestWatchSilentNode: the node of a watch stops answering without closing
// the connection (paused); the watch asks it (a heartbeat query) after a
// silence, counts the connection as lost when nothing comes back either,
// and goes on on another node, where a change shows.
func TestWatchSilentNode(t *testing.T) {
	old := watchSilence
	watchSilence = 300 * time.Millisecond
	t.Cleanup(func() { watchSilence = old })
	s, other := startFake(t), startFake(t)
	s.hung.Store(true) // it answers no heartbeat
	c := newTestClientWith(t, []string{s.addr(), other.addr()}, WithFixedAddresses())
	ctx := ctxFor(t, 20*time.Second)
	c.mu.Lock()
	c.preferred = s.addr()
	c.mu.Unlock()
	ch, err := c.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	first := s.next()
	if first.text != "W k" {
		t.Fatalf("first request %q, want W k", first.text)
	}
	reply(t, first.nc, "W k FREE")
	if st := nextState(t, ch, 5*time.Second); st.Held {
		t.Fatalf("first state %+v", st)
	}
	// s goes silent: the watch sends its heartbeat there (answered by
	// nobody), then starts again on the other node.
	moved := other.next()
	if moved.text != "W k" {
		t.Fatalf("on the other node: %q, want W k", moved.text)
	}
	if n := s.heartbeatCounts()[first.nc]; n != 1 {
		t.Errorf("%d heartbeats sent to the silent node, want 1", n)
	}
	reply(t, moved.nc, "W k HELD 9 1000 o")
	if st := nextState(t, ch, 5*time.Second); st.Token != 9 {
		t.Fatalf("state on the other node %+v, want token 9", st)
	}
}
