package bench

import (
	"time"

	"github.com/baton-dev/baton/codec"
)

// batcher runs the uncontended workload on one connection in rounds
// (Config.Shape ShapeBatch), the way a client library's pipeline sends
// them: the acquires of all Depth slots in one write and nothing more
// until every one is answered; then the releases of the tokens granted in
// one write and nothing more until every one is answered; then the next
// round. A sliding window (cycler) never lets a connection fall idle, so
// it shows what the server can do; rounds show what a caller that waits
// for its whole pipeline gets, where the slowest answer of a batch holds
// back the others.
//
// It keeps the cycler's slots, keys, token checks, ops budget and
// statistics, and replaces only its scheduling: no slot sends anything on
// its own answer. Every answer of the batch in flight pairs with its slot
// as in the window (by key and op), so pending is the cycler's count of
// requests in flight, which is the batch's.
type batcher struct {
	*cycler
	releasing bool          // the releases of the round are in flight, else its acquires
	sent      time.Duration // when the batch in flight was written
	measured  bool          // the round started after the warm-up
	granted   []int         // the slots whose acquire of this round was granted
}

func (b *batcher) begin(now time.Duration) { b.round(now) }

// next and fire: a round starts on the last answer of the one before,
// never on a schedule (Validate refuses a rate).
func (b *batcher) next() time.Duration { return -1 }

func (b *batcher) fire(time.Duration) {}

// round sends the acquires of the next round, one per slot as far as the
// ops budget goes, unless the run is ending.
func (b *batcher) round(now time.Duration) {
	c := b.cycler
	if c.p.stopping.Load() || c.exhausted {
		return
	}
	b.measured = now >= c.measureStart
	b.releasing = false
	b.sent = now
	b.granted = b.granted[:0]
	for i := range c.slots {
		if b.measured && !c.ops.take() {
			c.exhausted = true
			break
		}
		c.startCycle(i, now, b.measured, now)
	}
}

func (b *batcher) response(r *codec.Response, now time.Duration) {
	c := b.cycler
	i, ok := c.answered(r)
	if !ok {
		return
	}
	s := &c.slots[i]
	s.step = -1
	switch {
	case r.Status != codec.StatusOK:
		// The cycle ends here: an acquire that failed (a TIMEOUT, an
		// error) holds nothing to release, and a lock whose release
		// failed runs out with its lease, as in the window.
		c.st.addErr(statusKind(r), 1)
		if s.measured {
			c.ops.done(c.p)
		}
	case r.Op == c.acqOp:
		if s.measured {
			c.st.requests++
		}
		c.st.add(latAcquire, now-s.start, s.measured)
		c.granted(s, r.Token, now)
		b.granted = append(b.granted, i)
	default:
		c.st.add(latRelease, now-s.sent, s.measured)
		c.st.done++
		if s.measured {
			c.st.requests++
			c.st.add(latCycle, now-s.start, true)
			c.st.measured++
			c.st.lastDone = now
			c.ops.done(c.p)
		}
	}
	if c.inflight > 0 {
		return
	}
	// The last answer of the batch: the round goes on. The releases are
	// sent even when the run is stopping, so that no grant is left held.
	if !b.releasing {
		c.st.add(latRoundA, now-b.sent, b.measured)
		if len(b.granted) > 0 {
			b.releasing = true
			b.sent = now
			for _, j := range b.granted {
				c.send(j, 1, now) // steps[1] is R
			}
			return
		}
	} else {
		c.st.add(latRoundR, now-b.sent, b.measured)
	}
	b.round(now)
}
