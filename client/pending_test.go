package client

import (
	"testing"

	"github.com/baton-dev/baton/codec"
)

func TestPendingFIFOPerOpAndKey(t *testing.T) {
	var p pendingTable
	a1, a2, a3 := newCall('A', "k"), newCall('A', "k"), newCall('A', "k")
	r1 := newCall('R', "k")
	o1 := newCall('A', "other")
	for _, c := range []*call{a1, r1, a2, o1, a3} {
		p.push(c)
	}
	if p.len() != 5 {
		t.Fatalf("len %d, want 5", p.len())
	}
	// Answers of other (op, key) pairs may come in any order; the same pair
	// is answered in the order it was sent.
	for _, want := range []struct {
		op  byte
		key string
		c   *call
	}{
		{'A', "other", o1}, {'R', "k", r1}, {'A', "k", a1}, {'A', "k", a2}, {'A', "k", a3},
	} {
		if got := p.pop(want.op, []byte(want.key)); got != want.c {
			t.Fatalf("pop %c %s: got %p, want %p", want.op, want.key, got, want.c)
		}
	}
	if p.len() != 0 {
		t.Fatalf("len %d after popping everything", p.len())
	}
	for _, op := range []byte{'A', 'R', 'K', 'Q', '?'} {
		if c := p.pop(op, []byte("k")); c != nil {
			t.Fatalf("pop %c k on an empty table: %p", op, c)
		}
	}
}

func TestPendingReuseAfterEmpty(t *testing.T) {
	var p pendingTable
	for i := range 3 {
		c := newCall('Q', "k")
		p.push(c)
		if got := p.pop('Q', []byte("k")); got != c {
			t.Fatalf("round %d: got %p, want %p", i, got, c)
		}
	}
	if len(p.byOp[codec.OpIndex('Q')]) != 0 {
		t.Fatal("an emptied queue stays in the map")
	}
}

func TestPendingDrain(t *testing.T) {
	var p pendingTable
	calls := []*call{newCall('A', "x"), newCall('A', "x"), newCall('K', "y"), newCall('Q', "z")}
	for _, c := range calls {
		p.push(c)
	}
	got := p.drain()
	if len(got) != len(calls) || p.len() != 0 {
		t.Fatalf("drained %d of %d, %d left", len(got), len(calls), p.len())
	}
	seen := make(map[*call]bool)
	for _, c := range got {
		seen[c] = true
	}
	for _, c := range calls {
		if !seen[c] {
			t.Fatalf("call %c %s not drained", c.op, c.key)
		}
	}
	if p.drain() != nil {
		t.Fatal("second drain returned calls")
	}
	p.push(newCall('A', "x")) // usable again
	if p.pop('A', []byte("x")) == nil {
		t.Fatal("table unusable after drain")
	}
}

func TestCallFinishOrAbandon(t *testing.T) {
	c := newCall('A', "k")
	if !c.abandon() {
		t.Fatal("abandon of a pending call failed")
	}
	if c.finish() {
		t.Fatal("finish of an abandoned call succeeded")
	}
	c = newCall('A', "k")
	c.setAnswer(&codec.Response{Op: 'A', Key: []byte("k"), Status: codec.StatusOK, Token: 7})
	if !c.finish() || c.abandon() {
		t.Fatal("finish then abandon: the answer must win")
	}
	<-c.done
	if c.token != 7 {
		t.Fatalf("token %d", c.token)
	}
}

func BenchmarkPendingPushPop(b *testing.B) {
	var p pendingTable
	key := []byte("orders/42")
	calls := make([]*call, 64)
	for i := range calls {
		calls[i] = newCall('A', "orders/42")
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.push(calls[i%64])
		p.pop('A', key)
	}
}
