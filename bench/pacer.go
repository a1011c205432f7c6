package bench

import "time"

// pacer is the open-loop schedule of one connection: it hands out the
// intended start times of lock cycles at a fixed rate, whether or not the
// server keeps up. A cycle that starts late still carries its intended time,
// so that the latency it reports includes the time it spent waiting for a
// free slot (no coordinated omission: a slow server cannot hide its stalls
// by slowing the load down).
//
// The schedule is a cursor, not a queue: cycles that are due but not started
// cost no memory, however far behind the connection falls.
type pacer struct {
	first  time.Duration // intended start of cycle 0, from the phase start
	period float64       // nanoseconds between intended starts
	k      int64         // cycles handed out so far
}

// newPacer returns the schedule of connection conn of conns when all of
// them together should start rate cycles per second. The connections'
// schedules are staggered by an equal share of the period, so that the
// total load is spread evenly rather than sent in bursts of conns.
func newPacer(rate float64, conn, conns int) *pacer {
	period := float64(time.Second) * float64(conns) / rate
	return &pacer{first: time.Duration(period * float64(conn) / float64(conns)), period: period}
}

// peek is the intended start of the next cycle.
func (p *pacer) peek() time.Duration {
	return p.first + time.Duration(p.period*float64(p.k))
}

// take hands out the next intended start if it is not after now.
func (p *pacer) take(now time.Duration) (time.Duration, bool) {
	t := p.peek()
	if t > now {
		return 0, false
	}
	p.k++
	return t, true
}

// behind is how many cycles were due by now and not handed out.
func (p *pacer) behind(now time.Duration) int64 {
	if now < p.first {
		return 0
	}
	due := int64(float64(now-p.first)/p.period) + 1
	return max(0, due-p.k)
}
