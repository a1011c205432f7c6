package engine

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Connections served by goroutines of their own rather than by an event
// loop: every TLS connection (tls.go), and a plain one once its client has
// half-closed it (halfclose.go, server.handOver). Each has a writer
// goroutine, which writes what the engine queued in the connState, and,
// while the client sends, a reader, which feeds what it reads to the same
// serveInput as a gnet event loop. Answers are queued exactly as for a gnet
// connection, so neither a shard nor a reader ever waits for a slow client,
// and count against the same limits: what is queued and the write under
// way are its unsent answers (connState.unlockAndWake, Write, unsent.go).

// Timing of a stream connection.
const (
	// streamFinishTimeout bounds the writing of the last answers of a
	// connection the server closes (a refused H, a line too long, the node
	// stopping).
	streamFinishTimeout = 5 * time.Second
	// streamReadBuffer is the input buffer of one connection: at least one
	// whole TLS record, and always room for the longest line.
	streamReadBuffer = 16 << 10
	// After the client's FIN (halfclose.go) the writer looks at the socket
	// again: whether the client's kernel acknowledged the provisional
	// grants written, first after deliveryFirstLook, then twice as long
	// each time up to deliveryMaxLook (a round trip, most often); and, while
	// nothing is to be confirmed, every halfClosedLook whether the
	// connection reset, so that the acquires of a client that went away
	// are abandoned then, not only when their answers fail to go out.
	deliveryFirstLook = time.Millisecond
	deliveryMaxLook   = 100 * time.Millisecond
	halfClosedLook    = 500 * time.Millisecond
)

// streamConn is one client connection served by goroutines, and its
// connState's transport (a TLS connection's through tlsConn; a handed-over
// plain connection's through its gnetConn).
type streamConn struct {
	node *Node
	raw  net.Conn // the TCP connection: closing it ends every call on conn at once
	conn net.Conn // what requests are read from and answers written to: the TLS stream over raw, or raw
	addr string   // the client's address, for log lines
	cs   *connState

	kick       chan struct{} // capacity 1: answers are queued for the writer
	stop       chan struct{} // closed when the connection is over: the writer returns
	finish     atomic.Bool   // the server closes the connection once its answers are written
	finishing  chan struct{} // closed by the first finishUp
	finishOnce sync.Once
}

// newStreamConn is a stream connection over raw, whose answers are
// written to conn, from addr.
func newStreamConn(n *Node, raw, conn net.Conn, addr string) *streamConn {
	return &streamConn{node: n, raw: raw, conn: conn, addr: addr,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), finishing: make(chan struct{})}
}

// run serves a connection: the reader here and the writer in a goroutine
// of its own, until the client leaves, the server closes the connection,
// or the node stops. A client whose input ends may still read: when
// something is due to it, the writer goes on until it is written.
func (sc *streamConn) run() {
	written := make(chan struct{})
	go func() {
		defer close(written)
		sc.write()
	}()
	closing, eof := sc.read()
	halfClosed := false
	switch {
	case closing:
		sc.finishUp()
	case eof && halfCloseSupported:
		if halfClosed = sc.cs.endOfInput(); halfClosed {
			sc.wake() // the writer looks whether all is done
		}
	}
	sc.end(written, halfClosed)
}

// drain serves a connection whose client's input has ended already (a
// plain one its event loop handed over): the writer alone, until nothing
// is due to the client, it is gone, or the node stops. Then the
// connection's state is closed, as OnClose does for a gnet connection.
func (sc *streamConn) drain() {
	written := make(chan struct{})
	go func() {
		defer close(written)
		sc.write()
	}()
	sc.wake() // what is queued already
	sc.end(written, true)
	sc.node.closeConn(sc.cs)
}

// end closes the connection once the writer is done: when waitWriter (a
// half-closed connection), once it returns on its own (everything due
// written, or the connection failed) or the server closes the connection;
// when the server closes it (finishUp), once it has written what is queued
// (the answer that says why the connection closes, MOVED to waiters of a
// node that stops), but not for ever: a client that does not read gets
// cut off.
func (sc *streamConn) end(written <-chan struct{}, waitWriter bool) {
	if waitWriter {
		select {
		case <-written:
		case <-sc.finishing:
		}
	}
	if sc.finish.Load() {
		select {
		case <-written:
		case <-time.After(streamFinishTimeout):
		}
	}
	close(sc.stop)
	_ = sc.raw.Close() // ends a Write that still blocks
	<-written
}

// read serves what the client sends until serveInput says to close the
// connection (closing), the client's input ends (eof), or the connection
// fails.
func (sc *streamConn) read() (closing, eof bool) {
	buf := make([]byte, streamReadBuffer)
	filled := 0
	for {
		n, err := sc.conn.Read(buf[filled:])
		if n > 0 {
			filled += n
			used, closeConn := sc.node.serveInput(sc.cs, buf[:filled])
			// serveInput marked a flush as on its way (beginTraffic), so
			// only this kick tells the writer.
			sc.wake()
			if closeConn {
				return true, false
			}
			// What is left is less than a line: SplitLine reports a longer
			// one as too long. So the buffer never fills up.
			filled = copy(buf, buf[used:filled])
		}
		if err != nil {
			return false, errors.Is(err, io.EOF)
		}
	}
}

// finishUp has the writer send what is queued and return: the server
// closes the connection.
func (sc *streamConn) finishUp() {
	sc.finish.Store(true)
	sc.finishOnce.Do(func() { close(sc.finishing) })
	sc.wake()
}

// write sends the queued answers until the connection is over, until it
// has sent the last ones (finishUp), or, once the client's input has
// ended, until nothing more is due to it (connState.drained). After the
// client's FIN it also sees to the provisional grants (halfclose.go): once
// written, they are confirmed when the client's kernel has acknowledged
// them, and a reset ends the connection, which releases them.
func (sc *streamConn) write() {
	look := time.NewTimer(time.Hour)
	look.Stop()
	defer look.Stop()
	var lookC <-chan time.Time
	wait := time.Duration(0)
	for {
		select {
		case <-sc.kick:
		case <-lookC:
			lookC = nil
		case <-sc.stop:
			return
		}
		// Read before the flush: whatever was queued before finishUp is
		// in it. finishUp's kick comes after, so a flush that read false
		// is followed by one that reads true.
		last := sc.finish.Load()
		if cut, err := sc.cs.flush(sc.conn); cut || err != nil {
			_ = sc.raw.Close() // a reader sees it and ends the connection
			return
		}
		sc.cs.settleQueued()
		if last {
			return
		}
		toConfirm, ended := sc.cs.afterFlush()
		if toConfirm == 0 && !ended {
			continue
		}
		switch sc.delivery() {
		case deliveryFailed:
			_ = sc.raw.Close()
			return
		case deliveryAcked:
			if toConfirm > 0 {
				sc.cs.confirmProvisional(toConfirm)
			}
			toConfirm = 0
		}
		if sc.cs.drained() {
			return
		}
		if toConfirm > 0 {
			wait = min(max(2*wait, deliveryFirstLook), deliveryMaxLook)
			look.Reset(wait)
		} else {
			wait = 0
			look.Reset(halfClosedLook)
		}
		lookC = look.C
	}
}

// delivery is socketDelivery of the connection's socket. The call runs
// inside Control, which keeps the descriptor from being closed (and
// reused) meanwhile.
func (sc *streamConn) delivery() delivery {
	d := deliveryFailed
	if rc := sc.rawConn(); rc != nil {
		if err := rc.Control(func(fd uintptr) { d = socketDelivery(int(fd)) }); err != nil {
			return deliveryFailed // closed already
		}
	}
	return d
}

// rawConn is the socket's syscall.RawConn, nil when there is none.
func (sc *streamConn) rawConn() syscall.RawConn {
	c, ok := sc.raw.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// writeNow implements transport: the writer goroutine owns the stream.
func (sc *streamConn) writeNow([]byte) (int, bool) { return 0, false }

// wake implements transport.
func (sc *streamConn) wake() {
	select {
	case sc.kick <- struct{}{}:
	default: // the writer is awake already and will take what is queued
	}
}

// cut implements transport: closing the socket ends the writer's blocked
// Write and the reader's Read, and the connection ends.
func (sc *streamConn) cut() { _ = sc.raw.Close() }

// recheck implements transport. The ledger's count of a stream connection
// is exact (connState.queuedUnsent), so it is cut off here, off its
// writer, which may be blocked on the client.
func (sc *streamConn) recheck() {
	if sc.cs.adm.unsent.stillShedding(sc.cs) {
		sc.cs.cut(limitUnsent)
	}
}

// peer implements transport. The poll runs inside Control, which keeps
// the descriptor from being closed (and reused) meanwhile.
func (sc *streamConn) peer() peerState {
	if sc.finish.Load() {
		return peerGone // the server is closing it
	}
	rc := sc.rawConn()
	if rc == nil {
		return peerOpen
	}
	p := peerOpen
	if err := rc.Control(func(fd uintptr) { p = socketPeer(int(fd)) }); err != nil {
		return peerGone // closed already
	}
	return p
}

// remoteAddr implements transport.
func (sc *streamConn) remoteAddr() string { return sc.addr }

// streamSet is the stream connections of a listener (or of the hand-overs
// of the event loops), to end them when it stops.
type streamSet struct {
	mu     sync.Mutex
	conns  map[*streamConn]struct{}
	closed bool
}

// add takes sc in, unless the set is closed.
func (ss *streamSet) add(sc *streamConn) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	if ss.conns == nil {
		ss.conns = make(map[*streamConn]struct{})
	}
	ss.conns[sc] = struct{}{}
	return true
}

// remove forgets sc, whose connection is over.
func (ss *streamSet) remove(sc *streamConn) {
	ss.mu.Lock()
	delete(ss.conns, sc)
	ss.mu.Unlock()
}

// list returns the connections in the set.
func (ss *streamSet) list() []*streamConn {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	list := make([]*streamConn, 0, len(ss.conns))
	for sc := range ss.conns {
		list = append(list, sc)
	}
	return list
}

// close takes no more connections and has every one end once what is
// queued for it is written (their acquires are abandoned as on any
// disconnect): readers return at once.
func (ss *streamSet) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for sc := range ss.conns {
		sc.finishUp()
		_ = sc.raw.SetReadDeadline(time.Now())
	}
}
