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
	c gnet.Conn
	m *nodeMetrics // counts every answer queued here (send, sendParseError)

	mu       sync.Mutex
	out      *bytebufferpool.ByteBuffer // nil when nothing is queued
	flushing bool                       // the loop will flush out soon: OnTraffic runs or a Wake is queued
	closed   bool                       // OnClose ran: drop output, enqueue no waiters
	waiters  *waiter                    // this connection's unanswered acquires (cprev/cnext list)
	nwaiters int                        // length of waiters

	// alivePolledAt is the apply time (monoNow of one applied entry) at
	// which the kernel last said the peer was still there; see peerGone.
	alivePolledAt atomic.Int64

	// Used only on the connection's event loop.
	touched []*shard // shards that got commands during this OnTraffic
	// listed counts the waiters ever added. Only the event loop adds them
	// (addWaiter), so it may read this without mu: an acquire that listed
	// no waiter was answered on receipt.
	listed uint64
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
// asks the event loop for one.
func (cs *connState) unlockAndWake() {
	wake := !cs.flushing
	cs.flushing = true
	cs.mu.Unlock()
	if wake {
		_ = cs.c.Wake(nil) // fails only when the connection is gone
	}
}

// beginTraffic marks that the loop is about to flush, so that responses
// produced meanwhile do not queue a redundant Wake.
func (cs *connState) beginTraffic() {
	cs.mu.Lock()
	cs.flushing = true
	cs.mu.Unlock()
}

// flush writes everything queued; it runs on the event loop.
func (cs *connState) flush() {
	cs.mu.Lock()
	buf := cs.out
	cs.out = nil
	cs.flushing = false
	cs.mu.Unlock()
	if buf == nil {
		return
	}
	// Write completes synchronously or copies the rest into gnet's outbound
	// buffer, so buf can go back to the pool when it returns.
	_, _ = cs.c.Write(buf.B)
	bytebufferpool.Put(buf)
}

// Limits that keep one client from taking the server's memory.
const (
	// maxWaitersPerConn bounds the unanswered acquires of one connection;
	// more are answered ERR overloaded.
	maxWaitersPerConn = 100_000
	// maxOutbound bounds the answers written to a connection but not yet
	// taken by its client; a client that stops reading is disconnected.
	maxOutbound = 64 << 20
)

// addResult says whether a waiter could be added to its connection.
type addResult uint8

const (
	added      addResult = iota
	connClosed           // the client is gone: do not queue the acquire
	connFull             // maxWaitersPerConn reached
)

// addWaiter links w into the connection's list.
func (cs *connState) addWaiter(w *waiter) addResult {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch {
	case cs.closed:
		return connClosed
	case cs.nwaiters >= maxWaitersPerConn:
		return connFull
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
	cs.mu.Unlock()
	w.shard.stats.waiters.Add(-1)
	cs.m.acquireAnswered(w.received, monoNow())
}

// close marks the connection closed and returns its unanswered acquires.
func (cs *connState) close() []*waiter {
	cs.mu.Lock()
	defer cs.mu.Unlock()
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
