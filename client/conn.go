package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Connection states.
const (
	stateDialing int32 = iota // a dial is under way
	stateUp                   // requests may be sent
	stateDown                 // the last dial or session failed; a redial is scheduled
)

// errConnDown is a request that reached a connection which had just gone
// down: it was never sent.
var errConnDown = errors.New("connection down")

// droppedError is a connection that failed while a request was unanswered:
// the request may or may not have reached the server.
type droppedError struct {
	addr string
	err  error
}

func (e *droppedError) Error() string {
	return fmt.Sprintf("connection to %s lost: %v", e.addr, e.err)
}
func (e *droppedError) Unwrap() error { return e.err }

// readBufSize holds many answer lines per read; an answer line is at most a
// few hundred bytes, far below it.
const readBufSize = 16 << 10

// conn is one persistent connection slot: it dials addr, serves one TCP
// session at a time, and redials in the background when the session ends.
// Its manager goroutine reads the answers; a writer goroutine per session
// sends the requests that callers queued, many per write when they pile up.
type conn struct {
	cl   *Client
	addr string

	// ctx ends the connection's work: cancelled by Client.Close (it is a
	// child of the client's) and by retire.
	ctx    context.Context
	cancel context.CancelFunc

	state atomic.Int32 // read without mu by Client.pick

	epoch    time.Time    // the zero of clock
	lastRead atomic.Int64 // clock of the session's last read (stall.go); the reader sets it without mu

	// Lock order: mu is a leaf. It is let go before notifyChange takes
	// Client.mu and before a call is finished (deliver, fail), and it is
	// never held with a Lock.mu or another conn's mu.
	mu      sync.Mutex // never held together with Client.mu
	nc      net.Conn   // the current session, while up
	out     []byte     // request bytes not yet handed to the writer
	pending pendingTable
	watch   stallWatch    // the current session's stall detection
	lastErr error         // why the connection is down
	kick    chan struct{} // wakes the writer; capacity 1
	// retired: an address refresh left this connection out of the pool
	// (refresh.go). It takes no new request, and closes for good once it
	// owes no answer, so that nothing already sent on it is lost.
	retired bool

	// redialNow cuts the wait before the next dial short (capacity 1): a
	// MOVED named this node while it was down, so it is likely back.
	redialNow chan struct{}
}

// minRedialGap spaces the dials of one connection even when MOVED asks
// for them, so that a stale MOVED to a node that stays down costs at most
// a few dials a second.
const minRedialGap = 100 * time.Millisecond

func newConn(cl *Client, addr string) *conn {
	c := &conn{cl: cl, addr: addr, epoch: time.Now(), kick: make(chan struct{}, 1), redialNow: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(cl.ctx)
	c.state.Store(stateDialing)
	return c
}

// send queues req for the writer and registers cl to receive its answer,
// both in one critical section: the order of the pending table is the order
// of the bytes on the wire. It fails with errConnDown when the connection
// is not up (or retired), in which case nothing was sent.
func (c *conn) send(cl *call, req *codec.Request) error {
	c.mu.Lock()
	if c.nc == nil || c.retired {
		c.mu.Unlock()
		return errConnDown
	}
	c.queueLocked(cl, req)
	c.mu.Unlock()
	c.wakeWriter()
	return nil
}

// queueLocked appends req's bytes for the writer and registers cl for its
// answer. c.mu is held and c.nc is set.
func (c *conn) queueLocked(cl *call, req *codec.Request) {
	if c.pending.len() == 0 {
		c.watchBusyLocked()
	}
	c.out = codec.AppendRequest(c.out, req)
	c.pending.push(cl)
}

// wakeWriter tells the writer that bytes were queued.
func (c *conn) wakeWriter() {
	select {
	case c.kick <- struct{}{}:
	default: // the writer is already awake and will see the bytes
	}
}

// run is the manager goroutine: dial, serve, repeat until the client closes.
// Dials are at least redialInterval apart, so a server that accepts and then
// drops every connection costs one dial per interval; a session that lived
// longer than the interval is redialled at once, since a moment's glitch is
// the likely cause, unless it was given up for silence (see stall.go).
func (c *conn) run() {
	defer c.cl.wg.Done()
	defer c.cl.forgetRetired(c)
	defer c.cancel()
	ctx := c.ctx
	lr := codec.NewLineReader(readBufSize)
	var lastDial time.Time
	for ctx.Err() == nil {
		if !lastDial.IsZero() {
			if !c.waitToRedial(ctx, lastDial) {
				return
			}
			c.setState(stateDialing, nil)
		}
		lastDial = time.Now()
		lr.Reset() // nothing of an earlier session's stream belongs to this one
		dctx, cancel := context.WithTimeout(ctx, c.cl.opts.dialTimeout)
		nc, err := c.cl.opts.dial(dctx, c.addr)
		if err == nil {
			nc, err = c.cl.open(dctx, nc, c.addr, lr)
		}
		cancel()
		if err != nil {
			c.setState(stateDown, err)
			continue
		}
		c.serve(nc, lr)
		if c.endedSilent() {
			// A server that went silent is likely silent still, and may
			// even accept a new connection (the kernel of a stopped process
			// completes the handshake): wait a full interval before trying
			// it again, so that requests go to the other connections
			// meanwhile instead of into the same silence.
			lastDial = time.Now()
		}
	}
}

// waitToRedial waits until redialInterval has passed since lastDial, or
// until a redial is asked for (redialSoon) and minRedialGap has passed. It
// returns false when the client closes.
func (c *conn) waitToRedial(ctx context.Context, lastDial time.Time) bool {
	interval := c.cl.opts.redialInterval
	for {
		wait := interval - time.Since(lastDial)
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			return true
		case <-c.redialNow:
			t.Stop()
			interval = minRedialGap
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// redialSoon asks a connection that is down to dial again without waiting
// out redialInterval.
func (c *conn) redialSoon() {
	select {
	case c.redialNow <- struct{}{}:
	default:
	}
}

// setState records a state change and wakes the requests waiting for one.
func (c *conn) setState(s int32, err error) {
	c.mu.Lock()
	if err != nil {
		c.lastErr = err
	}
	c.state.Store(s)
	c.mu.Unlock()
	c.cl.notifyChange()
}

// lastError is why the connection is down, for error messages.
func (c *conn) lastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr == nil {
		return errors.New("not connected yet")
	}
	return c.lastErr
}

// serve runs one session on nc until it fails or the client closes.
func (c *conn) serve(nc net.Conn, lr *codec.LineReader) {
	c.mu.Lock()
	if c.ctx.Err() != nil {
		// Close or retire ran between the dial and now and could not see
		// nc.
		c.mu.Unlock()
		_ = nc.Close()
		return
	}
	c.nc = nc
	c.out = c.out[:0]
	c.state.Store(stateUp)
	c.mu.Unlock()
	c.cl.sessionUp()
	c.cl.notifyChange()

	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		c.write(nc, stop)
	}()
	err := c.read(nc, lr)
	c.fail(nc, err)
	close(stop)
	writer.Wait()
}

// write sends queued requests until stop is closed or a write fails. Two
// buffers take turns, so callers keep appending while a write is under way.
func (c *conn) write(nc net.Conn, stop <-chan struct{}) {
	var spare []byte
	for {
		select {
		case <-c.kick:
		case <-stop:
			return
		}
		c.mu.Lock()
		if c.nc != nc {
			c.mu.Unlock()
			return
		}
		buf := c.out
		c.out = spare[:0]
		c.mu.Unlock()
		if len(buf) == 0 {
			spare = buf
			continue
		}
		if _, err := nc.Write(buf); err != nil {
			c.fail(nc, err)
			return
		}
		spare = buf
	}
}

// read reads answers from nc and hands each to its call until the stream
// fails or cannot be trusted any more.
func (c *conn) read(nc net.Conn, lr *codec.LineReader) error {
	var resp codec.Response
	for {
		n, err := nc.Read(lr.Free())
		if n > 0 {
			c.noteRead()
		}
		lr.Filled(n)
		for {
			line, serr := lr.Next()
			if serr != nil {
				return fmt.Errorf("bad answer from server: %w", serr)
			}
			if line == nil {
				break
			}
			if perr := codec.ParseResponse(line, &resp); perr != nil {
				err := fmt.Errorf("bad answer from server %q: %w", line, perr)
				if c.failCall(&resp, err) {
					continue
				}
				return err
			}
			if err := c.deliver(&resp); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
}

// deliver pairs one answer with the oldest unanswered call of its (op, key),
// or "? - ERR badrequest" with the request the server could not read
// (popUnread).
func (c *conn) deliver(r *codec.Response) error {
	c.mu.Lock()
	cl := c.pending.pop(r.Op, r.Key)
	unread := false
	if cl == nil && r.Op == '?' && r.Status == codec.StatusErr && string(r.Code) == codec.CodeBadRequest {
		cl = c.pending.popUnread(r.Text)
		unread = cl != nil
	}
	var closeNC net.Conn // a retired connection that owes nothing more
	if c.retired && c.pending.len() == 0 {
		closeNC = c.nc
	}
	c.mu.Unlock()
	if closeNC != nil {
		// The reader's next read fails, and the session ends as any other.
		defer closeNC.Close()
	}
	if cl == nil {
		if r.Op == codec.OpHello && r.Status == codec.StatusErr && string(r.Code) == codec.CodeAuth {
			// The server wants a secret, and we sent none (WithSecret).
			return fmt.Errorf("%s: %w", c.addr, ErrAuth)
		}
		// "? - ERR ..." (a request the server could not read) or an answer
		// nobody asked for: the two ends disagree about the stream.
		if r.Status == codec.StatusErr {
			return fmt.Errorf("unexpected answer from server: %c %s ERR %s %s", r.Op, r.Key, r.Code, r.Text)
		}
		return fmt.Errorf("unexpected answer from server: %c %s %s", r.Op, r.Key, r.Status)
	}
	cl.setAnswer(r)
	cl.unread = unread
	if !cl.finish() && (cl.op == codec.OpAcquire || cl.op == codec.OpShared) && cl.status == codec.StatusOK {
		// Its caller gave up: nobody will ever use this grant.
		c.cl.releaseAbandoned(cl.key, cl.token)
	}
	return nil
}

// badAnswerError is an answer to a request that cannot be read. The
// request is not sent again: another attempt would likely get the same.
type badAnswerError struct{ err error }

func (e *badAnswerError) Error() string { return e.err.Error() }
func (e *badAnswerError) Unwrap() error { return e.err }

// failCall fails the oldest C or M with err when r, a line that could not
// be parsed, is an answer to one (its op and key were read): such an
// answer (a server of another version than ours, or one with a bug in
// these rare requests) is still one line of its own, so the stream can be
// trusted, and the other requests on the connection need not be lost
// with it. It reports whether it failed one.
func (c *conn) failCall(r *codec.Response, err error) bool {
	if r.Op != codec.OpCluster && r.Op != codec.OpMember || string(r.Key) != codec.HelloKey {
		return false
	}
	c.mu.Lock()
	cl := c.pending.pop(r.Op, r.Key)
	var closeNC net.Conn // as in deliver
	if cl != nil && c.retired && c.pending.len() == 0 {
		closeNC = c.nc
	}
	c.mu.Unlock()
	if cl == nil {
		return false
	}
	if closeNC != nil {
		defer closeNC.Close()
	}
	cl.err = &badAnswerError{err}
	cl.finish()
	return true
}

// fail ends the session on nc (if it is still the current one): every
// unanswered call fails, and the manager will redial.
func (c *conn) fail(nc net.Conn, err error) {
	c.mu.Lock()
	if c.nc != nc {
		c.mu.Unlock()
		return
	}
	c.nc = nil
	c.out = c.out[:0]
	if c.cl.ctx.Err() != nil {
		err = ErrClosed
	}
	c.lastErr = err
	c.stopWatchLocked()
	calls := c.pending.drain()
	c.state.Store(stateDown)
	lost := !c.retired && err != ErrClosed
	c.mu.Unlock()
	_ = nc.Close()
	for _, cl := range calls {
		if err == ErrClosed {
			cl.err = ErrClosed
		} else {
			cl.err = &droppedError{addr: c.addr, err: err}
		}
		cl.finish()
	}
	c.cl.sessionDown(lost)
	c.cl.notifyChange()
}

// retire takes the connection out of service for good (an address refresh
// left its node out): it takes no new request, stops dialling, and closes
// once every request sent on it has its answer (deliver), or at once when
// none waits. Client.mu is not held.
func (c *conn) retire() {
	c.mu.Lock()
	c.retired = true
	var idle net.Conn
	if c.pending.len() == 0 {
		idle = c.nc
	}
	c.mu.Unlock()
	c.cancel()
	if idle != nil {
		_ = idle.Close()
	}
}

// drop closes the current session, as if the network had cut it.
func (c *conn) drop() {
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	if nc != nil {
		_ = nc.Close()
	}
}
