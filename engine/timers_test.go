package engine

import (
	"math/rand"
	"sort"
	"testing"
)

func TestLeaseHeapOrdersSetsAndClears(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var h leases
	const n = 500
	for slot := range uint32(n) {
		h.setDeadline(slot, rng.Int63n(300)) // equal deadlines on purpose
		h.arm(slot)
	}
	// Extend some leases (arm again moves them), free others (clear).
	live := map[uint32]bool{}
	for slot := range uint32(n) {
		switch slot % 3 {
		case 0:
			h.setDeadline(slot, h.deadlineOf(slot)+rng.Int63n(300))
			h.arm(slot)
			live[slot] = true
		case 1:
			h.clear(slot)
			h.clear(slot) // twice is harmless
			if h.armed(slot) {
				t.Fatal("cleared slot still has a heap position")
			}
		default:
			live[slot] = true
		}
	}
	var want []int64
	for slot := range live {
		want = append(want, h.deadlineOf(slot))
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if h.Len() != len(want) {
		t.Fatalf("heap holds %d slots, want %d", h.Len(), len(want))
	}
	if _, ok := h.popDue(want[0] - 1); ok {
		t.Fatal("popDue returned a slot before its deadline")
	}
	for i, w := range want {
		slot, ok := h.popDue(1 << 62)
		if !ok || h.deadlineOf(slot) != w {
			t.Fatalf("pop %d: got %v, want deadline %d", i, slot, w)
		}
		if !live[slot] || h.armed(slot) {
			t.Fatalf("pop %d: a cleared slot, or one still marked in the heap", i)
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
	if next, ok := nextDeadline(&leases{}, h); !ok || next != 30 {
		t.Fatalf("next deadline = %d, %v; want 30", next, ok)
	}
}
