package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The TLS client listener (Config.TLSListen). gnet has no TLS, so this
// listener is crypto/tls over the standard library's sockets: each
// connection has a reader goroutine, which feeds what it reads to the same
// serveInput as a gnet event loop, and a writer goroutine, which writes
// what the engine queued in the connState. Answers are queued exactly as for
// a gnet connection, so neither a shard nor a reader ever waits for a slow
// client, and count against the same limits: what is queued and the write
// under way are its unsent answers (connState.unlockAndWake, Write, unsent.go).

// Timing of a TLS connection.
const (
	// tlsHandshakeTimeout bounds the handshake, so that a client that
	// connects and says nothing does not keep a goroutine for ever.
	tlsHandshakeTimeout = 10 * time.Second
	// tlsFinishTimeout bounds the writing of the last answers of a
	// connection the server closes (a refused H, a line too long).
	tlsFinishTimeout = 5 * time.Second
	// tlsReadBuffer is the input buffer of one connection: at least one
	// whole TLS record, and always room for the longest line.
	tlsReadBuffer = 16 << 10
)

// tlsServer accepts TLS client connections.
type tlsServer struct {
	node *Node
	ln   net.Listener
	cfg  *tls.Config
	wg   sync.WaitGroup // the accept loop and every connection's goroutines

	mu     sync.Mutex
	conns  map[*tlsConn]struct{}
	closed bool
}

// startTLS binds addr and accepts TLS connections on it until stop.
func startTLS(n *Node, addr string, cfg *tls.Config) (*tlsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ts := &tlsServer{node: n, ln: ln, cfg: cfg, conns: make(map[*tlsConn]struct{})}
	ts.wg.Add(1)
	go ts.accept()
	return ts, nil
}

// accept runs until the listener is closed. A failing Accept (out of file
// descriptors) is retried after a growing pause, as net/http does.
func (ts *tlsServer) accept() {
	defer ts.wg.Done()
	var pause time.Duration
	for {
		raw, err := ts.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			ts.node.log.Warn("TLS listener: accept failed", "err", err, "retry_in", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		tc := &tlsConn{
			node: ts.node, raw: raw, conn: tls.Server(raw, ts.cfg),
			kick: make(chan struct{}, 1), stop: make(chan struct{}),
		}
		if tc.cs = ts.node.openConn(tc); tc.cs == nil {
			_ = raw.Close() // past MaxConns
			continue
		}
		tc.cs.queuedUnsent = true // the writer blocks on the client with answers queued behind it
		if !ts.add(tc) {
			_ = raw.Close()
			ts.node.closeConn(tc.cs)
			return
		}
		ts.wg.Add(1)
		go func() {
			defer ts.wg.Done()
			tc.serve()
			ts.remove(tc)
		}()
	}
}

func (ts *tlsServer) add(tc *tlsConn) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return false
	}
	ts.conns[tc] = struct{}{}
	return true
}

func (ts *tlsServer) remove(tc *tlsConn) {
	ts.mu.Lock()
	delete(ts.conns, tc)
	ts.mu.Unlock()
}

// stop closes the listener and every connection, once what is queued for
// it is written (their acquires are abandoned as on any disconnect), and
// waits for their goroutines.
func (ts *tlsServer) stop(ctx context.Context) error {
	ts.mu.Lock()
	ts.closed = true
	_ = ts.ln.Close()
	for tc := range ts.conns {
		tc.finishUp()
		_ = tc.raw.SetReadDeadline(time.Now()) // the reader returns
	}
	ts.mu.Unlock()
	done := make(chan struct{})
	go func() { ts.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tlsConn is one TLS client connection, and its connState's transport.
type tlsConn struct {
	node *Node
	raw  net.Conn // the TCP connection: closing it ends every call on conn at once
	conn *tls.Conn
	cs   *connState

	kick   chan struct{} // capacity 1: answers are queued for the writer
	stop   chan struct{} // closed when the connection is over: the writer returns
	finish atomic.Bool   // the server closes the connection once its answers are written
}

// serve runs the connection: the handshake, then the reader here and the
// writer in a goroutine of its own, until the client leaves, the server
// closes the connection, or the node stops. Then the connection's state is
// closed, as OnClose does for a gnet connection.
func (tc *tlsConn) serve() {
	if tc.handshake() {
		tc.run()
	}
	_ = tc.raw.Close()
	tc.node.closeConn(tc.cs)
}

// handshake runs the TLS handshake, bounded by tlsHandshakeTimeout.
func (tc *tlsConn) handshake() bool {
	_ = tc.raw.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
	if err := tc.conn.Handshake(); err != nil {
		if tc.node.handshakeFailures.allow() {
			tc.node.log.Warn("TLS handshake failed", "remote", tc.remoteAddr(), "err", err,
				"failed_since_last_line", tc.node.handshakeFailures.take())
		}
		return false
	}
	_ = tc.raw.SetDeadline(time.Time{})
	// The node may have begun to stop (tlsServer.stop) before the deadline
	// was lifted, and its own read deadline with it.
	return !tc.finish.Load()
}

// run serves a connection past its handshake.
func (tc *tlsConn) run() {
	written := make(chan struct{})
	go func() {
		defer close(written)
		tc.write()
	}()
	if tc.read() {
		tc.finishUp()
	}
	if tc.finish.Load() {
		// Let the writer send what is queued (the answer that says why the
		// connection closes, MOVED to waiters of a node that stops), but
		// not for ever: a client that does not read gets cut off.
		select {
		case <-written:
		case <-time.After(tlsFinishTimeout):
		}
	}
	close(tc.stop)
	_ = tc.raw.Close() // ends a Write that still blocks
	<-written
}

// read serves what the client sends until it leaves or the connection
// fails (false), or until serveInput says to close it (true).
func (tc *tlsConn) read() (closeConn bool) {
	buf := make([]byte, tlsReadBuffer)
	filled := 0
	for {
		n, err := tc.conn.Read(buf[filled:])
		if n > 0 {
			filled += n
			used, closeConn := tc.node.serveInput(tc.cs, buf[:filled])
			// serveInput marked a flush as on its way (beginTraffic), so
			// only this kick tells the writer.
			tc.wake()
			if closeConn {
				return true
			}
			// What is left is less than a line: SplitLine reports a longer
			// one as too long. So the buffer never fills up.
			filled = copy(buf, buf[used:filled])
		}
		if err != nil {
			return false
		}
	}
}

// finishUp has the writer send what is queued and return: the server
// closes the connection.
func (tc *tlsConn) finishUp() {
	tc.finish.Store(true)
	tc.wake()
}

// write sends the queued answers until the connection is over, or until
// it has sent the last ones (finishUp).
func (tc *tlsConn) write() {
	for {
		select {
		case <-tc.kick:
		case <-tc.stop:
			return
		}
		// Read before the flush: whatever was queued before finishUp is
		// in it. finishUp's kick comes after, so a flush that read false
		// is followed by one that reads true.
		last := tc.finish.Load()
		if cut, err := tc.cs.flush(tc.conn); cut || err != nil {
			_ = tc.raw.Close() // the reader sees it and ends the connection
			return
		}
		tc.cs.settleQueued()
		if last {
			return
		}
	}
}

// writeNow implements transport: the writer goroutine owns the TLS stream.
func (tc *tlsConn) writeNow([]byte) (int, bool) { return 0, false }

// wake implements transport.
func (tc *tlsConn) wake() {
	select {
	case tc.kick <- struct{}{}:
	default: // the writer is awake already and will take what is queued
	}
}

// cut implements transport: closing the socket ends the writer's blocked
// Write and the reader's Read, and the reader ends the connection.
func (tc *tlsConn) cut() { _ = tc.raw.Close() }

// recheck implements transport. The ledger's count of a TLS connection is
// exact (connState.queuedUnsent), so it is cut off here, off its writer,
// which may be blocked on the client.
func (tc *tlsConn) recheck() {
	if tc.cs.adm.unsent.stillShedding(tc.cs) {
		tc.cs.cut(limitUnsent)
	}
}

// peerClosed implements transport. The poll runs inside Control, which
// keeps the descriptor from being closed (and reused) meanwhile.
func (tc *tlsConn) peerClosed() bool {
	if tc.finish.Load() {
		return true // the server is closing it
	}
	sc, ok := tc.raw.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	if err := rc.Control(func(fd uintptr) { gone = socketClosedByPeer(int(fd)) }); err != nil {
		return true // closed already
	}
	return gone
}

// remoteAddr implements transport.
func (tc *tlsConn) remoteAddr() string { return tc.raw.RemoteAddr().String() }
