package engine

import (
	"crypto/subtle"
	"errors"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/codec"
)

// What every client connection shares, whatever its transport (gnet in
// server.go, TLS in tls.go): its start, the serving of the bytes it
// received, and its end.

// openConn is a new client connection on transport t, or nil when it is
// refused: this is where MaxConns is checked (a connection past it is to be
// closed at once, without a word) and where connections are counted in.
func (n *Node) openConn(t transport) *connState {
	if !n.adm.admitConn() {
		n.adm.hits.hitBy(limitConns, t.remoteAddr())
		return nil
	}
	n.metrics.connsAccepted.Inc()
	n.metrics.connsOpen.Add(1)
	return newConnState(t, n.adm, n.metrics)
}

// closeConn ends a connection that openConn admitted, once its transport is
// done with it: it is counted out, a cut-off is logged as the limit hit,
// and its unanswered acquires are abandoned: queued ones leave their
// queues; one whose Grant is in flight is released as soon as it lands;
// a grant sent after the client's FIN and not known to have reached it
// (halfclose.go) is released. Its watches end.
func (n *Node) closeConn(cs *connState) {
	if limit, cut := cs.cutOffBy(); cut {
		cs.adm.hits.hitBy(limit, cs.t.remoteAddr())
	}
	cs.adm.connClosed()
	cs.m.connsOpen.Add(-1)
	waiters := cs.close()
	// After close: no answer is queued from now on, which on a TLS
	// connection would settle its count again (unlockAndWake).
	cs.adm.unsent.forget(cs)
	for _, w := range waiters {
		s := n.shardFor(bytesOf(w.ks.key))
		s.mu.Lock()
		s.abandon(w)
		s.kickIfPending()
		s.mu.Unlock()
	}
	n.releaseProvisional(cs)
	n.dropWatches(cs)
}

// serveInput parses every complete line at the start of buf, serves each,
// then proposes what each shard got (usually one entry per shard). It
// returns how many bytes it used, the rest being the start of a line whose
// end has not arrived, and whether the connection is to be closed once its
// answers are written: after a line too long to frame the next one, or a
// refused H. The answers are queued; the caller flushes them. A connection
// cut off since its last flush is not served, only closed.
func (n *Node) serveInput(cs *connState, buf []byte) (used int, closeConn bool) {
	if cut := cs.beginTraffic(); cut {
		return len(buf), true
	}
	used, closeConn = n.serveLines(cs, buf)
	for i, s := range cs.touched {
		n.proposeFromLoop(s)
		cs.touched[i] = nil
	}
	cs.touched = cs.touched[:0]
	return used, closeConn
}

func (n *Node) serveLines(cs *connState, buf []byte) (used int, closeConn bool) {
	now := monoNow()
	var req codec.Request
	for used < len(buf) {
		line, size, err := codec.SplitLine(buf[used:])
		if err != nil {
			// The only framing error: a line over the limit. Answer and
			// close, since where the next line starts is unknown.
			cs.asked++
			req = codec.Request{}
			cs.sendParseError(&req, codec.ErrTooLong, nil)
			return len(buf), true
		}
		if size == 0 {
			break
		}
		used += size
		cs.asked++
		if !n.serveLine(cs, line, &req, now) {
			return len(buf), true
		}
	}
	return used, false
}

// serveLine serves one request line; false means that the connection is to
// be closed.
func (n *Node) serveLine(cs *connState, line []byte, req *codec.Request, now int64) bool {
	err := codec.ParseRequest(line, req)
	if err != nil {
		n.metrics.badRequests.Inc()
	} else {
		n.metrics.countRequest(req.Op)
	}
	if req.Op == codec.OpHello || n.secretHash != nil && !cs.authed {
		return n.hello(cs, req, err)
	}
	if err != nil {
		n.badRequest(cs, req, err)
		return true
	}
	switch req.Op {
	case codec.OpCluster:
		n.serveCluster(cs)
		return true
	case codec.OpMember:
		n.serveMember(cs, req)
		return true
	}
	s := n.shardFor(req.Key)
	listed := cs.listed
	if s.handle(cs, req, now) {
		cs.touch(s)
	}
	if (req.Op == codec.OpAcquire || req.Op == codec.OpShared) && cs.listed == listed {
		// Answered on receipt (try-lock of a held key, MOVED, ERR): queued
		// acquires are timed when they leave their connection's list.
		n.metrics.acquireAnswered(now, monoNow())
	}
	return true
}

// badRequest answers a line that failed to parse with err.
func (n *Node) badRequest(cs *connState, req *codec.Request, err error) {
	var perr *codec.ParseError
	if !errors.As(err, &perr) {
		perr = &codec.ParseError{Code: codec.CodeBadRequest, Text: err.Error()}
	}
	if req.Key == nil {
		cs.sendParseError(req, perr, nil)
		return
	}
	n.shardFor(req.Key).badRequest(cs, req, perr)
}

// Answers to H.
var (
	helloOK     = codec.Response{Op: codec.OpHello, Key: []byte(codec.HelloKey), Status: codec.StatusOK}
	helloRefuse = codec.Response{Op: codec.OpHello, Key: []byte(codec.HelloKey), Status: codec.StatusErr, Code: []byte(codec.CodeAuth)}
)

// hello serves an H, and, on a node that requires the shared secret, any
// line of a connection that has not sent the right one yet (protocol 1.2):
// the right secret is answered H - OK and opens the connection; anything
// else, a wrong secret or another request, is answered H - ERR auth and
// closes it (false). Without a secret every well-formed H is answered OK,
// so that a client configured with one can still talk to such a node.
func (n *Node) hello(cs *connState, req *codec.Request, parseErr error) bool {
	if n.secretHash == nil {
		if parseErr != nil {
			n.badRequest(cs, req, parseErr)
		} else {
			cs.send(&helloOK, nil)
		}
		return true
	}
	if parseErr == nil && req.Op == codec.OpHello && n.rightSecret(req.Secret) {
		cs.authed = true
		cs.send(&helloOK, nil)
		return true
	}
	if n.refusals.allow() {
		n.log.Warn("refused a client without the right secret", "remote", cs.t.remoteAddr(),
			"refused_since_last_line", n.refusals.take())
	}
	cs.send(&helloRefuse, nil)
	return false
}

// rightSecret compares secret with the node's in constant time: both are
// hashed first, so that not even the length of the secret shows in how
// long the comparison takes.
func (n *Node) rightSecret(secret []byte) bool {
	return subtle.ConstantTimeCompare(hashSecret(secret), n.secretHash) == 1
}

// logLimitInterval is the least time between two log lines of one
// logLimit.
const logLimitInterval = 10 * time.Second

// logLimit keeps an event that clients can cause at will (a refused
// secret, a failed TLS handshake) to one log line per logLimitInterval;
// the line tells how many happened since the last one.
type logLimit struct {
	next  atomic.Int64 // monoNow before which nothing is logged
	count atomic.Int64 // events since the last line
}

// allow counts one event and reports whether to log it.
func (l *logLimit) allow() bool {
	l.count.Add(1)
	now := monoNow()
	next := l.next.Load()
	return now >= next && l.next.CompareAndSwap(next, now+int64(logLimitInterval))
}

// take returns the events counted since the last line and starts over.
func (l *logLimit) take() int64 { return l.count.Swap(0) }
