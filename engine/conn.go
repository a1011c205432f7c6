package engine

import (
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/codec"
	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"
)

// connState is what the engine knows of one client connection.
//
// Responses are produced on several goroutines (the event loop for answers
// it can give at once, the shards' apply and timer goroutines for the rest).
// They are appended to out under mu; whoever appends first after a flush
// asks the event loop to flush (Wake), so a burst of responses costs one
// wake-up and one write. out comes from a pool and goes back after each
// flush, so an idle connection holds no output buffer at all.
type connState struct {
	c   gnet.Conn
	adm *admission   // the node's limits and counts
	m   *nodeMetrics // counts every answer queued here (send, sendParseError)

	mu       sync.Mutex
	out      *bytebufferpool.ByteBuffer // nil when nothing is queued
	flushing bool                       // the loop will flush out soon: OnTraffic runs or a Wake is queued
	closed   bool                       // OnClose ran, or cutOff: drop output, enqueue no waiters
	waiters  *waiter                    // this connection's unanswered acquires (cprev/cnext list)
	nwaiters int                        // length of waiters
	// cutOff: too many answers wait for the client to take them
	// (limitUnsentPerConn); the event loop closes the connection.
	cutOff bool

	// alivePolledAt is the apply time (monoNow of one applied entry) at
	// which the kernel last said the peer was still there; see peerGone.
	alivePolledAt atomic.Int64

	// Used only on the connection's event loop.
	touched []*shard // shards that got commands during this OnTraffic
	unsent  int64    // bytes gnet held for the client after the last flush (unsentLedger)
	// listed counts the waiters ever added. Only the event loop adds them
	// (addWaiter), so it may read this without mu: an acquire that listed
	// no waiter was answered on receipt.
	listed uint64
}

func newConnState(c gnet.Conn, adm *admission, m *nodeMetrics) *connState {
	return &connState{c: c, adm: adm, m: m}
}

// send appends one response and makes sure it will be flushed.
func (cs *connState) send(r *codec.Response) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
	cs.m.answered(r.Op, r.Status, r.Code)
	cs.buffer().B = codec.AppendResponse(cs.out.B, r)
	cs.unlockAndWake()
}

// sendParseError appends the ERR answer to a malformed request.
func (cs *connState) sendParseError(r *codec.Request, perr *codec.ParseError) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
	op := byte('?') // as AppendParseError writes it
	if r != nil && len(r.Key) > 0 && perr.Code != codec.CodeTooLong {
		op = r.Op
	}
	cs.m.answered(op, codec.StatusErr, bytesOf(perr.Code))
	cs.buffer().B = codec.AppendParseError(cs.out.B, r, perr)
	cs.unlockAndWake()
}

// buffer returns out, taking one from the pool if needed; mu must be held.
func (cs *connState) buffer() *bytebufferpool.ByteBuffer {
	if cs.out == nil {
		cs.out = bytebufferpool.Get()
	}
	return cs.out
}

// unlockAndWake releases mu after an append and, if no flush is on its way,
// asks the event loop for one. Answers the loop has not flushed yet count
// against MaxUnsentPerConn like those gnet holds: a burst of them (grants of
// thousands of the connection's waiters in one entry) is cut off here
// rather than copied into gnet first.
func (cs *connState) unlockAndWake() {
	if len(cs.out.B) > cs.adm.limits.MaxUnsentPerConn {
		cs.cutLocked()
	}
	wake := !cs.flushing
	cs.flushing = true
	cs.mu.Unlock()
	if wake {
		_ = cs.c.Wake(nil) // fails only when the connection is gone
	}
}

// beginTraffic marks that the loop is about to flush, so that responses
// produced meanwhile do not queue a redundant Wake. It reports whether the
// connection was cut off meanwhile, to be closed instead.
func (cs *connState) beginTraffic() (cutOff bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.flushing = true
	return cs.cutOff
}

// flush writes everything queued; it runs on the event loop. It reports
// whether the connection was cut off, to be closed instead.
func (cs *connState) flush() (cutOff bool) {
	cs.mu.Lock()
	buf := cs.out
	cs.out = nil
	cs.flushing = false
	cutOff = cs.cutOff
	cs.mu.Unlock()
	if buf == nil {
		return cutOff
	}
	// Write completes synchronously or copies the rest into gnet's outbound
	// buffer, so buf can go back to the pool when it returns.
	_, _ = cs.c.Write(buf.B)
	bytebufferpool.Put(buf)
	return false
}

// cutLocked cuts the connection off: its output is dropped and it takes no
// more waiters, as if closed (a grant that lands for it is released at once);
// the event loop closes it at its next flush. mu must be held.
func (cs *connState) cutLocked() {
	cs.cutOff, cs.closed = true, true
	bytebufferpool.Put(cs.out)
	cs.out = nil
}

// addResult says whether a waiter could be added to its connection.
type addResult uint8

const (
	added      addResult = iota
	connClosed           // the client is gone: do not queue the acquire
	connFull             // MaxWaitersPerConn reached
	nodeFull             // MaxWaiters reached
)

// addWaiter links w into the connection's list. This is where
// MaxWaitersPerConn and MaxWaiters are checked.
func (cs *connState) addWaiter(w *waiter) addResult {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch {
	case cs.closed:
		return connClosed
	case cs.nwaiters >= cs.adm.limits.MaxWaitersPerConn:
		cs.adm.hits.hit(limitWaitersPerConn)
		return connFull
	case !cs.adm.admitWaiter():
		cs.adm.hits.hit(limitWaiters)
		return nodeFull
	}
	w.cnext = cs.waiters
	if cs.waiters != nil {
		cs.waiters.cprev = w
	}
	cs.waiters = w
	w.inConn = true
	cs.nwaiters++
	cs.listed++
	w.shard.stats.waiters.Add(1)
	return added
}

// removeWaiter unlinks w once it has been answered, which ends the
// acquire's time from receipt to answer.
func (cs *connState) removeWaiter(w *waiter) {
	cs.mu.Lock()
	if cs.closed || !w.inConn {
		cs.mu.Unlock()
		return // not listed, or the list was handed to close
	}
	if w.cprev != nil {
		w.cprev.cnext = w.cnext
	} else {
		cs.waiters = w.cnext
	}
	if w.cnext != nil {
		w.cnext.cprev = w.cprev
	}
	w.cprev, w.cnext = nil, nil
	w.inConn = false
	cs.nwaiters--
	cs.adm.waitersGone(1)
	cs.mu.Unlock()
	w.shard.stats.waiters.Add(-1)
	cs.m.acquireAnswered(w.received, monoNow())
}

// close marks the connection closed and returns its unanswered acquires
// (with, after a cut-off, some answered since: abandon ignores them).
func (cs *connState) close() []*waiter {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.adm.waitersGone(cs.nwaiters) // after a cut-off, the list as it was then
	cs.nwaiters = 0
	cs.closed = true
	if cs.out != nil {
		bytebufferpool.Put(cs.out)
		cs.out = nil
	}
	var ws []*waiter
	for w := cs.waiters; w != nil; w = w.cnext {
		ws = append(ws, w)
		w.shard.stats.waiters.Add(-1) // unanswered: no latency to record
	}
	cs.waiters = nil
	return ws
}

// isClosed reports whether the client has gone away.
func (cs *connState) isClosed() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.closed
}

// peerGone reports whether the client has closed the connection, even if
// its event loop has not read the close yet. Loops do not order events of
// different connections, so a grant can land between a client's close and
// OnClose; asking the kernel keeps that grant from going to nobody.
//
// now is the time its applied entry was taken up: an entry granting
// thousands of acquires to one connection asks the kernel once, not once
// per grant (a poll per grant cost an eighth of a leader's CPU).
func (cs *connState) peerGone(now int64) bool {
	if cs.isClosed() {
		return true
	}
	if cs.alivePolledAt.Load() == now {
		return false
	}
	if socketClosedByPeer(cs.c.Fd()) {
		return true
	}
	cs.alivePolledAt.Store(now)
	return false
}

// touch remembers that s has new commands to propose after this OnTraffic.
func (cs *connState) touch(s *shard) {
	for _, t := range cs.touched {
		if t == s {
			return
		}
	}
	cs.touched = append(cs.touched, s)
}
