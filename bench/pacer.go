package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// Pacer is the open-loop schedule of one connection: it hands out the
// intended start times of lock cycles at a fixed rate, whether or not the
// server keeps up. A cycle that starts late still carries its intended time,
// so that the latency it reports includes the time it spent waiting for a
// free slot (no coordinated omission: a slow server cannot hide its stalls
// by slowing the load down).
//
// Times are offsets from the start of the run, which the caller keeps (an
// event loop measures everything as such offsets; a blocking worker passes
// the start's time.Time to Wait). It is the one schedule of every open-loop
// driver: baton bench over the wire and through the Go client, and the
// etcd and Redis drivers of tools/compare, so that a rate means the same
// load whichever system it is aimed at.
//
// The schedule is a cursor, not a queue: cycles that are due but not started
// cost no memory, however far behind the connection falls. Its methods are
// safe for concurrent use, so that the cycle slots of one connection, when
// each is a goroutine of its own, can share the connection's schedule.
type Pacer struct {
	first  time.Duration // intended start of cycle 0, from the run's start
	period float64       // nanoseconds between intended starts
	k      atomic.Int64  // cycles handed out so far
}

// NewPacer returns the schedule of connection conn (0 to conns-1) of conns
// when all of them together should start rate cycles per second; rate must
// be positive. The connections' schedules are staggered by an equal share
// of the period, so that the total load is spread evenly rather than sent
// in bursts of conns.
func NewPacer(rate float64, conn, conns int) *Pacer {
	period := float64(time.Second) * float64(conns) / rate
	return &Pacer{first: time.Duration(period * float64(conn) / float64(conns)), period: period}
}

// NewPacers returns the schedules of conns connections that together start
// rate cycles per second, one per connection (see NewPacer).
func NewPacers(rate float64, conns int) []*Pacer {
	ps := make([]*Pacer, conns)
	for i := range ps {
		ps[i] = NewPacer(rate, i, conns)
	}
	return ps
}

// TotalBehind is the sum of the schedules' Behind at now: what a run that
// stopped sending at now never started (see Result.NoteBehind).
func TotalBehind(ps []*Pacer, now time.Duration) int64 {
	var n int64
	for _, p := range ps {
		n += p.Behind(now)
	}
	return n
}

// at is the intended start of cycle k.
func (p *Pacer) at(k int64) time.Duration {
	return p.first + time.Duration(p.period*float64(k))
}

// Next is the intended start of the next cycle not handed out yet: when an
// event loop should wake up to start it.
func (p *Pacer) Next() time.Duration { return p.at(p.k.Load()) }

// Take hands out the next intended start if it is not after now (an offset
// from the run's start), for an event loop that starts every due cycle it
// has a free slot for. The start returned may lie well before now: the
// cycle's latency is counted from it.
func (p *Pacer) Take(now time.Duration) (time.Duration, bool) {
	for {
		k := p.k.Load()
		t := p.at(k)
		if t > now {
			return 0, false
		}
		if p.k.CompareAndSwap(k, k+1) {
			return t, true
		}
	}
}

// Wait is Take for a worker that blocks (one goroutine per cycle slot,
// making blocking calls): it hands out the next intended start and sleeps
// until then, base + the start; it returns the start as an offset from
// base. When the start is already past (the slot was busy with earlier
// cycles), it returns at once, and the cycle's latency counted from the
// start includes that delay.
//
// The sleep is a runtime timer, which on Linux wakes up to a millisecond
// late; counted from the intended start, that lateness is in the latency,
// as it is for an event loop woken by a deadline.
//
// It returns false when ctx is done first: give ctx the end of the run as
// its deadline, so that a worker whose next start is far off stops at the
// end. A start handed out and then abandoned this way lay after ctx
// ended, so it was not due yet and Behind does not miss it.
func (p *Pacer) Wait(ctx context.Context, base time.Time) (time.Duration, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	t := p.at(p.k.Add(1) - 1)
	d := time.Until(base.Add(t))
	if d <= 0 {
		return t, true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return t, true
	case <-ctx.Done():
		return 0, false
	}
}

// Behind is how many cycles were due by now and not handed out: at the end
// of a run, the cycles the server never got to start because it did not
// keep up (see Result.NoteBehind).
func (p *Pacer) Behind(now time.Duration) int64 {
	if now < p.first {
		return 0
	}
	due := int64(float64(now-p.first)/p.period) + 1
	return max(0, due-p.k.Load())
}
