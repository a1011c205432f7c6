package engine

import "container/heap"

// The shard keeps two min-heaps of deadlines: one entry per held key (its
// lease) and one per waiter with a finite wait. Each item knows its position,
// so a freed key or an answered waiter leaves its heap at once: timer memory
// is exactly proportional to what is held and waiting, never to what was
// released during the last lease period.

// notInHeap marks an item that is in no heap.
const notInHeap = -1

// timed is an item of a deadlineHeap: it knows its deadline and keeps its
// own position in the heap.
type timed interface {
	comparable
	due() int64
	heapIndex() *int32
}

func (ks *keyState) due() int64        { return ks.deadline }
func (ks *keyState) heapIndex() *int32 { return &ks.leaseIdx }
func (w *waiter) due() int64           { return w.waitUntil }
func (w *waiter) heapIndex() *int32    { return &w.waitIdx }

// deadlineHeap is a min-heap on due(), with removal of any item.
type deadlineHeap[T timed] []T

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (h deadlineHeap[T]) Len() int           { return len(h) }
func (h deadlineHeap[T]) Less(i, j int) bool { return h[i].due() < h[j].due() }
func (h deadlineHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	*h[i].heapIndex(), *h[j].heapIndex() = int32(i), int32(j)
}

func (h *deadlineHeap[T]) Push(x any) {
	item := x.(T)
	*item.heapIndex() = int32(len(*h))
	*h = append(*h, item)
}

func (h *deadlineHeap[T]) Pop() any {
	old := *h
	item := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero // drop the reference so the GC can reclaim it
	*h = old[:len(old)-1]
	*item.heapIndex() = notInHeap
	return item
}

// set arms item's timer at item.due(), or moves it there if armed.
func (h *deadlineHeap[T]) set(item T) {
	if i := *item.heapIndex(); i != notInHeap {
		heap.Fix(h, int(i))
		return
	}
	heap.Push(h, item)
}

// clear disarms item's timer, if armed.
func (h *deadlineHeap[T]) clear(item T) {
	if i := *item.heapIndex(); i != notInHeap {
		heap.Remove(h, int(i))
	}
}

// popDue removes and returns the earliest item if it is due by now.
func (h *deadlineHeap[T]) popDue(now int64) (T, bool) {
	if len(*h) == 0 || (*h)[0].due() > now {
		var zero T
		return zero, false
	}
	return heap.Pop(h).(T), true
}

// next returns the earliest deadline, if any.
func (h deadlineHeap[T]) next() (int64, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[0].due(), true
}

// nextDeadline returns the earliest deadline of either heap.
func nextDeadline(l deadlineHeap[*keyState], w deadlineHeap[*waiter]) (int64, bool) {
	a, okA := l.next()
	b, okB := w.next()
	switch {
	case okA && okB:
		return min(a, b), true
	case okA:
		return a, true
	}
	return b, okB
}
