package client

import (
	"context"
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
