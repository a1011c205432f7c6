package client

// Stall detection: noticing a server that stopped answering without closing
// the connection (a blackholed network, a process stopped with SIGSTOP), so
// that the requests waiting on it move to the other connections, as they do
// when a connection closes.
//
// Silence alone proves nothing: an acquire may wait for its grant for as
// long as it likes, and an idle connection owes us nothing. So a connection
// that owes answers and has read nothing for a third of the stall timeout
// asks the server something it must answer at once, a query of
// HeartbeatKey; any byte that arrives then (that answer or any other) shows
// the server is alive. When nothing at all arrives for the rest of the
// timeout either, the connection is given up.
//
// Cost: one timer per session, made when the session first owes an answer,
// set while it owes any, and left unset once it is idle; a clock read per
// read from the socket and per send to an idle connection. Idle connections
// send nothing.

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/baton-dev/baton/codec"
)

// DefaultStallTimeout is how long a connection that waits for answers may
// read nothing before the client gives it up; see WithStallTimeout. A
// cluster elects a new leader in a fraction of this, so it bounds how long
// a paused or cut-off leader holds its clients' requests (the chaos run's
// pause-leader figures in docs/testing.md); a healthy server answers a
// heartbeat query in milliseconds.
const DefaultStallTimeout = 1500 * time.Millisecond

// HeartbeatKey is the key the client queries to find out whether a silent
// server is still there (see WithStallTimeout). Servers see these queries
// like any other; do not use the key for a lock of your own. Nothing breaks
// if you do, but the client's heartbeats would query your lock.
const HeartbeatKey = "__baton_heartbeat__"

// WithStallTimeout sets how long a connection may go without reading a
// single byte while it waits for answers before the client gives it up
// (default DefaultStallTimeout): the requests waiting on it are then sent
// again on the other connections, exactly as when a connection closes, and
// the connection is redialled after RedialInterval. This catches a server
// that hangs or a network that drops everything without closing the
// connection, which would otherwise hold requests until their contexts end.
//
// A long wait for a lock is not a stall: after a third of d without a byte
// the connection sends a heartbeat, a query of HeartbeatKey whose answer
// (or any other byte) proves the server alive. A connection that waits for
// nothing sends nothing. Keep d well above the longest a healthy server
// takes to answer a query. d of 0 or less turns stall detection off.
func WithStallTimeout(d time.Duration) Option {
	return func(o *options) {
		o.stallTimeout = max(d, 0)
	}
}

// heartbeatRequest is what a heartbeat sends.
var heartbeatRequest = codec.Request{Op: codec.OpQuery, Key: []byte(HeartbeatKey)}

// stallError is why a connection was given up for silence.
type stallError struct {
	silent time.Duration // how long nothing was read while answers were owed
}

func (e *stallError) Error() string {
	return fmt.Sprintf("server stopped answering: nothing read for %v while requests waited, not even the answer to a heartbeat",
		e.silent.Round(time.Millisecond))
}

// stallWatch is the stall detection state of a connection's current
// session. conn.mu guards it. Times are on the connection's clock
// (conn.clock).
type stallWatch struct {
	// timer runs conn.checkStall; made on the session's first send, so a
	// session that never waits for anything has none.
	timer *time.Timer
	// due is when the timer fires; 0 while it is not set.
	due time.Duration
	// busySince is when the pending table last went from empty to not: the
	// server has owed us something since then.
	busySince time.Duration
	// probing: a heartbeat was sent (or, with the last one still
	// unanswered, due) at probeAt and nothing has been read since.
	probing bool
	probeAt time.Duration
	// probe is the last heartbeat sent; it is still unanswered while its
	// state is callPending.
	probe *call
}

// stallTimeout and heartbeatAfter are the two bounds of the detection: a
// heartbeat after heartbeatAfter of silence, a verdict at stallTimeout.
func (c *conn) stallTimeout() time.Duration   { return c.cl.opts.stallTimeout }
func (c *conn) heartbeatAfter() time.Duration { return c.cl.opts.stallTimeout / 3 }

// clock is the time since the connection was made, on the monotonic clock.
func (c *conn) clock() time.Duration { return time.Since(c.epoch) }

// noteRead records that bytes arrived. The reader calls it without c.mu.
func (c *conn) noteRead() {
	if c.stallTimeout() > 0 {
		c.lastRead.Store(int64(c.clock()))
	}
}

// watchBusyLocked starts the stall clock of the current session: a call is
// about to join an empty pending table. With the table empty, every
// heartbeat has been answered, so nothing of an earlier busy spell is left
// to wait for. c.mu is held and c.nc is set.
func (c *conn) watchBusyLocked() {
	if c.stallTimeout() <= 0 {
		return
	}
	w := &c.watch
	now := c.clock()
	w.busySince = now
	w.probing = false
	// A timer set to fire sooner is left as it is: the check it runs works
	// out the next one from the state. So a caller that sends one request
	// at a time, each to an idle connection, costs a timer operation per
	// heartbeat interval, not per request.
	if w.due == 0 || w.due > now+c.heartbeatAfter() {
		c.armWatchLocked(now, c.heartbeatAfter())
	}
}

// armWatchLocked sets the session's timer to run checkStall d after now,
// replacing whatever it was set to. c.mu is held and c.nc is set.
func (c *conn) armWatchLocked(now, d time.Duration) {
	w := &c.watch
	w.due = now + d
	if w.timer == nil {
		nc := c.nc // the timer belongs to this session: it checks nothing else
		w.timer = time.AfterFunc(d, func() { c.checkStall(nc) })
		return
	}
	w.timer.Reset(d)
}

// stopWatchLocked ends the stall detection of the session that is ending.
// A check already under way finds the session gone and does nothing.
// c.mu is held.
func (c *conn) stopWatchLocked() {
	if c.watch.timer != nil {
		c.watch.timer.Stop()
	}
	c.watch = stallWatch{}
	c.lastRead.Store(0)
}

// checkStall runs when the timer of the session on nc fires: it sends a
// heartbeat, sets the timer for the next look, or gives the session up.
func (c *conn) checkStall(nc net.Conn) {
	c.mu.Lock()
	if c.nc != nc {
		c.mu.Unlock()
		return
	}
	w := &c.watch
	w.due = 0
	if c.pending.len() == 0 {
		// Nothing is owed, so silence means nothing; the next send sets the
		// timer again.
		w.probing = false
		c.mu.Unlock()
		return
	}
	now := c.clock()
	lastRead := time.Duration(c.lastRead.Load())
	if w.probing && lastRead > w.probeAt {
		w.probing = false // something arrived after the heartbeat: alive
	}
	quietSince := max(w.busySince, lastRead)
	answerWithin := c.stallTimeout() - c.heartbeatAfter()
	if !w.probing {
		if wait := quietSince + c.heartbeatAfter() - now; wait > 0 {
			c.armWatchLocked(now, wait)
			c.mu.Unlock()
			return
		}
		// At most one heartbeat is unanswered at a time: while the last is,
		// the server still owes it, and that is question enough.
		sent := false
		if w.probe == nil || w.probe.state.Load() != callPending {
			// An internal call: in the pending table like any other, so that
			// pairing stays exact, but nobody waits for its answer.
			w.probe = newCall(heartbeatRequest.Op, HeartbeatKey)
			c.queueLocked(w.probe, &heartbeatRequest)
			sent = true
		}
		w.probing, w.probeAt = true, now
		c.armWatchLocked(now, answerWithin)
		c.mu.Unlock()
		if sent {
			c.wakeWriter()
		}
		return
	}
	if wait := w.probeAt + answerWithin - now; wait > 0 {
		c.armWatchLocked(now, wait)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.fail(nc, &stallError{silent: now - quietSince})
}

// endedSilent reports whether the last session was given up for silence.
func (c *conn) endedSilent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var se *stallError
	return errors.As(c.lastErr, &se)
}
