package engine

// leases keeps the lease deadline of every held key of the shard, by the
// table's slot (statemachine.Table), and on the serving leader a min-heap
// of the slots on their deadlines, for the lease timer. Per held key that
// is 12 bytes (a deadline and a heap position) and, armed, 4 in the heap:
// no pointer, no key, nothing for the GC to scan. The slot of a key freed
// leaves the heap at once (clear), so the heap is exactly as big as what
// is held, never as what was released during the last lease period.
//
// Followers keep the deadlines too (their Q answers tell the time left)
// but no heap: the new leader arms every lease afresh (startServing).
type leases struct {
	deadline []int64  // by slot: local monotonic end of the holder's lease
	pos      []int32  // by slot: position in heap, or notInHeap
	heap     []uint32 // slots, a min-heap on deadline
}

// grow makes room for slots up to slot.
func (l *leases) grow(slot uint32) {
	for int(slot) >= len(l.deadline) {
		l.deadline = append(l.deadline, 0)
		l.pos = append(l.pos, notInHeap)
	}
}

// reset forgets every deadline: the table was replaced, and its slots with
// it. slots is the new table's number of slots.
func (l *leases) reset(slots int) {
	l.deadline = make([]int64, 0, slots)
	l.pos = make([]int32, 0, slots)
	l.heap = l.heap[:0]
}

// setDeadline records the deadline of the holder in slot.
func (l *leases) setDeadline(slot uint32, d int64) {
	l.grow(slot)
	l.deadline[slot] = d
}

// deadlineOf is the deadline of the holder in slot.
func (l *leases) deadlineOf(slot uint32) int64 { return l.deadline[slot] }

// armed reports whether slot is in the heap.
func (l *leases) armed(slot uint32) bool {
	return int(slot) < len(l.pos) && l.pos[slot] != notInHeap
}

// arm puts slot in the heap at its deadline, or moves it there if it is in.
func (l *leases) arm(slot uint32) {
	l.grow(slot)
	if i := l.pos[slot]; i != notInHeap {
		if !l.up(int(i)) {
			l.down(int(i))
		}
		return
	}
	l.heap = append(l.heap, slot)
	l.pos[slot] = int32(len(l.heap) - 1)
	l.up(len(l.heap) - 1)
}

// clear takes slot out of the heap, if it is in, and forgets its deadline.
func (l *leases) clear(slot uint32) {
	if int(slot) >= len(l.pos) {
		return
	}
	l.deadline[slot] = 0
	i := l.pos[slot]
	if i == notInHeap {
		return
	}
	last := len(l.heap) - 1
	l.swap(int(i), last)
	l.heap = l.heap[:last]
	l.pos[slot] = notInHeap
	if int(i) < last && !l.up(int(i)) {
		l.down(int(i))
	}
}

// popDue takes the slot with the earliest deadline out of the heap if it
// is due by now.
func (l *leases) popDue(now int64) (uint32, bool) {
	if len(l.heap) == 0 || l.deadline[l.heap[0]] > now {
		return 0, false
	}
	slot := l.heap[0]
	l.clearArmed(slot)
	return slot, true
}

// clearArmed takes slot, which is in the heap, out of it, keeping its
// deadline.
func (l *leases) clearArmed(slot uint32) {
	d := l.deadline[slot]
	l.clear(slot)
	l.deadline[slot] = d
}

// next returns the earliest deadline in the heap, if any.
func (l *leases) next() (int64, bool) {
	if len(l.heap) == 0 {
		return 0, false
	}
	return l.deadline[l.heap[0]], true
}

// Len is the number of armed leases.
func (l *leases) Len() int { return len(l.heap) }

func (l *leases) less(i, j int) bool { return l.deadline[l.heap[i]] < l.deadline[l.heap[j]] }

func (l *leases) swap(i, j int) {
	h := l.heap
	h[i], h[j] = h[j], h[i]
	l.pos[h[i]], l.pos[h[j]] = int32(i), int32(j)
}

// up moves the item at i towards the root while it is earlier than its
// parent, and reports whether it moved.
func (l *leases) up(i int) bool {
	moved := false
	for i > 0 {
		parent := (i - 1) / 2
		if !l.less(i, parent) {
			break
		}
		l.swap(i, parent)
		i, moved = parent, true
	}
	return moved
}

// down moves the item at i away from the root while a child is earlier.
func (l *leases) down(i int) {
	n := len(l.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && l.less(r, c) {
			c = r
		}
		if !l.less(c, i) {
			return
		}
		l.swap(i, c)
		i = c
	}
}
