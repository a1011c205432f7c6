package engine

import (
	"math/rand"
	"sort"
	"testing"
)

func TestLeaseHeapOrdersSetsAndClears(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var h deadlineHeap[*keyState]
	keys := make([]*keyState, 500)
	for i := range keys {
		keys[i] = &keyState{leaseIdx: notInHeap, deadline: rng.Int63n(300)} // equal deadlines on purpose
		h.set(keys[i])
	}
	// Extend some leases (set again moves them), free others (clear).
	live := map[*keyState]bool{}
	for i, ks := range keys {
		switch i % 3 {
		case 0:
			ks.deadline += rng.Int63n(300)
			h.set(ks)
			live[ks] = true
		case 1:
			h.clear(ks)
			h.clear(ks) // twice is harmless
			if ks.leaseIdx != notInHeap {
				t.Fatal("cleared key still has a heap position")
			}
		default:
			live[ks] = true
		}
	}
	var want []int64
	for ks := range live {
		want = append(want, ks.deadline)
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if h.Len() != len(want) {
		t.Fatalf("heap holds %d keys, want %d", h.Len(), len(want))
	}
	if _, ok := h.popDue(want[0] - 1); ok {
		t.Fatal("popDue returned a key before its deadline")
	}
	for i, w := range want {
		ks, ok := h.popDue(1 << 62)
		if !ok || ks.deadline != w {
			t.Fatalf("pop %d: got %v, want deadline %d", i, ks, w)
		}
		if !live[ks] || ks.leaseIdx != notInHeap {
			t.Fatalf("pop %d: a cleared key, or one still marked in the heap", i)
		}
	}
}

func TestWaitHeapClear(t *testing.T) {
	var h deadlineHeap[*waiter]
	ws := []*waiter{{waitUntil: 30}, {waitUntil: 10}, {waitUntil: 20}}
	for _, w := range ws {
		w.waitIdx = notInHeap
		h.set(w)
	}
	h.clear(ws[1]) // the earliest
	if got, _ := h.popDue(100); got != ws[2] {
		t.Fatalf("first due = %+v, want the 20 ms waiter", got)
	}
	if got, ok := h.popDue(25); ok {
		t.Fatalf("popDue(25) = %+v, want nothing", got)
	}
	if next, ok := nextDeadline(nil, h); !ok || next != 30 {
		t.Fatalf("next deadline = %d, %v; want 30", next, ok)
	}
}
