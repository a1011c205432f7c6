package engine

import (
	"math/rand"
	"sort"
	"testing"
)

func TestTimerHeapPopsInOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var h timerHeap
	var want []int64
	for i := 0; i < 1000; i++ {
		when := rng.Int63n(500) // many equal deadlines on purpose
		want = append(want, when)
		h.push(timer{when: when})
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	for i, w := range want {
		first, ok := h.peek()
		if !ok || first != w {
			t.Fatalf("peek %d = %d, %v; want %d", i, first, ok, w)
		}
		if got := h.pop().when; got != w {
			t.Fatalf("pop %d = %d, want %d", i, got, w)
		}
	}
	if _, ok := h.peek(); ok {
		t.Fatal("heap not empty after popping everything")
	}
}
