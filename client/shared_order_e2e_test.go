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
