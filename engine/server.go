package engine

import (
	"context"
	"errors"

	"github.com/baton-dev/baton/codec"
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

// OnOpen implements gnet.EventHandler. This is where MaxConns is checked: a
// connection past it is closed at once, without a word.
func (sv *server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	adm := sv.node.adm
	if !adm.admitConn() {
		adm.hits.hitBy(limitConns, c.RemoteAddr().String())
		return nil, gnet.Close
	}
	c.SetContext(newConnState(c, adm, sv.node.metrics))
	sv.node.metrics.connsAccepted.Inc()
	sv.node.metrics.connsOpen.Add(1)
	return nil, gnet.None
}

// OnClose abandons the connection's unanswered acquires: queued ones leave
// their queues; one whose Grant is in flight is released as soon as it lands.
func (sv *server) OnClose(c gnet.Conn, _ error) gnet.Action {
	cs, _ := c.Context().(*connState)
	if cs == nil {
		return gnet.None // refused by OnOpen
	}
	sv.node.adm.connClosed()
	sv.node.adm.unsent.forget(cs)
	sv.node.metrics.connsOpen.Add(-1)
	for _, w := range cs.close() {
		s := sv.node.shardFor(bytesOf(w.ks.key))
		s.mu.Lock()
		s.abandon(w)
		s.kickIfPending()
		s.mu.Unlock()
	}
	return gnet.None
}

// OnTraffic parses every complete line in the inbound buffer, serves each,
// then proposes what each shard got (usually one entry per shard) and
// writes all answers that are ready in one write. It is also how other
// goroutines get their answers written (they Wake the connection), and how
// a connection with too many unsent answers is closed.
func (sv *server) OnTraffic(c gnet.Conn) gnet.Action {
	cs := c.Context().(*connState)
	if cut := cs.beginTraffic(); cut {
		return sv.cutOff(c, limitUnsentPerConn)
	}
	action := sv.serveLines(cs, c)
	for i, s := range cs.touched {
		sv.node.proposeFromLoop(s)
		cs.touched[i] = nil
	}
	cs.touched = cs.touched[:0]
	if cut := cs.flush(); cut {
		return sv.cutOff(c, limitUnsentPerConn)
	}
	if limit, cut := sv.node.adm.unsent.settle(cs, int64(c.OutboundBuffered())); cut {
		return sv.cutOff(c, limit)
	}
	return action
}

// cutOff closes a connection whose client does not take its answers.
func (sv *server) cutOff(c gnet.Conn, limit limitKind) gnet.Action {
	sv.node.adm.hits.hitBy(limit, c.RemoteAddr().String())
	return gnet.Close
}

func (sv *server) serveLines(cs *connState, c gnet.Conn) gnet.Action {
	buf, _ := c.Peek(-1)
	used := 0
	now := monoNow()
	var req codec.Request
	for used < len(buf) {
		line, n, err := codec.SplitLine(buf[used:])
		if err != nil {
			// The only framing error: a line over the limit. Answer and
			// close, since where the next line starts is unknown.
			req = codec.Request{}
			cs.sendParseError(&req, codec.ErrTooLong)
			_, _ = c.Discard(len(buf))
			return gnet.Close
		}
		if n == 0 {
			break
		}
		used += n
		sv.serveLine(cs, line, &req, now)
	}
	if used > 0 {
		// Only then: gnet's Discard(0) empties the whole inbound buffer,
		// which would drop a line whose end has not arrived yet.
		_, _ = c.Discard(used)
	}
	return gnet.None
}

func (sv *server) serveLine(cs *connState, line []byte, req *codec.Request, now int64) {
	err := codec.ParseRequest(line, req)
	if err != nil {
		sv.node.metrics.badRequests.Inc()
		var perr *codec.ParseError
		if !errors.As(err, &perr) {
			perr = &codec.ParseError{Code: codec.CodeBadRequest, Text: err.Error()}
		}
		if req.Key == nil {
			cs.sendParseError(req, perr)
			return
		}
		sv.node.shardFor(req.Key).badRequest(cs, req, perr)
		return
	}
	sv.node.metrics.countRequest(req.Op)
	s := sv.node.shardFor(req.Key)
	listed := cs.listed
	if s.handle(cs, req, now) {
		cs.touch(s)
	}
	if req.Op == codec.OpAcquire && cs.listed == listed {
		// Answered on receipt (try-lock of a held key, MOVED, ERR): queued
		// acquires are timed when they leave their connection's list.
		sv.node.metrics.acquireAnswered(now, monoNow())
	}
}
