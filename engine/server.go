package engine

import (
	"context"
	"errors"

	"github.com/panjf2000/gnet/v2"
)

// server is the gnet event handler on the client port.
type server struct {
	gnet.BuiltinEventEngine
	node   *Node
	eng    gnet.Engine
	booted chan struct{}
	done   chan error
}

func newServer(n *Node) *server {
	return &server{node: n, booted: make(chan struct{}), done: make(chan error, 1)}
}

// start runs the event loops and returns once the listener is bound.
func (sv *server) start(addr string) error {
	go func() {
		sv.done <- gnet.Run(sv, "tcp://"+addr,
			gnet.WithMulticore(true),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithReuseAddr(true),
			gnet.WithLogger(gnetLogger{sv.node.log}),
		)
	}()
	select {
	case <-sv.booted:
		return nil
	case err := <-sv.done:
		if err == nil {
			err = errors.New("event loop stopped at start")
		}
		return err
	}
}

// stop closes the listener and every connection and waits for the loops.
// gnet's Engine.Stop polls for the end every 500 ms, so it only triggers the
// shutdown here; gnet.Run returning is the sign that it is complete.
func (sv *server) stop(ctx context.Context) error {
	go func() { _ = sv.eng.Stop(ctx) }()
	select {
	case <-sv.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// OnBoot implements gnet.EventHandler.
func (sv *server) OnBoot(eng gnet.Engine) gnet.Action {
	sv.eng = eng
	close(sv.booted)
	return gnet.None
}

// OnOpen implements gnet.EventHandler. A connection past MaxConns is closed
// at once, without a word (Node.openConn).
func (sv *server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	cs := sv.node.openConn(gnetConn{c})
	if cs == nil {
		return nil, gnet.Close
	}
	c.SetContext(cs)
	return nil, gnet.None
}

// OnClose implements gnet.EventHandler.
func (sv *server) OnClose(c gnet.Conn, _ error) gnet.Action {
	if cs, _ := c.Context().(*connState); cs != nil { // nil: refused by OnOpen
		sv.node.closeConn(cs)
	}
	return gnet.None
}

// OnTraffic serves every complete line in the inbound buffer and writes all
// answers that are ready in one write. It is also how other goroutines get
// their answers written (they Wake the connection), and how a connection
// with too many unsent answers is closed.
func (sv *server) OnTraffic(c gnet.Conn) gnet.Action {
	cs := c.Context().(*connState)
	buf, _ := c.Peek(-1)
	used, closeConn := sv.node.serveInput(cs, buf)
	if used > 0 {
		// Only then: gnet's Discard(0) empties the whole inbound buffer,
		// which would drop a line whose end has not arrived yet.
		_, _ = c.Discard(used)
	}
	if cut, _ := cs.flush(c); cut || closeConn {
		return gnet.Close
	}
	unsent := c.OutboundBuffered()
	if limit, cut := sv.node.adm.unsent.settle(cs, int64(unsent)); cut {
		cs.cut(limit)
		return gnet.Close
	}
	cs.flushed(unsent == 0)
	return gnet.None
}

// gnetConn is a gnet connection as a connState's transport.
type gnetConn struct{ c gnet.Conn }

// wake queues an OnTraffic, which flushes; it fails only when the
// connection is gone.
func (g gnetConn) wake() { _ = g.c.Wake(nil) }

// writeNow writes to the socket from whichever goroutine calls. gnet closes
// the socket only after OnClose, which marks the connState closed under the
// mutex writeHeld holds, so the descriptor is still this connection's.
func (g gnetConn) writeNow(b []byte) (int, bool) { return writeSocket(g.c.Fd(), b) }

// cut needs nothing: the event loop closes a connection cut off at its next
// flush, which is on its way (wake).
func (g gnetConn) cut() {}

// recheck wakes the connection: OnTraffic settles its unsent bytes again.
func (g gnetConn) recheck() { g.wake() }

func (g gnetConn) peerClosed() bool { return socketClosedByPeer(g.c.Fd()) }

func (g gnetConn) remoteAddr() string { return g.c.RemoteAddr().String() }
