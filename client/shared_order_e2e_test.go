package client

import (
	"strings"
	"testing"
	"time"
)

// TestSharedRefusalKeepsOrder: answers to one connection's S of one key
// come in the order sent (PROTOCOL.md, Transport), a refused S's too: the
// client pairs them so. An S of permits 3 sent behind a waiting S of
// permits 2 is answered after it.
func TestSharedRefusalKeepsOrder(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := n.Dial(t)
	c.AwaitSharedHolds(t, "order", 2)
	c.Send("S order 2 2000 0 o1", "S order 2 2000 0 o2", "S order 2 10000 0 o3", "S order 3 10000 0 o4")
	lines, err := c.ReadLines(4, 10*time.Second)
	if err != nil {
		t.Fatalf("%q: %v", lines, err)
	}
	for i, want := range []string{"S order OK ", "S order OK ", "S order OK ", "S order ERR badrequest"} {
		if !strings.HasPrefix(lines[i], want) {
			t.Fatalf("answers %q: the %d-th is not %q...", lines, i+1, want)
		}
	}
}

// TestOwnersTryBehindItsAcquire: a try sent, in the same write, right
// behind an acquire of the same owner is that acquire again (the retry a
// client sends after a lost answer): it gets the same token, not TIMEOUT
// while the first Grant commits (found by the Python client's tests).
func TestOwnersTryBehindItsAcquire(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := n.Dial(t)
	c.AwaitSharedHolds(t, "owned-s", 2)
	for _, tc := range []struct{ acquire, try string }{
		{"A owned-a 10000 0 o1", "A owned-a 10000 -1 o1"},
		{"S owned-s 2 10000 0 o1", "S owned-s 2 10000 -1 o1"},
	} {
		c.Send(tc.acquire, tc.try)
		lines, err := c.ReadLines(2, 10*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", lines, err)
		}
		op := tc.acquire[:1]
		if !strings.Contains(lines[0], " OK ") || lines[1] != lines[0] {
			t.Fatalf("%s then its owner's try: %q, want the same OK twice", op, lines)
		}
	}
}
