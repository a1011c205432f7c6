package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Recorder records the requests written to, and the answers read from,
// every connection it wraps, on one monotonic clock, and pairs each answer
// with its request the way a pipelining client must: the oldest outstanding
// request of the same (op, key) on the same connection.
//
// One mutex guards everything; an event (a write or a read) takes it once,
// which costs far less than the system call it accompanies.
type Recorder struct {
	start time.Time // the clock's zero; time.Since on it is monotonic

	mu       sync.Mutex
	ops      []Op
	problems []string
	conns    []*recConn
	keys     map[string]string // interned keys: most requests reuse a few
	finished bool
}

// NewRecorder returns a Recorder whose clock starts now (monotonic).
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), keys: make(map[string]string)}
}

// Since is now on the recorder's clock, for events recorded elsewhere (a
// fault injected, a node restarted) that should line up with the history.
func (r *Recorder) Since() time.Duration {
	return time.Since(r.start)
}

// Wrap returns nc with every request written to it and every answer read
// from it recorded. The returned conn is safe for a client's concurrent
// reader and writer goroutines (several writers too, each Write holding
// whole request lines or not); reads must come from one goroutine at a
// time, since the order of the bytes read is what pairs answers.
func (r *Recorder) Wrap(nc net.Conn) net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &recConn{Conn: nc, rec: r, id: len(r.conns) + 1, pending: make(map[string]*fifo)}
	r.conns = append(r.conns, c)
	return c
}

// ConnAddrs returns the server address of every recorded connection, by
// connection number (the Op.Conn of its requests).
func (r *Recorder) ConnAddrs() map[int]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	addrs := make(map[int]string, len(r.conns))
	for _, c := range r.conns {
		addrs[c.id] = c.RemoteAddr().String()
	}
	return addrs
}

// Start is the wall-clock time of the recorder's zero, to line its times up
// with the nodes' logs.
func (r *Recorder) Start() time.Time { return r.start }

// Finish ends the recording: every request still unanswered becomes unknown
// with Return = now, and traffic after this is ignored (the run is over;
// what comes later is teardown).
func (r *Recorder) Finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	// Read under mu: a request is registered under mu with a Call read
	// before it took mu, so every one registered so far has its Call before
	// this, and gets a Return after its Call. (Read before mu, a request
	// registered in between came out with Return < Call: "outstanding",
	// which the eighth 30-minute run flagged as a hang.)
	t := r.Since()
	for _, c := range r.conns {
		c.abandonLocked(t)
	}
	r.finished = true
}

// History returns every request recorded, in Call order. Call it after
// Finish: before, a request still outstanding has Answered false and
// Return 0.
func (r *Recorder) History() []Op {
	r.mu.Lock()
	h := slices.Clone(r.ops)
	r.mu.Unlock()
	// Requests of different connections are appended in the order they got
	// the lock, which may differ slightly from the order of their clocks.
	slices.SortStableFunc(h, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
	return h
}

// Problems returns the protocol breaches seen: answers that pair with no
// outstanding request (a stray or second answer, or "? - ERR" lines, which
// name no request), lines that do not parse, in either direction.
func (r *Recorder) Problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.problems)
}

// problemLocked records a breach seen on connection c. r.mu is held.
func (r *Recorder) problemLocked(c *recConn, t time.Duration, format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf("conn %d at %s: ", c.id, appendMs(nil, t))+fmt.Sprintf(format, args...))
}

// internLocked returns key as a string, allocating it only the first time
// it is seen. r.mu is held.
func (r *Recorder) internLocked(key []byte) string {
	if s, ok := r.keys[string(key)]; ok {
		return s
	}
	s := string(key)
	r.keys[s] = s
	return s
}

// recConn is a recorded connection.
type recConn struct {
	net.Conn
	rec *Recorder
	id  int

	// wmu is held from registering a Write's requests until the real Write
	// returned, so that the pairing queues hold each (op, key) in the order
	// its bytes went on the wire, even with several writers.
	wmu   sync.Mutex
	wpart []byte // the start of a request line a Write left unfinished

	// Guarded by rec.mu.
	rbuf    []byte           // the start of an answer line a Read left unfinished
	pending map[string]*fifo // outstanding requests by op, ' ', key: indexes into rec.ops
	keybuf  []byte           // scratch for the map key, so that lookups allocate nothing
	dead    bool             // the connection failed or was closed: its traffic is no longer recorded
}

// fifo is a queue of outstanding requests of one (op, key).
type fifo struct {
	q    []int
	head int
}

func (f *fifo) push(i int) { f.q = append(f.q, i) }

func (f *fifo) pop() (int, bool) {
	if f.head == len(f.q) {
		return 0, false
	}
	i := f.q[f.head]
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0 // reuse the array: most queues are one deep
	}
	return i, true
}

// Write registers the complete request lines in b as outstanding, then
// writes b. The clock is read before registering, so Call is before the
// server could have seen a byte; registering before the real Write means no
// answer can be read before its request is known.
func (c *recConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.sent(b, c.rec.Since())
	n, err := c.Conn.Write(b)
	if err != nil {
		// The stream is broken: whatever line was half written will never
		// be finished on this connection.
		c.wpart = c.wpart[:0]
	}
	return n, err
}

// sent registers the request lines that b completes. c.wmu is held.
func (c *recConn) sent(b []byte, t time.Duration) {
	data, joined := b, len(c.wpart) > 0
	if joined {
		c.wpart = append(c.wpart, b...)
		data = c.wpart
	}
	r := c.rec
	r.mu.Lock()
	var req codec.Request
	off := 0
	for off < len(data) {
		line, n, err := codec.SplitLine(data[off:])
		if err != nil {
			r.problemLocked(c, t, "request line longer than %d bytes: %q...", codec.MaxLine, data[off:off+min(64, len(data)-off)])
			off = len(data) // the server closes the connection on it
			break
		}
		if n == 0 {
			break
		}
		off += n
		if r.finished {
			continue
		}
		if err := codec.ParseRequest(line, &req); err != nil {
			// The workload should send only well-formed requests; its answer,
			// if any, will show up as a stray.
			r.problemLocked(c, t, "request line %q does not parse: %v", line, err)
			continue
		}
		c.registerLocked(&req, t)
	}
	r.mu.Unlock()
	rest := data[off:]
	if joined {
		c.wpart = c.wpart[:copy(c.wpart, rest)]
	} else {
		c.wpart = append(c.wpart[:0], rest...)
	}
}

// registerLocked records req as sent at t and makes it outstanding. On a
// connection that already failed it is unknown at once: nothing will pair
// with it. rec.mu is held.
func (c *recConn) registerLocked(req *codec.Request, t time.Duration) {
	r := c.rec
	op := Op{
		Conn: c.id, Op: req.Op, Key: r.internLocked(req.Key), Permits: req.Permits,
		LeaseMs: req.LeaseMs, WaitMs: req.WaitMs, Token: req.Token,
		// A copy: req.Owner aliases the caller's buffer. Owners are not
		// interned like keys, since each acquire has its own.
		Owner: string(req.Owner),
		Call:  t,
	}
	if c.dead {
		op.Return = t
		r.ops = append(r.ops, op)
		return
	}
	r.ops = append(r.ops, op)
	c.keybuf = append(append(c.keybuf[:0], req.Op, ' '), req.Key...)
	f := c.pending[string(c.keybuf)]
	if f == nil {
		f = &fifo{}
		c.pending[string(c.keybuf)] = f
	}
	f.push(len(r.ops) - 1)
}

// Read reads from the connection and pairs every complete answer line with
// its request. An error other than a deadline ends the connection: its
// outstanding requests become unknown. A deadline does not, since the
// caller may well read on.
func (c *recConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.received(p[:n], err, c.rec.Since())
	return n, err
}

// received handles the bytes and the error of one Read returned at t.
func (c *recConn) received(b []byte, rerr error, t time.Duration) {
	r := c.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished || c.dead {
		return
	}
	c.rbuf = append(c.rbuf, b...)
	off := 0
	for off < len(c.rbuf) {
		line, n, err := codec.SplitLine(c.rbuf[off:])
		if err != nil {
			r.problemLocked(c, t, "answer line longer than %d bytes: %q...", codec.MaxLine, c.rbuf[off:off+min(64, len(c.rbuf)-off)])
			off = len(c.rbuf) // the client cannot resynchronise either
			break
		}
		if n == 0 {
			break
		}
		off += n
		c.answerLocked(line, t)
	}
	c.rbuf = c.rbuf[:copy(c.rbuf, c.rbuf[off:])]
	var ne net.Error
	if rerr != nil && !(errors.As(rerr, &ne) && ne.Timeout()) {
		c.abandonLocked(t)
		c.dead = true
	}
}

// answerLocked pairs one answer line, read at t, with the oldest
// outstanding request of its (op, key). rec.mu is held.
func (c *recConn) answerLocked(line []byte, t time.Duration) {
	r := c.rec
	var resp codec.Response
	if err := codec.ParseResponse(line, &resp); err != nil {
		r.problemLocked(c, t, "answer line %q does not parse: %v", line, err)
		return
	}
	if resp.Op == '?' {
		r.problemLocked(c, t, "answer %q names no request: the server could not read one of ours", line)
		return
	}
	c.keybuf = append(append(c.keybuf[:0], resp.Op, ' '), resp.Key...)
	var i int
	ok := false
	if f := c.pending[string(c.keybuf)]; f != nil {
		i, ok = f.pop()
	}
	if !ok {
		r.problemLocked(c, t, "stray answer %q: no %c %s request is outstanding", line, resp.Op, resp.Key)
		return
	}
	op := &r.ops[i]
	op.Return, op.Answered, op.Status = t, true, resp.Status
	op.RespToken, op.RemainingMs = resp.Token, resp.RemainingMs
	op.RespHolders, op.RespPermits = resp.Holders, resp.Permits
	op.RespOwner = string(resp.Owner) // a copy: resp.Owner aliases rbuf
	if resp.Status == codec.StatusErr {
		op.Code = string(resp.Code)
	}
}

// Close closes the connection; its outstanding requests become unknown as
// of the call.
func (c *recConn) Close() error {
	t := c.rec.Since()
	err := c.Conn.Close()
	r := c.rec
	r.mu.Lock()
	if !r.finished && !c.dead {
		c.abandonLocked(t)
		c.dead = true
	}
	r.mu.Unlock()
	return err
}

// abandonLocked makes every outstanding request of c unknown as of t: no
// answer will ever pair with it. rec.mu is held. Read and Close read t
// before they take rec.mu, so a request another goroutine sent meanwhile
// has its Call after t: it is unknown as of its Call. (With Return before
// Call it counted as outstanding, a hang; the twelfth 12-minute run on
// 2026-12-02 flagged one so, when a node's death cut a connection.)
func (c *recConn) abandonLocked(t time.Duration) {
	for _, f := range c.pending {
		for {
			i, ok := f.pop()
			if !ok {
				break
			}
			op := &c.rec.ops[i]
			op.Return = max(t, op.Call)
		}
	}
}
