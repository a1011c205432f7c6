package engine

import "testing"

func TestQueueKeepsFIFOAcrossUnlinks(t *testing.T) {
	ks := &keyState{key: "k"}
	var ws []*waiter
	for i := 0; i < 5; i++ {
		w := &waiter{ks: ks, state: waitQueued}
		ws = append(ws, w)
		ks.enqueue(w)
	}
	ks.unlink(ws[0]) // head
	ks.unlink(ws[2]) // middle
	ks.unlink(ws[4]) // tail
	ks.unlink(ws[4]) // twice is harmless
	var got []*waiter
	for w := ks.head; w != nil; w = w.next {
		got = append(got, w)
	}
	if len(got) != 2 || got[0] != ws[1] || got[1] != ws[3] || ks.tail != ws[3] {
		t.Fatalf("queue after unlinks = %v, want [w1 w3]", got)
	}
	if ks.firstQueued() != ws[1] {
		t.Fatal("firstQueued is not the head")
	}
}

func TestFirstQueuedSkipsAnsweredWaiters(t *testing.T) {
	ks := &keyState{key: "k"}
	a := &waiter{ks: ks, state: waitDeferred}
	b := &waiter{ks: ks, state: waitGranting}
	c := &waiter{ks: ks, state: waitQueued}
	for _, w := range []*waiter{a, b, c} {
		ks.enqueue(w)
	}
	if ks.deferred != 1 {
		t.Fatalf("deferred = %d, want 1", ks.deferred)
	}
	if ks.firstQueued() != c {
		t.Fatal("firstQueued must skip deferred and granting waiters")
	}
	ks.unlink(a)
	if ks.deferred != 0 {
		t.Fatalf("deferred after unlink = %d, want 0", ks.deferred)
	}
}

func TestHasLiveWaiterIsPerConnection(t *testing.T) {
	ks := &keyState{key: "k"}
	mine, other := &connState{}, &connState{}
	ks.enqueue(&waiter{ks: ks, cs: other, state: waitQueued})
	ks.enqueue(&waiter{ks: ks, cs: mine, state: waitDeferred})
	if ks.hasLiveWaiter(mine) {
		t.Fatal("a deferred answer is not a live waiter")
	}
	ks.enqueue(&waiter{ks: ks, cs: mine, state: waitQueued})
	if !ks.hasLiveWaiter(mine) {
		t.Fatal("queued waiter of the connection not seen")
	}
}

func TestIdle(t *testing.T) {
	cases := []struct {
		name string
		ks   keyState
		want bool
	}{
		{"free and empty", keyState{}, true},
		{"held, nothing else (the holder is the table's)", keyState{slot: 7}, true},
		{"command in flight", keyState{inflight: 1}, false},
		{"grant in flight", keyState{granting: &waiter{}}, false},
		{"waiters", keyState{head: &waiter{}}, false},
	}
	for _, c := range cases {
		if got := c.ks.idle(); got != c.want {
			t.Errorf("%s: idle = %v, want %v", c.name, got, c.want)
		}
	}
}
