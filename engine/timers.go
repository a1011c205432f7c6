package engine

import (
	"container/heap"
	"time"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// The shard keeps two min-heaps of deadlines: one entry per held key (its
// lease: leases.go) and one per waiter with a finite wait (here). Each item
// knows its position, so a freed key or an answered waiter leaves its heap
// at once: timer memory is exactly proportional to what is held and
// waiting, never to what was released during the last lease period.

// notInHeap marks an item that is in no heap.
const notInHeap = -1

// timed is an item of a deadlineHeap: it knows its deadline and keeps its
// own position in the heap.
type timed interface {
	comparable
	due() int64
	heapIndex() *int32
}

func (w *waiter) due() int64        { return w.waitUntil }
func (w *waiter) heapIndex() *int32 { return &w.waitIdx }

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
func nextDeadline(l *leases, w deadlineHeap[*waiter]) (int64, bool) {
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

// ---- the shard's lease and wait timers ----

// setDeadline starts the lease of the holder in slot, of leaseMs, afresh
// from now.
//
// Only the serving leader arms the lease timer: a follower's deadlines are
// restarted by startServing when it takes over, so keeping a heap of them
// would cost every follower a heap update per command for nothing. A key
// still armed from an earlier term is moved, to keep the heap ordered.
func (s *shard) setDeadline(slot uint32, leaseMs uint32, now int64) {
	d := plantedDeadline(now+msToNanos(leaseMs), leaseMs, now) // the chaos run's planted bug; a no-op without -tags chaosmutation
	s.leases.setDeadline(slot, d)
	if s.serving || s.leases.armed(slot) {
		s.leases.arm(slot)
		s.timerMayBeEarlier(d)
	}
}

// expireFailed re-arms a lease after an Expire of ours (o) did not apply,
// so that the lease is looked at again.
func (s *shard) expireFailed(o *origin) {
	ks := o.ks
	if o.shared {
		ks.notExpiring(o.token)
		if slot, held := s.grantSlot(ks, o.token); held {
			s.armLease(slot)
		}
		return
	}
	ks.expiring = false
	if s.holderToken(ks) != 0 {
		s.armLease(uint32(ks.slot))
	}
}

// armLease puts the lease of the holder in slot on the timer, at the
// deadline it has.
func (s *shard) armLease(slot uint32) {
	s.leases.arm(slot)
	s.timerMayBeEarlier(s.leases.deadlineOf(slot))
}

// nextTimer returns the earliest deadline of the shard's timers: leases,
// waits, and the end of a wait for this node's fence (fenceWait).
func (s *shard) nextTimer() (int64, bool) {
	next, ok := nextDeadline(&s.leases, s.waits)
	if f := s.fenceWaitUntil; f != 0 && (!ok || f < next) {
		return f, true
	}
	return next, ok
}

// timerMayBeEarlier wakes the timer goroutine if when may come before the
// deadline it sleeps towards.
func (s *shard) timerMayBeEarlier(when int64) {
	if next, _ := s.nextTimer(); when > next {
		return
	}
	select {
	case s.timerKick <- struct{}{}:
	default:
	}
}

// fireTimers acts on every deadline due by now and returns the next one.
func (s *shard) fireTimers(now int64) (next int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for slot, ok := s.leases.popDue(now); ok; slot, ok = s.leases.popDue(now) {
		s.leaseDue(slot, now)
	}
	for w, ok := s.waits.popDue(now); ok; w, ok = s.waits.popDue(now) {
		s.waitDue(w)
	}
	if s.fenceWaitUntil != 0 && now >= s.fenceWaitUntil {
		s.fenceWaitRanOut()
	}
	s.kickIfPending()
	return s.nextTimer()
}

// leaseDue proposes Expire for a lease that ran out, with the next waiter's
// Grant in the same batch. Only the serving leader acts: a lease armed
// before leadership moved away is dropped here, and re-armed by
// startServing if leadership comes back.
//
// A holder's Extend in flight holds the Expire back: proposed behind it, the
// Expire would apply after the Extend was answered OK, and end the lease it
// had just renewed. settle re-arms the lease once no Extend is left.
func (s *shard) leaseDue(slot uint32, now int64) {
	if !s.serving || !s.table.Held(slot) {
		return // startServing re-arms every lease
	}
	key := s.table.Key(slot)
	ks := s.keys[string(key)]
	if ks == nil {
		ks = s.addKey(key) // slot may be a shared grant's, which is not the key's row
	}
	tok := s.table.Token(slot)
	if ks.shared {
		// slot is one of the key's shared grants, each with its lease.
		op := ks.opOf(tok)
		if op.expiring || op.extending > 0 {
			return
		}
		op.expiring = true
		ks.setOp(tok, op)
	} else {
		if ks.expiring || ks.extending > 0 {
			return // an Expire or settle re-arms it
		}
		ks.expiring = true
	}
	if s.node.tracing {
		s.trace("lease ran out: Expire proposed", "key", ks.key, "token", tok, "late_ms", (now-s.leases.deadlineOf(slot))/1e6)
	}
	s.propose(sm.Command{Op: sm.OpExpire, Key: bytesOf(ks.key), Token: tok}, origin{kind: originInternal, ks: ks, token: tok, shared: ks.shared})
	s.handOff(ks, 1)
}

// waitDue answers TIMEOUT to a waiter whose wait_ms ran out.
func (s *shard) waitDue(w *waiter) {
	ks := w.ks
	if w.live() {
		s.node.metrics.waitTimeouts.Inc()
	}
	switch w.state {
	case waitQueued:
		if s.hasEarlierLive(w) {
			w.state = waitDeferred
			w.deferred = deferredAnswer{}
			ks.deferred++
			return
		}
		s.send(w.cs, w.op(), bytesOf(ks.key), codec.StatusTimeout)
		s.handPlace(w)
		s.finish(w)
		s.forgetIfIdle(ks)
	case waitGranting, waitRegranting:
		// The Grant is in flight: answer now; a new grant that lands is
		// released (or kept for another acquire of the owner).
		w.abandoned = true
		s.send(w.cs, w.op(), bytesOf(ks.key), codec.StatusTimeout)
		s.handPlace(w)
		s.finish(w)
	}
}

// abandon forgets an acquire whose connection closed. A Grant already in
// flight for it is released when it lands (see answer).
func (s *shard) abandon(w *waiter) {
	ks := w.ks
	switch w.state {
	case waitQueued, waitDeferred:
		s.handPlace(w)
		ks.unlink(w)
		w.state = waitDone
	case waitGranting, waitRegranting:
		w.abandoned = true
		s.handPlace(w)
		ks.unlink(w)
	}
	s.waits.clear(w)
	s.forgetIfIdle(ks)
}

// hasEarlierLive reports whether w's connection has an unanswered acquire of
// the same key ahead of w.
func (s *shard) hasEarlierLive(w *waiter) bool {
	for z := w.ks.head; z != nil && z != w; z = z.next {
		if z.cs == w.cs && z.live() {
			return true
		}
	}
	return false
}

// runTimers sleeps until the earliest deadline and fires what is due.
func (s *shard) runTimers(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next, ok := s.fireTimers(monoNow())
		wait := time.Hour
		if ok {
			wait = time.Duration(next - monoNow())
		}
		t.Reset(wait)
		select {
		case <-stop:
			return
		case <-t.C:
		case <-s.timerKick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}
