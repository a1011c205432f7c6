package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// The TLS client listener (Config.TLSListen). gnet has no TLS, so this
// listener is crypto/tls over the standard library's sockets: each
// connection is a stream connection (stream.go), whose reader feeds what it
// reads to the same serveInput as a gnet event loop, and whose writer
// writes what the engine queued in the connState.

// tlsHandshakeTimeout bounds the handshake, so that a client that connects
// and says nothing does not keep a goroutine for ever.
const tlsHandshakeTimeout = 10 * time.Second

// tlsServer accepts TLS client connections.
type tlsServer struct {
	node    *Node
	ln      net.Listener
	cfg     *tls.Config
	wg      sync.WaitGroup // the accept loop and every connection's goroutines
	streams streamSet
}

// startTLS binds addr and accepts TLS connections on it until stop.
func startTLS(n *Node, addr string, cfg *tls.Config) (*tlsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ts := &tlsServer{node: n, ln: ln, cfg: cfg}
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
		tc := &tlsConn{tls: tls.Server(raw, ts.cfg)}
		tc.streamConn = newStreamConn(ts.node, raw, tc.tls, raw.RemoteAddr().String())
		if tc.cs = ts.node.openConn(tc); tc.cs == nil {
			_ = raw.Close() // past MaxConns
			continue
		}
		tc.cs.queuedUnsent = true // the writer blocks on the client with answers queued behind it
		if !ts.streams.add(tc.streamConn) {
			_ = raw.Close()
			ts.node.closeConn(tc.cs)
			return
		}
		ts.wg.Add(1)
		go func() {
			defer ts.wg.Done()
			tc.serve()
			ts.streams.remove(tc.streamConn)
		}()
	}
}

// stop closes the listener and every connection, once what is queued for
// it is written (their acquires are abandoned as on any disconnect), and
// waits for their goroutines.
func (ts *tlsServer) stop(ctx context.Context) error {
	_ = ts.ln.Close()
	ts.streams.close()
	done := make(chan struct{})
	go func() { ts.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tlsConn is one TLS client connection, and its connState's transport: a
// stream connection over a TLS stream (which is how Node.movedAddr knows a
// client that came over TLS).
type tlsConn struct {
	*streamConn
	tls *tls.Conn
}

// serve runs the connection: the handshake, then the stream connection,
// until the client leaves, the server closes the connection, or the node
// stops. Then the connection's state is closed, as OnClose does for a gnet
// connection.
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
	if err := tc.tls.Handshake(); err != nil {
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
