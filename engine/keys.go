package engine

import "github.com/baton-dev/baton/codec"

// waiterState is where an acquire stands.
type waiterState uint8

const (
	// waitQueued: in the key's FIFO queue, no Grant proposed for it yet.
	waitQueued waiterState = iota + 1
	// waitGranting: a Grant for it is in flight (it is the queue's live head).
	waitGranting
	// waitDeferred: already decided (TIMEOUT, or ERR for a malformed A) but
	// held back, because an earlier acquire of the same key on the same
	// connection is still unanswered and answers to the same (op, key) must
	// keep their order.
	waitDeferred
	// waitDone: answered and out of the queue.
	waitDone
	// waitRegranting: a retry of the holder's owner (owners.go); its Grant
	// is in flight. It is in the queue only so that later answers on its
	// connection wait for it; nothing is granted to it from there.
	waitRegranting
)

// waiter is one acquire that has not been answered yet.
type waiter struct {
	cs      *connState
	ks      *keyState
	owner   string // protocol 1.1 owner; "" for none
	leaseMs uint32
	// permits: 0 for an exclusive acquire (A); for a shared one (S,
	// protocol 1.4) the key's permits.
	permits uint32
	tryLock bool
	// grantingShared: w is a shared acquire whose Grant is in flight,
	// counted in its key's sharedGranting.
	grantingShared bool
	// abandoned: the client stopped waiting (its connection closed or its
	// wait ran out) while the waiter's Grant was in flight; if the Grant
	// succeeds, the lock is released at once.
	abandoned bool
	state     waiterState
	inQueue   bool
	inConn    bool // listed in cs's waiters
	deferred  deferredAnswer
	waitUntil int64 // monotonic end of a finite wait
	waitIdx   int32 // position in the shard's wait heap, or notInHeap
	shard     *shard
	received  int64 // monoNow when the acquire was read, for its latency

	prev, next   *waiter // the key's queue
	cprev, cnext *waiter // the connection's list
}

// deferredAnswer is the answer of a waitDeferred waiter: OK with token
// when token is set (a grant of its owner), else TIMEOUT when err is nil,
// else the ERR of a malformed request.
type deferredAnswer struct {
	err   error
	token uint64
}

// op is the request w answers: A, or S for a shared acquire.
func (w *waiter) op() byte {
	if w.permits != 0 {
		return codec.OpShared
	}
	return codec.OpAcquire
}

// live reports whether w still waits for its answer to be decided.
func (w *waiter) live() bool {
	return w.state == waitQueued || w.state == waitGranting || w.state == waitRegranting
}

// keyState is the shard's working state of one busy key: its queue of
// waiters and its commands in flight (on the leader). The committed holder
// is not here but in the table (slot names its row, which the Table holds
// on every replica), and its lease deadline is the shard's leases'. A key
// has a keyState only while it has waiters or commands in flight (and, held,
// for a while after: busy.go), so the map of them stays as small as the
// working set: a key that is only held costs the table's row and a lease
// deadline, nothing more.
type keyState struct {
	key string
	// slot is the table's row of the committed holder, noSlot when the key
	// is free: kept from the results the shard has handled, so that it is
	// the holder as of the last Applied, like the rest of the view.
	slot     int32
	inflight int32 // commands proposed for this key and not applied yet
	// extending: Extends of the holder's token proposed and not applied
	// yet. The lease does not run out under them (leaseDue), or the Expire
	// would apply after an Extend that was answered OK.
	extending int32
	deferred  int32 // waitDeferred waiters in the queue
	queued    int32 // waiters in the queue, deferred ones too
	expiring  bool  // an Expire for the holder's token is in flight
	// triesQueued: a try may wait in the queue for what decides it (its
	// owner's Grant in flight, or this node's fence): endTries answers it.
	triesQueued bool
	// parked: idle, but kept in the shard's ring of parked keyStates
	// (busy.go), because the key is held.
	parked bool
	// shared: the key's holders are shared grants (protocol 1.4), and
	// slot is its header's row, which is no grant (shared.go).
	shared bool
	// granting is the exclusive acquire whose Grant is in flight;
	// sharedGranting counts the shared acquires whose Grants are. At most
	// one of the two is non-zero.
	granting       *waiter
	sharedGranting int32
	// grantOps: the Expires and Extends in flight of the key's shared
	// grants, by token (expiring and extending are the exclusive
	// holder's); nil until one.
	grantOps map[uint64]grantOp
	head     *waiter
	tail     *waiter
}

// noSlot is the slot of a free key.
const noSlot = -1

// enqueue appends w to the key's FIFO queue.
func (ks *keyState) enqueue(w *waiter) {
	w.prev, w.next = ks.tail, nil
	if ks.tail != nil {
		ks.tail.next = w
	} else {
		ks.head = w
	}
	ks.tail = w
	w.inQueue = true
	ks.queued++
	if w.state == waitDeferred {
		ks.deferred++
	}
}

// insertBefore puts z, which is in no queue, right before at.
func (ks *keyState) insertBefore(z, at *waiter) {
	z.prev, z.next = at.prev, at
	if at.prev != nil {
		at.prev.next = z
	} else {
		ks.head = z
	}
	at.prev = z
	z.inQueue = true
	ks.queued++
	if z.state == waitDeferred {
		ks.deferred++
	}
}

// unlink takes w out of the key's queue; it is a no-op when w is not in it.
func (ks *keyState) unlink(w *waiter) {
	if !w.inQueue {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		ks.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		ks.tail = w.prev
	}
	w.prev, w.next = nil, nil
	w.inQueue = false
	ks.queued--
	if w.state == waitDeferred {
		ks.deferred--
	}
}

// waiting is the number of acquires in the queue that wait for the lock:
// what MaxWaitersPerKey bounds (answers held back for order do not wait).
func (ks *keyState) waiting() int { return int(ks.queued - ks.deferred) }

// firstQueued is the waiter that is next in line for the lock.
func (ks *keyState) firstQueued() *waiter {
	for w := ks.head; w != nil; w = w.next {
		if w.state == waitQueued {
			return w
		}
	}
	return nil
}

// hasLiveWaiter reports whether cs has an unanswered acquire of this key
// (queued or granting) that a new answer on cs must not overtake.
func (ks *keyState) hasLiveWaiter(cs *connState) bool {
	for w := ks.head; w != nil; w = w.next {
		if w.cs == cs && w.live() {
			return true
		}
	}
	if g := ks.granting; g != nil && g.cs == cs && !g.abandoned {
		return true
	}
	return false
}

// grantSettled ends w's Grant in flight: it applied, or never will.
func (ks *keyState) grantSettled(w *waiter) {
	switch {
	case ks.granting == w:
		ks.granting = nil
	case w.grantingShared:
		w.grantingShared = false
		ks.sharedGranting--
	}
}

// idle reports whether the key has nothing in flight and nobody waiting,
// so that its state can be dropped (whether it is held is the table's).
func (ks *keyState) idle() bool {
	return ks.head == nil && ks.inflight == 0 && ks.granting == nil && ks.sharedGranting == 0
}
