package engine

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/codec"
	"github.com/valyala/bytebufferpool"
)

// transport is the socket under a connState: a gnet connection (server.go)
// or one served by goroutines of its own (stream.go): a TLS one (tls.go),
// or a gnet one its client half-closed (halfclose.go). Everything above
// it, parsing, serving, answering and the limits and metrics of
// connections, is the same for all (serve.go and this file).
type transport interface {
	// wake asks for the queued answers to be written soon, by whoever
	// writes this connection's socket (its event loop, its writer
	// goroutine). It must not block: it is called under shard locks.
	wake()
	// writeNow writes b to the socket at once, from any goroutine, without
	// blocking, and returns how much of it the socket took (what it did
	// not take, on any error too, is for wake's writer to send, which then
	// meets the error itself). ok is false for a transport that cannot:
	// its own writer owns the socket. connState calls it only under mu,
	// with the connection open and nothing of its own in flight
	// (writeHeld), which is what keeps answers in order.
	writeNow(b []byte) (n int, ok bool)
	// cut closes a connection the limits cut off (connState.cut), without
	// waiting for whoever writes its socket, which may be blocked on the
	// client. It is called without cs.mu and must not block.
	cut()
	// recheck asks the connection to look at its unsent bytes again and
	// cut itself off if the node is still over MaxUnsent
	// (unsentLedger.shed picked it). It must not block.
	recheck()
	// peer asks the kernel, without waiting, whether the client has sent
	// its FIN or is gone (see peerGone).
	peer() peerState
	// remoteAddr is the client's address, for log lines.
	remoteAddr() string
}

// peerState is what the kernel says of a connection's client.
type peerState uint8

const (
	peerOpen peerState = iota // nothing says it left
	// peerFinished: it sent its FIN. It may have closed the connection or
	// only its sending half (a piped request, nc); the kernel cannot tell
	// which, and nor can the server until it writes: the first write to a
	// closed end is answered by a reset.
	peerFinished
	peerGone // reset, or the descriptor is closed already
)

// connState is what the engine knows of one client connection.
//
// Responses are produced on several goroutines (the connection's reader, an
// event loop or a TLS connection's goroutine, for answers it can give at
// once, the shards' apply and timer goroutines for the rest). They are
// appended to out under mu; whoever appends first after a flush sees that
// a flush is due (flushBy) and either asks the transport for one (wake), so
// a burst of responses costs one wake-up and one write, or, when it is a
// shard applying an entry, holds the connection and writes what is queued
// itself once the entry is done (heldAnswers, writeHeld): that saves the
// event loop's wake-up, a system call and a hand-over to another thread,
// on every answer that a commit produces. out comes from a pool and goes
// back after each flush, so an idle connection holds no output buffer at
// all.
type connState struct {
	t   transport
	adm *admission   // the node's limits and counts
	m   *nodeMetrics // counts every answer queued here (send, sendParseError)

	mu      sync.Mutex
	out     *bytebufferpool.ByteBuffer // nil when nothing is queued
	flushBy flusher                    // who writes out next, if anyone is to
	// socketClear: nothing of this connection's is on its way to the
	// socket (no flush under way, nothing left in gnet's outbound buffer
	// at the reader's last flush), so writeHeld may write to it directly.
	socketClear bool
	closed      bool              // the connection ended (closeConn), or cutOff: drop output, enqueue no waiters
	waiters     *waiter           // this connection's unanswered acquires (cprev/cnext list)
	nwaiters    int               // length of waiters
	watches     map[string]*watch // this connection's watches, by key (watch.go)
	// cutOff: too many answers wait for the client to take them (cutBy
	// says which limit); the connection is being closed.
	cutOff bool
	cutBy  limitKind

	// The client's end of input (halfclose.go). answered counts the
	// answers queued (every request gets exactly one); eof says the reader
	// met the end of the client's input, after asked requests; finSeen
	// that the client's FIN is in (eof, or the kernel said so, peerGone).
	// provisional is the grants sent since the FIN, not known to have
	// reached the client (a reset makes them grants for nobody, released);
	// the first flushedGrants of them were handed to the socket by the
	// last flush.
	answered      uint64
	eof           bool
	finSeen       bool
	provisional   []provisionalGrant
	flushedGrants int

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
	// memberDone is closed once the answer to the connection's latest M is
	// queued: the next M waits for it (serveMember).
	memberDone chan struct{}
	// asked counts the request lines served; under mu once eof is set (it
	// does not change after).
	asked uint64
	// listed counts the waiters ever added. Only the reader adds them
	// (addWaiter), so it may read this without mu: an acquire that listed
	// no waiter was answered on receipt.
	listed uint64

	// unsent is the bytes the socket had not taken at the last settle
	// (unsentLedger); used only by the goroutine that settles them (the
	// event loop), or under mu when queuedUnsent is set.
	unsent int64
	// queuedUnsent: the transport's own writer may block on the client
	// with answers queued behind it in out (TLS), so the ledger counts out
	// and the write under way, settled under mu wherever they change
	// (unlockAndWake, settleQueued); set before the connection serves.
	queuedUnsent bool
}

// flusher says who is to write a connection's queued answers.
type flusher uint8

const (
	flushNone flusher = iota // nobody: the next answer queued must see to it
	flushLoop                // the socket's writer: its reader is serving input, or a wake is queued
	flushHeld                // a shard applying an entry, at the end of the entry (writeHeld)
)

func newConnState(t transport, adm *admission, m *nodeMetrics) *connState {
	return &connState{t: t, adm: adm, m: m, socketClear: true}
}

// send appends one response and makes sure it will be flushed. h is the
// answers held by the shard applying an entry, when that is who sends: the
// shard writes them when the entry is done (heldAnswers.write); nil asks
// the socket's writer (wake).
func (cs *connState) send(r *codec.Response, h *heldAnswers) { cs.sendGrant(r, h, nil) }

// sendEvent is send for a line that answers no request: a watch's line
// after its first (watch.go). It does not count as an answer (answered),
// so that a half-closed connection is not taken for one that got every
// answer it is owed.
func (cs *connState) sendEvent(r *codec.Response, h *heldAnswers) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
	cs.m.answered(r.Op, r.Status, r.Code)
	cs.buffer().B = codec.AppendResponse(cs.out.B, r)
	cs.unlockAndWake(h)
}

// sendGrant is send, for a grant g when g is not nil: after the client's
// FIN, g is kept as provisional (halfclose.go).
func (cs *connState) sendGrant(r *codec.Response, h *heldAnswers, g *provisionalGrant) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
	if g != nil && cs.finSeen {
		cs.provisional = append(cs.provisional, *g)
	}
	cs.m.answered(r.Op, r.Status, r.Code)
	cs.answered++
	cs.buffer().B = codec.AppendResponse(cs.out.B, r)
	cs.unlockAndWake(h)
}

// sendParseError appends the ERR answer to a malformed request; h as for
// send.
func (cs *connState) sendParseError(r *codec.Request, perr *codec.ParseError, h *heldAnswers) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
	cs.m.answered(codec.ParseErrorOp(r, perr), codec.StatusErr, bytesOf(perr.Code))
	cs.answered++
	cs.buffer().B = codec.AppendParseError(cs.out.B, r, perr)
	cs.unlockAndWake(h)
}

// buffer returns out, taking one from the pool if needed; mu must be held.
func (cs *connState) buffer() *bytebufferpool.ByteBuffer {
	if cs.out == nil {
		cs.out = bytebufferpool.Get()
	}
	return cs.out
}

// unlockAndWake releases mu after an append and, if no flush is on its way,
// sees to one: h holds the connection (see send), or the transport is
// asked. Answers not written yet (queued, or in the flush under way) count
// against MaxUnsentPerConn like those the socket holds: a burst of them
// (grants of thousands of the connection's waiters in one entry) is cut
// off here rather than copied into gnet first, and a TLS client that does
// not read is cut off here.
func (cs *connState) unlockAndWake(h *heldAnswers) {
	queued := cs.queuedLocked()
	limit, cut := limitUnsentPerConn, queued > int64(cs.adm.limits.MaxUnsentPerConn)
	if cs.queuedUnsent {
		limit, cut = cs.adm.unsent.settle(cs, queued)
	}
	if cut {
		cs.cutLocked(limit)
	}
	first := cs.flushBy == flushNone
	if first {
		cs.flushBy = flushLoop
		if h != nil {
			cs.flushBy = flushHeld
		}
	}
	cs.mu.Unlock()
	if first {
		if h != nil {
			h.conns = append(h.conns, cs)
		} else {
			cs.t.wake()
		}
	}
	if cut {
		cs.t.cut()
	}
}

// writeHeld writes what is queued for a connection a shard held (send with
// heldAnswers), straight to the socket, under mu, if the reader has not
// taken the flush over meanwhile. What the socket does not take, or what
// cannot be written directly (a flush of the reader's under way, bytes left
// in gnet's buffer, a TLS connection), goes to the socket's writer as
// before (wake), as does a connection that was cut off, to be closed.
func (cs *connState) writeHeld() {
	cs.mu.Lock()
	if cs.flushBy != flushHeld {
		cs.mu.Unlock()
		return // the reader took over: it flushes
	}
	if cs.out != nil && !cs.closed && cs.socketClear {
		n, ok := cs.t.writeNow(cs.out.B)
		if ok && n == len(cs.out.B) {
			bytebufferpool.Put(cs.out)
			cs.out = nil
		} else if ok {
			// The rest goes after what the socket took, through the
			// writer; no direct write until the writer has sent it.
			cs.out.B = cs.out.B[:copy(cs.out.B, cs.out.B[n:])]
			cs.socketClear = false
		}
	}
	if cs.out == nil && !cs.cutOff {
		cs.flushBy = flushNone
		cs.mu.Unlock()
		return
	}
	cs.flushBy = flushLoop
	cs.mu.Unlock()
	cs.t.wake()
}

// heldAnswers is the connections a shard holds while it applies an entry
// (shard.applying): the answers the entry produces are queued without
// waking anyone, and written by the shard once the entry is done, one
// write per connection.
type heldAnswers struct {
	conns []*connState
}

// write writes every held connection's answers (writeHeld) and forgets
// them.
func (h *heldAnswers) write() {
	for i, cs := range h.conns {
		cs.writeHeld()
		h.conns[i] = nil
	}
	h.conns = h.conns[:0]
}

// beginTraffic marks that the reader is about to flush, so that responses
// produced meanwhile do not queue a redundant wake (and a shard holding
// the connection leaves the flush to the reader). It reports whether the
// connection was cut off meanwhile, to be closed instead.
func (cs *connState) beginTraffic() (cutOff bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.flushBy = flushLoop
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
	cs.flushBy = flushNone
	cutOff = cs.cutOff
	cs.flushedGrants = len(cs.provisional) // queued before, so in this flush or an earlier one
	if buf != nil {
		cs.writing.Store(int64(len(buf.B)))
		cs.socketClear = false // until the writer has looked (flushed)
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

// settleQueued settles, on a connection with queuedUnsent, what is queued
// and under way now, after its writer's flush: the bytes the socket took
// leave the ledger.
func (cs *connState) settleQueued() {
	cs.mu.Lock()
	cs.adm.unsent.settle(cs, cs.queuedLocked())
	cs.mu.Unlock()
}

// queuedLocked is the bytes of answers not written yet: queued in out, and
// in the flush under way. mu must be held.
func (cs *connState) queuedLocked() int64 {
	n := cs.writing.Load()
	if cs.out != nil {
		n += int64(len(cs.out.B))
	}
	return n
}

// flushed records, after a flush, whether the socket took everything
// (nothing left in gnet's outbound buffer), which allows direct writes
// again (writeHeld). Only the socket's writer calls it.
func (cs *connState) flushed(empty bool) {
	cs.mu.Lock()
	cs.socketClear = empty
	cs.mu.Unlock()
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
	connClosed           // the client is gone: do not queue the acquire (or start the watch)
	connFull             // MaxWaitersPerConn (MaxWatchesPerConn) reached
	nodeFull             // MaxWaiters (MaxWatches) reached
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

// peerGone reports whether the client is gone, even if its event loop has
// not seen it yet. Loops do not order events of different connections, so
// a grant can land between a client's reset and OnClose; asking the kernel
// keeps that grant from going to nobody. A client whose FIN is in is not
// gone: it may still read (halfclose.go); that is noted (finSeen), so that
// the grant sent to it is provisional.
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
	switch cs.t.peer() {
	case peerGone:
		return true
	case peerFinished:
		cs.mu.Lock()
		cs.finSeen = true
		cs.mu.Unlock()
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
