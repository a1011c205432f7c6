package engine

// timerKind says what a due timer means.
type timerKind uint8

const (
	timerLease timerKind = iota + 1 // a held key's lease may have run out
	timerWait                       // a waiter's wait_ms may have run out
)

// timer is one deadline. Timers are never removed when they become moot (a
// lease extended, a waiter granted): the shard checks a popped timer against
// the current state and drops it if stale. That keeps every operation
// O(log n) without back-pointers, at the cost of a few dead entries.
type timer struct {
	when  int64 // monotonic nanoseconds, see clock
	kind  timerKind
	token uint64    // timerLease: the grant whose lease this is
	ks    *keyState // timerLease
	w     *waiter   // timerWait
}

// timerHeap is a binary min-heap on when. It is hand-rolled rather than
// container/heap so that pushes and pops do not box timers in interfaces.
type timerHeap []timer

func (h *timerHeap) push(t timer) {
	*h = append(*h, t)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].when <= s[i].when {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// peek returns the earliest deadline, or false when the heap is empty.
func (h timerHeap) peek() (int64, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[0].when, true
}

func (h *timerHeap) pop() timer {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = timer{} // drop pointers so the GC can reclaim them
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].when < s[m].when {
			m = l
		}
		if r < len(s) && s[r].when < s[m].when {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
