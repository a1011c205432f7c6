package engine

import "container/heap"

// The shard keeps two min-heaps of deadlines: one entry per held key (its
// lease) and one per waiter with a finite wait. Each item knows its position,
// so a freed key or an answered waiter leaves its heap at once: timer memory
// is exactly proportional to what is held and waiting, never to what was
// released during the last lease period.

// notInHeap marks an item that is in no heap.
const notInHeap = -1

// leaseHeap orders held keys by the deadline of their lease.
type leaseHeap []*keyState

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].leaseIdx, h[j].leaseIdx = int32(i), int32(j)
}

func (h *leaseHeap) Push(x any) {
	ks := x.(*keyState)
	ks.leaseIdx = int32(len(*h))
	*h = append(*h, ks)
}

func (h *leaseHeap) Pop() any {
	old := *h
	ks := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	ks.leaseIdx = notInHeap
	return ks
}

// set (re)arms the lease timer of ks at ks.deadline.
func (h *leaseHeap) set(ks *keyState) {
	if ks.leaseIdx == notInHeap {
		heap.Push(h, ks)
		return
	}
	heap.Fix(h, int(ks.leaseIdx))
}

// clear disarms the lease timer of ks, if armed.
func (h *leaseHeap) clear(ks *keyState) {
	if ks.leaseIdx != notInHeap {
		heap.Remove(h, int(ks.leaseIdx))
	}
}

// popDue removes and returns the key whose lease ran out first, if by now.
func (h *leaseHeap) popDue(now int64) *keyState {
	if len(*h) == 0 || (*h)[0].deadline > now {
		return nil
	}
	return heap.Pop(h).(*keyState)
}

// waitHeap orders waiters by the end of their wait.
type waitHeap []*waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].waitUntil < h[j].waitUntil }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].waitIdx, h[j].waitIdx = int32(i), int32(j)
}

func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
	w.waitIdx = int32(len(*h))
	*h = append(*h, w)
}

func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.waitIdx = notInHeap
	return w
}

// clear disarms the wait timer of w, if armed.
func (h *waitHeap) clear(w *waiter) {
	if w.waitIdx != notInHeap {
		heap.Remove(h, int(w.waitIdx))
	}
}

// popDue removes and returns the waiter whose wait ran out first, if by now.
func (h *waitHeap) popDue(now int64) *waiter {
	if len(*h) == 0 || (*h)[0].waitUntil > now {
		return nil
	}
	return heap.Pop(h).(*waiter)
}

// next returns the earliest deadline of either heap.
func nextDeadline(l leaseHeap, w waitHeap) (int64, bool) {
	switch {
	case len(l) == 0 && len(w) == 0:
		return 0, false
	case len(l) == 0:
		return w[0].waitUntil, true
	case len(w) == 0:
		return l[0].deadline, true
	}
	return min(l[0].deadline, w[0].waitUntil), true
}
