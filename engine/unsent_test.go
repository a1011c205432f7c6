package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// The ledger sums what gnet holds per connection; a connection past
// MaxUnsentPerConn is cut off; past MaxUnsent, shed marks the connections
// with the most unsent bytes, just enough of them, and those are cut off
// when their loops look again, while the others are not.
func TestUnsentLedger(t *testing.T) {
	u := newUnsentLedger(withLimits(func(l *Limits) { l.MaxUnsentPerConn, l.MaxUnsent = 100, 250 }))
	small, mid, big := newConn(), newConn(), newConn()
	settle := func(cs *connState, n int64) (limitKind, bool) { return u.settle(cs, n) }
	if _, cut := settle(big, 101); !cut {
		t.Fatal("101 bytes unsent, limit 100: not cut off")
	}
	for _, c := range []struct {
		cs *connState
		n  int64
	}{{big, 100}, {mid, 90}, {small, 70}} {
		if _, cut := settle(c.cs, c.n); cut {
			t.Fatalf("cut off at %d bytes, before anything was shed", c.n)
		}
	}
	if u.sum.Load() != 260 || len(u.kick) != 1 {
		t.Fatalf("sum %d, kicked %d: want 260 and the sweeper kicked", u.sum.Load(), len(u.kick))
	}
	u.shed() // 10 bytes over: the biggest goes
	if got := u.cutFrom.Load(); got != 100 {
		t.Fatalf("cut from %d bytes, want 100 (the biggest only)", got)
	}
	if _, cut := settle(mid, 90); cut {
		t.Fatal("a connection below the mark was cut off")
	}
	if limit, cut := settle(big, 100); !cut || limit != limitUnsent {
		t.Fatalf("the biggest: cut %v by %d, want cut by limitUnsent", cut, limit)
	}
	u.forget(big) // its OnClose
	if _, cut := settle(mid, 95); cut || u.sum.Load() != 165 {
		t.Fatalf("back under the limit: cut %v, sum %d (want 165)", cut, u.sum.Load())
	}
	u.forget(mid)
	u.forget(small)
	if u.sum.Load() != 0 || len(u.backlog) != 0 {
		t.Fatalf("all closed: sum %d, %d in the backlog", u.sum.Load(), len(u.backlog))
	}
}

// recheckCounter is a transport that counts the rechecks it is asked for.
type recheckCounter struct {
	fakeConn
	woken *atomic.Int32
}

func (w recheckCounter) recheck() { w.woken.Add(1) }

// The sweeper, kicked as the sum goes over the limit, wakes the biggest
// connection; once that one is closed and the sum is under the limit again,
// it stops cutting.
func TestUnsentSweeper(t *testing.T) {
	u := newUnsentLedger(withLimits(func(l *Limits) { l.MaxUnsent = 100 }))
	var woken [3]atomic.Int32
	var conns [3]*connState
	for i := range conns {
		conns[i] = newConn()
		conns[i].t = recheckCounter{woken: &woken[i]}
	}
	stop := make(chan struct{})
	swept := make(chan struct{})
	go func() { defer close(swept); u.runSweeper(stop) }()
	defer func() { close(stop); <-swept }()
	for i, n := range []int64{20, 60, 30} {
		u.settle(conns[i], n)
	}
	waitFor(t, "the biggest connection woken", func() bool { return woken[1].Load() > 0 })
	if woken[0].Load() != 0 || woken[2].Load() != 0 {
		t.Fatal("smaller connections woken too")
	}
	if _, cut := u.settle(conns[1], 60); !cut { // its loop looks
		t.Fatal("the biggest connection was not cut off")
	}
	u.forget(conns[1])
	waitFor(t, "the sweeper to stop cutting", func() bool { return u.cutFrom.Load() == 0 })
	if _, cut := u.settle(conns[2], 70); cut { // sum 90 again
		t.Fatal("cut off under the limit")
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
