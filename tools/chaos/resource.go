package chaos

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Resource is what the locks of a chaos run protect: per key, a register
// that takes a write only with a fencing token at least the highest it has
// taken before, as a storage service fenced by baton's tokens would.
//
// A rejected write is a holder arriving after a later holder, which is
// normal for a holder whose lease may have run out (that is what fencing is
// for). It is a violation only when the rejected holder's lease surely
// still covered the moment of the write (see Holding): then two holders'
// leases covered that moment, which the lock service must never allow.
// Every write is stamped, under the resource's lock, on the recorder's
// clock, so that the stamp and the holders' intervals are on one timeline
// with the recorded history.
type Resource struct {
	clock func() time.Duration

	mu         sync.Mutex
	keys       map[string]*fence
	stats      FenceStats
	violations []WriteEvent
	writes     []WriteEvent // every write, up to maxWrites, for a failure's history files
	dropped    int          // writes past maxWrites
}

// maxWrites bounds the resource's write log. A 30-minute run makes some
// 100,000 writes; the bound only keeps a runaway run's memory in check.
const maxWrites = 1 << 20

// fence is the state of one key's register: its highest token so far and
// who wrote it when, to name it in a violation.
type fence struct {
	token  uint64
	worker int
	at     time.Duration
}

// FenceStats counts the writes a Resource saw.
type FenceStats struct {
	// Accepted writes carried a token at least the highest seen.
	Accepted int
	// RejectedLate writes were turned away outside their holder's sure
	// interval: a holder that may have lost its lock, fenced off as it
	// should be.
	RejectedLate int
	// Violations are writes turned away inside their holder's sure
	// interval.
	Violations int
}

// NewResource returns a resource that stamps writes with clock (the
// recorder's Since).
func NewResource(clock func() time.Duration) *Resource {
	return &Resource{clock: clock, keys: make(map[string]*fence)}
}

// Write offers the resource a write by holder h, and reports whether it
// was taken. A write rejected while h's lease surely covered its stamp is
// recorded as a violation.
func (r *Resource) Write(h *Holding) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.clock()
	f := r.keys[h.Key]
	if f == nil {
		f = &fence{}
		r.keys[h.Key] = f
	}
	w := WriteEvent{
		At: at, From: h.From, SureUntil: h.SureUntil, Token: h.Token,
		Fence: f.token, FenceWorker: f.worker, FenceAt: f.at,
		Key: h.Key, Worker: h.Worker, Accepted: h.Token >= f.token,
	}
	if len(r.writes) < maxWrites {
		r.writes = append(r.writes, w)
	} else {
		r.dropped++
	}
	switch {
	case w.Accepted:
		*f = fence{token: h.Token, worker: h.Worker, at: at}
		r.stats.Accepted++
	case !w.covered():
		r.stats.RejectedLate++
	default:
		r.stats.Violations++
		r.violations = append(r.violations, w)
	}
	return w.Accepted
}

// fenceText is the violation line of a write rejected inside its holder's
// sure interval.
func fenceText(w WriteEvent) string {
	return fmt.Sprintf(
		"key %s: write at %v by worker %d with token %d rejected, yet its lease surely covered [%v, %v): the resource had taken token %d from worker %d at %v",
		w.Key, w.At, w.Worker, w.Token, w.From, w.SureUntil, w.Fence, w.FenceWorker, w.FenceAt)
}

// Stats returns the counts so far.
func (r *Resource) Stats() FenceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Violations returns one line per write rejected inside its holder's sure
// interval.
func (r *Resource) Violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := make([]string, len(r.violations))
	for i, w := range r.violations {
		lines[i] = fenceText(w)
	}
	return lines
}

// RejectedInside returns the writes rejected inside their holder's sure
// interval (those Violations describes), for a run to explain them.
func (r *Resource) RejectedInside() []WriteEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.violations)
}

// Writes returns every write the resource was offered, in the order of
// their stamps, and how many were left out of the log when it was full.
func (r *Resource) Writes() (writes []WriteEvent, dropped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes), r.dropped
}

// Holding is one grant as its holder sees it, with the interval in which
// its lease surely covers the moment, on the recorder's clock: from when
// Acquire returned to SureUntil.
//
// The server starts a lease when the grant takes effect, which is after the
// holder called Acquire, so the Acquire's call time plus the lease is a
// lower bound of the lease's end (a leader that takes over only restarts
// leases, which makes them longer). An Extend that succeeded took effect
// after it was called, so its call time plus its lease is again a lower
// bound; while it is under way, or when its outcome is unknown, the lease
// may end at either bound, whichever is sooner. The holder stops counting
// on the lock when it calls Release.
//
// A Holding belongs to the one worker that holds the grant.
type Holding struct {
	Key       string
	Token     uint64
	Worker    int
	From      time.Duration // when Acquire returned
	SureUntil time.Duration // the lease surely lasts until then
}

// NewHolding returns the holding of a grant whose Acquire was called at
// call, asking for lease, and returned at ret.
func NewHolding(key string, token uint64, worker int, call, ret time.Duration, lease time.Duration) *Holding {
	return &Holding{Key: key, Token: token, Worker: worker, From: ret, SureUntil: call + lease}
}

// Covers reports whether the lease surely covers at.
func (h *Holding) Covers(at time.Duration) bool {
	return at >= h.From && at < h.SureUntil
}

// ExtendCalled notes an Extend to lease called at call: until it is known to
// have succeeded, the lease may end as the new lease says, if sooner.
func (h *Holding) ExtendCalled(call, lease time.Duration) {
	h.SureUntil = min(h.SureUntil, call+lease)
}

// Extended notes that the Extend called at call, to lease, succeeded.
func (h *Holding) Extended(call, lease time.Duration) {
	h.SureUntil = call + lease
}

// ReleaseCalled notes that the holder gave the lock up at call.
func (h *Holding) ReleaseCalled(call time.Duration) {
	h.SureUntil = min(h.SureUntil, call)
}
