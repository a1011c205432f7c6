package engine

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/codec"
	"github.com/valyala/bytebufferpool"
)

// transport is the socket under a connState: a gnet connection (server.go)
// or a TLS one (tls.go). Everything above it, parsing, serving and
// answering, is the same for both (serve.go and this file).
type transport interface {
	// wake asks for the queued answers to be written soon, by whoever
	// writes this connection's socket (its event loop, its writer
	// goroutine). It must not block: it is called under shard locks.
	wake()
	// overflow says that more than maxOutbound bytes of answers wait to be
	// written: the client does not read them, and must be cut off. It is
	// called without cs.mu, maybe more than once, and must not block.
	overflow()
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
	t transport

	mu       sync.Mutex
	out      *bytebufferpool.ByteBuffer // nil when nothing is queued
	flushing bool                       // a flush is on its way: the reader serves input, or a wake is queued
	closed   bool                       // the connection ended (closeConn): drop output, enqueue no waiters
	waiters  *waiter                    // this connection's unanswered acquires (cprev/cnext list)
	nwaiters int                        // length of waiters

	// alivePolledAt is the apply time (monoNow of one applied entry) at
	// which the kernel last said the peer was still there; see peerGone.
	alivePolledAt atomic.Int64

	// Used only by the connection's reader (its event loop, or its TLS
	// goroutine).
	touched []*shard // shards that got commands from the input being served
	authed  bool     // an H with the right secret was received (Node.secretHash)
}

// send appends one response and makes sure it will be flushed.
func (cs *connState) send(r *codec.Response) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
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
// asks the transport for one. Answers that pile up unwritten beyond
// maxOutbound are the transport's to cut off.
func (cs *connState) unlockAndWake() {
	wake := !cs.flushing
	cs.flushing = true
	over := cs.out.Len() > maxOutbound
	cs.mu.Unlock()
	if wake {
		cs.t.wake()
	}
	if over {
		cs.t.overflow()
	}
}

// beginTraffic marks that the reader is about to flush, so that responses
// produced meanwhile do not queue a redundant wake.
func (cs *connState) beginTraffic() {
	cs.mu.Lock()
	cs.flushing = true
	cs.mu.Unlock()
}

// flush writes everything queued to w, the connection's socket; only the
// one goroutine that writes the socket calls it. w must be done with the
// bytes when Write returns (gnet copies what it cannot send at once into its
// outbound buffer), since they go back to the pool.
func (cs *connState) flush(w io.Writer) error {
	cs.mu.Lock()
	buf := cs.out
	cs.out = nil
	cs.flushing = false
	cs.mu.Unlock()
	if buf == nil {
		return nil
	}
	_, err := w.Write(buf.B)
	bytebufferpool.Put(buf)
	return err
}

// Limits that keep one client from taking the server's memory.
const (
	// maxWaitersPerConn bounds the unanswered acquires of one connection;
	// more are answered ERR overloaded.
	maxWaitersPerConn = 100_000
	// maxOutbound bounds the answers written to a connection but not yet
	// taken by its client; a client that stops reading is disconnected.
	// A gnet connection counts what gnet holds (OnTraffic), a TLS one what
	// waits for its writer goroutine (overflow), plus the one write that
	// goroutine has under way.
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
	return added
}

// removeWaiter unlinks w once it has been answered.
func (cs *connState) removeWaiter(w *waiter) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed || !w.inConn {
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
