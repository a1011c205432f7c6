package client

// AcquireShared against a real batond (tools/harness): a key of permits 2
// held by two at once and the third waiting, each grant its own token,
// releases and extends by token, the refusals of PROTOCOL.md 1.4.

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSharedHoldsRealNode: three AcquireShared of permits 2 on one key:
// two are granted at once, the third waits until one of them releases;
// every grant has its own token, greater than the ones before. A permits
// that differs from the holders' is refused, and so are an exclusive
// acquire while shared holders hold the key (it waits: a try times out)
// and an owner's change of kind.
func TestSharedHoldsRealNode(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)

	one, err := c.AcquireShared(ctx, "sem", 2, 10*time.Second, WaitForever)
	if err != nil {
		t.Fatal(err)
	}
	two, err := c.AcquireShared(ctx, "sem", 2, 10*time.Second, NoWait)
	if err != nil {
		t.Fatal(err)
	}
	if two.Token() <= one.Token() {
		t.Fatalf("tokens %d then %d", one.Token(), two.Token())
	}
	if st, err := c.Query(ctx, "sem"); err != nil || st.Held || st.Holders != 2 || st.Permits != 2 {
		t.Fatalf("query with two shared holders: %+v, %v", st, err)
	}

	// The third waits. On a client of its own: an answer to an S comes
	// after those of the S of the same key sent before it on the same
	// connection, so a try behind it there would wait for it.
	waiter := newTestClient(t, n.ClientAddr)
	third := make(chan sharedResult, 1)
	go func() {
		l, err := waiter.AcquireShared(ctx, "sem", 2, 10*time.Second, WaitForever)
		third <- sharedResult{l, err}
	}()
	select {
	case r := <-third:
		t.Fatalf("a third holder of 2 permits: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := c.AcquireShared(ctx, "sem", 2, 10*time.Second, NoWait); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a try while both are held and one waits: %v", err)
	}

	// A permits of another number is refused, changing nothing.
	var se *ServerError
	if l, err := c.AcquireShared(ctx, "sem", 3, 10*time.Second, WaitForever); !errors.As(err, &se) || se.Code != "badrequest" {
		st, qerr := c.Query(ctx, "sem")
		t.Fatalf("permits 3 beside holders of 2: %+v, %v (the key: %+v, %v)", l, err, st, qerr)
	}
	// The exclusive lock waits for every shared holder.
	if _, err := c.TryAcquire(ctx, "sem", 10*time.Second); !errors.Is(err, ErrTimeout) {
		t.Fatalf("an exclusive try while shared holders hold: %v", err)
	}

	// Extends and releases go to one grant each.
	if err := two.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r sharedResult
	select {
	case r = <-third:
	case <-time.After(5 * time.Second):
		t.Fatal("the third not granted 5s after a holder released")
	}
	if r.err != nil || r.l.Token() <= two.Token() {
		t.Fatalf("the third: %+v (after tokens %d and %d)", r, one.Token(), two.Token())
	}
	if err := one.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("extend of a released shared grant: %v", err)
	}
	if st, err := c.Query(ctx, "sem"); err != nil || st.Holders != 2 || st.Permits != 2 {
		t.Fatalf("query after the hand-over: %+v, %v", st, err)
	}
	for _, l := range []*Lock{two, r.l} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := c.Query(ctx, "sem"); err != nil || st.Holders != 0 {
		t.Fatalf("query after every release: %+v, %v", st, err)
	}
	// Free again: another permits is fine now.
	l, err := c.AcquireShared(ctx, "sem", 3, 10*time.Second, NoWait)
	if err != nil {
		t.Fatalf("permits 3 on the free key: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSharedHoldsOwnersRealNode: an owner that holds a shared grant gets
// it back (the same token, its lease renewed) from another AcquireShared,
// and cannot take the key exclusively with it.
func TestSharedHoldsOwnersRealNode(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := newTestClient(t, n.ClientAddr)
	ctx := ctxFor(t, 30*time.Second)
	first, err := c.AcquireShared(ctx, "owned", 4, 10*time.Second, WaitForever, WithOwner("reader-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.AcquireShared(ctx, "owned", 4, 10*time.Second, NoWait, WithOwner("reader-1"))
	if err != nil || again.Token() != first.Token() || again.Owner() != "reader-1" {
		t.Fatalf("the owner's second acquire: %+v, %v; want token %d", again, err, first.Token())
	}
	if st, err := c.Query(ctx, "owned"); err != nil || st.Holders != 1 || st.Permits != 4 {
		t.Fatalf("one owner, one holder: %+v, %v", st, err)
	}
	var se *ServerError
	if _, err := c.Acquire(ctx, "owned", 10*time.Second, NoWait, WithOwner("reader-1")); !errors.As(err, &se) || se.Code != "badrequest" {
		t.Fatalf("the shared owner's exclusive acquire: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A shared grant whose caller gave up is released: the key ends free.
	holder, err := c.TryAcquire(ctx, "owned", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.AcquireShared(gctx, "owned", 4, 10*time.Second, WaitForever)
	cancel()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("a shared acquire behind the exclusive holder, deadline 200ms: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := c.Query(ctx, "owned")
		if err != nil {
			t.Fatal(err)
		}
		if st.Holders == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after the holder released, the key is %+v: a grant nobody waits for is left", st)
		}
	}
}
