package engine

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// server is the gnet event handler on the client port.
type server struct {
	gnet.BuiltinEventEngine
	node   *Node
	eng    gnet.Engine
	booted chan struct{}
	done   chan error

	// The connections whose client half-closed them, handed over by their
	// loops (handOver), and their goroutines.
	handedOver streamSet
	drains     sync.WaitGroup
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

// stop closes the listener and every connection and waits for the loops,
// then ends the connections the loops handed over, once what is queued for
// them is written, and waits for them. gnet's Engine.Stop polls for the
// end every 500 ms, so it only triggers the shutdown here; gnet.Run
// returning is the sign that it is complete.
func (sv *server) stop(ctx context.Context) error {
	go func() { _ = sv.eng.Stop(ctx) }()
	select {
	case <-sv.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	sv.handedOver.close()
	drained := make(chan struct{})
	go func() { sv.drains.Wait(); close(drained) }()
	select {
	case <-drained:
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
	cs := sv.node.openConn(&gnetConn{c: c})
	if cs == nil {
		return nil, gnet.Close
	}
	c.SetContext(cs)
	return nil, gnet.None
}

// OnClose implements gnet.EventHandler. gnet calls it when the client
// leaves, when a write fails, when the handler closes the connection, and
// when it reads the end of the client's input: a client that half-closed
// (halfclose.go) is not gone, and is handed over if anything is due to it.
func (sv *server) OnClose(c gnet.Conn, err error) gnet.Action {
	cs, _ := c.Context().(*connState)
	if cs == nil { // refused by OnOpen
		return gnet.None
	}
	if errors.Is(err, io.EOF) && sv.handOver(c, cs) {
		return gnet.None
	}
	sv.node.closeConn(cs)
	return gnet.None
}

// handOver takes a connection whose client's input ended away from its
// event loop, if anything is due to the client: a duplicate of its socket
// outlives gnet's close, and a stream connection over it (stream.go)
// writes what is due, as the answers come, then closes it (drain). What
// gnet had not sent yet of earlier answers goes first (takeOutbound). It
// reports false when the connection is to be closed as before: nothing is
// due, half-closing is not supported here, or the hand-over failed.
func (sv *server) handOver(c gnet.Conn, cs *connState) bool {
	if !halfCloseSupported {
		return false
	}
	if due := cs.endOfInput(); !due && (c.OutboundBuffered() == 0 || cs.isClosed()) {
		return false // nothing due, or cut off: closed as any other
	}
	addr := c.RemoteAddr().String() // gnet forgets it once it closed its socket
	raw, leftover, err := takeSocket(c)
	if err != nil {
		sv.node.log.Warn("cannot keep a half-closed connection open: what is due to it is dropped",
			"remote", addr, "err", err)
		return false
	}
	if !cs.takeOver(leftover) {
		_ = raw.Close()
		return false
	}
	sc := newStreamConn(sv.node, raw, raw, addr)
	sc.cs = cs
	if !sv.handedOver.add(sc) { // the server stops
		_ = raw.Close()
		return false
	}
	g := cs.t.(*gnetConn)
	g.stream.Store(sc)
	if sv.node.tracing {
		sv.node.log.Debug("client half-closed: answering what it asked, then closing", "remote", sc.remoteAddr(), "leftover", len(leftover))
	}
	sv.drains.Add(1)
	go func() {
		defer sv.drains.Done()
		sc.drain()
		sv.handedOver.remove(sc)
	}()
	return true
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

// gnetConn is a gnet connection as a connState's transport; once its loop
// handed it over (handOver), the stream connection that serves it instead.
type gnetConn struct {
	c      gnet.Conn
	stream atomic.Pointer[streamConn]
}

// wake queues an OnTraffic, which flushes; it fails only when the
// connection is gone.
func (g *gnetConn) wake() {
	if sc := g.stream.Load(); sc != nil {
		sc.wake()
		return
	}
	_ = g.c.Wake(nil)
}

// writeNow writes to the socket from whichever goroutine calls. gnet closes
// the socket only after OnClose, which marks the connState closed under the
// mutex writeHeld holds (or, handing the connection over, stops direct
// writes under it: endOfInput), so the descriptor is still this
// connection's.
func (g *gnetConn) writeNow(b []byte) (int, bool) {
	if g.stream.Load() != nil {
		return 0, false
	}
	return writeSocket(g.c.Fd(), b)
}

// cut needs nothing on a loop: it closes a connection cut off at its next
// flush, which is on its way (wake).
func (g *gnetConn) cut() {
	if sc := g.stream.Load(); sc != nil {
		sc.cut()
	}
}

// recheck wakes the connection: OnTraffic settles its unsent bytes again.
func (g *gnetConn) recheck() {
	if sc := g.stream.Load(); sc != nil {
		sc.recheck()
		return
	}
	g.wake()
}

func (g *gnetConn) peer() peerState {
	if sc := g.stream.Load(); sc != nil {
		return sc.peer()
	}
	return socketPeer(g.c.Fd())
}

func (g *gnetConn) remoteAddr() string {
	if sc := g.stream.Load(); sc != nil {
		return sc.remoteAddr() // gnet forgets it once it closed its socket
	}
	return g.c.RemoteAddr().String()
}
