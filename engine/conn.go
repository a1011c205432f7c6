package engine

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/codec"
	"github.com/valyala/bytebufferpool"
)

// transport is the socket under a connState: a gnet connection (server.go)
// or a TLS one (tls.go). Everything above it, parsing, serving, answering
// and the limits and metrics of connections, is the same for both
// (serve.go and this file).
type transport interface {
	// wake asks for the queued answers to be written soon, by whoever
	// writes this connection's socket (its event loop, its writer
	// goroutine). It must not block: it is called under shard locks.
	wake()
	// cut closes a connection the limits cut off (connState.cut), without
	// waiting for whoever writes its socket, which may be blocked on the
	// client. It is called without cs.mu and must not block.
	cut()
	// recheck asks the connection to look at its unsent bytes again and
	// cut itself off if the node is still over MaxUnsent
	// (unsentLedger.shed picked it). It must not block.
	recheck()
	// peerClosed asks the kernel, without waiting, whether the client has
	// closed its end (see peerGone).
	peerClosed() bool
	// remoteAddr is the client's address, for log lines.
	remoteAddr() string
}

// connState is what the engine knows of one client connection.
//
// Responses are produced on several goroutines (the connection's reader, an
// event loop or a TLS connection's goroutine, for answers it can give at
// once, the shards' apply and timer goroutines for the rest). They are
// appended to out under mu; whoever appends first after a flush asks the
// transport to flush (wake), so a burst of responses costs one wake-up and
// one write. out comes from a pool and goes back after each flush, so an
// idle connection holds no output buffer at all.
type connState struct {
	t   transport
	adm *admission   // the node's limits and counts
	m   *nodeMetrics // counts every answer queued here (send, sendParseError)

	mu       sync.Mutex
	out      *bytebufferpool.ByteBuffer // nil when nothing is queued
	flushing bool                       // a flush is on its way: the reader serves input, or a wake is queued
	closed   bool                       // the connection ended (closeConn), or cutOff: drop output, enqueue no waiters
	waiters  *waiter                    // this connection's unanswered acquires (cprev/cnext list)
	nwaiters int                        // length of waiters
	// cutOff: too many answers wait for the client to take them (cutBy
	// says which limit); the connection is being closed.
	cutOff bool
	cutBy  limitKind

	// writing is the size of the flush under way: answers taken from out
	// that the socket has not taken yet. They count against
	// MaxUnsentPerConn with out; a TLS connection's Write blocks while its
	// client does not read.
	writing atomic.Int64

	// alivePolledAt is the apply time (monoNow of one applied entry) at
	// which the kernel last said the peer was still there; see peerGone.
	alivePolledAt atomic.Int64

	// Used only by the connection's reader (its event loop, or its TLS
	// goroutine).
	touched []*shard // shards that got commands from the input being served
	authed  bool     // an H with the right secret was received (Node.secretHash)
	// listed counts the waiters ever added. Only the reader adds them
	// (addWaiter), so it may read this without mu: an acquire that listed
	// no waiter was answered on receipt.
	listed uint64

	// unsent is the bytes the socket had not taken at the last settle
	// (unsentLedger); used only by the goroutine that settles them (the
	// event loop, or the TLS writer).
	unsent int64
}

func newConnState(t transport, adm *admission, m *nodeMetrics) *connState {
	return &connState{t: t, adm: adm, m: m}
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
	cs.m.answered(codec.ParseErrorOp(r, perr), codec.StatusErr, bytesOf(perr.Code))
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
// asks the transport for one. Answers not written yet (queued, or in the
// flush under way) count against MaxUnsentPerConn like those the socket
// holds: a burst of them (grants of thousands of the connection's waiters
// in one entry) is cut off here rather than copied into gnet first, and a
// TLS client that does not read is cut off here.
func (cs *connState) unlockAndWake() {
	cut := int64(len(cs.out.B))+cs.writing.Load() > int64(cs.adm.limits.MaxUnsentPerConn)
	if cut {
		cs.cutLocked(limitUnsentPerConn)
	}
	wake := !cs.flushing
	cs.flushing = true
	cs.mu.Unlock()
	if wake {
		cs.t.wake()
	}
	if cut {
		cs.t.cut()
	}
}

// beginTraffic marks that the reader is about to flush, so that responses
// produced meanwhile do not queue a redundant wake. It reports whether the
// connection was cut off meanwhile, to be closed instead.
func (cs *connState) beginTraffic() (cutOff bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.flushing = true
	return cs.cutOff
}

// flush writes everything queued to w, the connection's socket; only the
// one goroutine that writes the socket calls it. w must be done with the
// bytes when Write returns (gnet copies what it cannot send at once into its
// outbound buffer), since they go back to the pool. It reports whether the
// connection was cut off, to be closed instead, and w's error.
func (cs *connState) flush(w io.Writer) (cutOff bool, err error) {
	cs.mu.Lock()
	buf := cs.out
	cs.out = nil
	cs.flushing = false
	cutOff = cs.cutOff
	if buf != nil {
		cs.writing.Store(int64(len(buf.B)))
	}
	cs.mu.Unlock()
	if buf == nil {
		return cutOff, nil
	}
	_, err = w.Write(buf.B)
	cs.writing.Store(0)
	bytebufferpool.Put(buf)
	return false, err
}

// cut cuts the connection off for limit (unsentLedger's verdicts), unless
// it is closed already.
func (cs *connState) cut(limit limitKind) {
	cs.mu.Lock()
	first := !cs.closed
	if first {
		cs.cutLocked(limit)
	}
	cs.mu.Unlock()
	if first {
		cs.t.cut()
	}
}

// cutLocked cuts the connection off for limit: its output is dropped and it
// takes no more waiters, as if closed (a grant that lands for it is
// released at once); the transport closes it (its event loop at the next
// flush, or transport.cut), and closeConn logs the limit hit. mu must be
// held.
func (cs *connState) cutLocked(limit limitKind) {
	cs.cutOff, cs.closed, cs.cutBy = true, true, limit
	if cs.out != nil {
		bytebufferpool.Put(cs.out)
		cs.out = nil
	}
}

// cutOffBy reports the limit that cut the connection off, if one did.
func (cs *connState) cutOffBy() (limit limitKind, cut bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.cutBy, cs.cutOff
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
	if cs.t.peerClosed() {
		return true
	}
	cs.alivePolledAt.Store(now)
	return false
}

// touch remembers that s has new commands to propose once the input at hand
// is served.
func (cs *connState) touch(s *shard) {
	for _, t := range cs.touched {
		if t == s {
			return
		}
	}
	cs.touched = append(cs.touched, s)
}
