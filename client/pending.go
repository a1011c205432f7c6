package client

import (
	"bytes"
	"sync/atomic"

	"github.com/baton-dev/baton/codec"
)

// The life of a call. A call leaves callPending exactly once, by a
// compare-and-swap, so that its answer and its caller giving up cannot both
// win: either the caller gets the answer, or the reader knows nobody will
// and cleans up after it (releases a grant).
const (
	callPending int32 = iota
	callDone
	callAbandoned
)

// call is one request sent on one connection, waiting for its answer.
type call struct {
	op   byte
	key  string
	next *call  // the next call with the same (op, key) on the connection
	seq  uint64 // its place among the connection's calls (pendingTable.push)

	state atomic.Int32
	done  chan struct{} // closed when state becomes callDone

	// The answer, written by the connection before done is closed and read
	// by the caller only after it.
	status      codec.Status
	token       uint64
	remainingMs uint64
	owner       string // HELD: the holder's owner, "" when it has none
	holders     uint64 // SHARED
	permits     uint64 // SHARED
	addr        string // MOVED
	value       string // OK of C and M: the rest of the line
	code, text  string // ERR
	// unread: the answer was "? - ERR badrequest": the server could not
	// read the request's op (one from before protocol 1.3, or 1.4 for S).
	unread bool
	err    error // the connection failed before the answer came
}

func newCall(op byte, key string) *call {
	return &call{op: op, key: key, done: make(chan struct{})}
}

// setAnswer copies what the call needs out of r, whose slices alias the
// connection's read buffer.
func (c *call) setAnswer(r *codec.Response) {
	c.status = r.Status
	c.token = r.Token
	c.remainingMs = r.RemainingMs
	c.holders, c.permits = r.Holders, r.Permits
	switch r.Status {
	case codec.StatusOK:
		if len(r.Value) > 0 {
			c.value = string(r.Value)
		}
	case codec.StatusHeld:
		if len(r.Owner) > 0 { // a string only when there is one: heartbeats find keys free
			c.owner = string(r.Owner)
		}
	case codec.StatusMoved:
		c.addr = string(r.Addr)
	case codec.StatusErr:
		c.code, c.text = string(r.Code), string(r.Text)
	}
}

// finish hands the answer (or err) to the caller. It reports false when the
// caller has given up, in which case nobody will look at the call again.
func (c *call) finish() bool {
	if c.state.CompareAndSwap(callPending, callDone) {
		close(c.done)
		return true
	}
	return false
}

// abandon is the caller giving up. It reports false when the answer won the
// race; done is then closed or about to be.
func (c *call) abandon() bool {
	return c.state.CompareAndSwap(callPending, callAbandoned)
}

// callQueue holds the unanswered calls of one (op, key) on one connection, in
// the order they were sent: the server answers them in that order.
type callQueue struct {
	key        string
	head, tail *call
}

// pendingTable pairs answers with the calls of one connection by the echoed
// (op, key). It is not safe for concurrent use: the connection guards it,
// and pushes calls in the same critical section that queues their request
// bytes, so that the table's order is the wire's order.
type pendingTable struct {
	byOp [codec.NumOps]map[string]*callQueue // indexed by codec.OpIndex
	n    int
	seq  uint64 // calls pushed so far
}

// push appends c behind the earlier calls of its (op, key). c.op must be a
// request op.
func (p *pendingTable) push(c *call) {
	i := codec.OpIndex(c.op)
	m := p.byOp[i]
	if m == nil {
		m = make(map[string]*callQueue)
		p.byOp[i] = m
	}
	c.next = nil
	p.seq++
	c.seq = p.seq
	q := m[c.key]
	if q == nil {
		m[c.key] = &callQueue{key: c.key, head: c, tail: c}
	} else {
		q.tail.next = c
		q.tail = c
	}
	p.n++
}

// pop removes and returns the oldest call of (op, key), or nil when there is
// none: an answer nobody asked for.
func (p *pendingTable) pop(op byte, key []byte) *call {
	i := codec.OpIndex(op)
	if i < 0 || p.byOp[i] == nil {
		return nil
	}
	m := p.byOp[i]
	q := m[string(key)] // no allocation: the compiler converts in place for a lookup
	if q == nil {
		return nil
	}
	c := q.head
	q.head = c.next
	c.next = nil
	if q.head == nil {
		delete(m, q.key)
	}
	p.n--
	return c
}

// unreadOps are the ops the client sends on its connections that an older
// server cannot read: C and M (protocol 1.3) and S (1.4).
var unreadOps = [...]byte{codec.OpCluster, codec.OpMember, codec.OpShared}

// popUnread removes and returns the call that an answer "? - ERR
// badrequest <text>" belongs to, or nil: the oldest unanswered call of an
// op the server cannot read. Such a server answers an unreadable line as
// soon as it reads it, so the oldest is the one, among the ops it cannot
// read: one from before protocol 1.3 reads none of C, M and S, one of 1.3
// reads C and M but not S, and its text names the ops it reads ("op must
// be A, R, K, Q, H, C or M"), which rules those out; a text that names
// none rules out none.
func (p *pendingTable) popUnread(text []byte) *call {
	known := readableOps(text)
	var oldest *call
	for _, op := range unreadOps {
		if known[op] {
			continue
		}
		for _, q := range p.byOp[codec.OpIndex(op)] {
			if oldest == nil || q.head.seq < oldest.seq {
				oldest = q.head
			}
		}
	}
	if oldest == nil {
		return nil
	}
	return p.pop(oldest.op, []byte(oldest.key))
}

// readableOps is the set of ops an answer "? - ERR badrequest op must be
// A, R, K, Q, H, C or M" names: those the server reads. It is empty for
// any other text.
func readableOps(text []byte) (known [256]bool) {
	rest, ok := bytes.CutPrefix(text, []byte("op must be "))
	if !ok {
		return known
	}
	for _, f := range bytes.FieldsFunc(rest, func(r rune) bool { return r == ',' || r == ' ' }) {
		if len(f) == 1 {
			known[f[0]] = true
		}
	}
	return known
}

// len is the number of unanswered calls.
func (p *pendingTable) len() int { return p.n }

// drain removes every call and returns them, for a connection that failed.
func (p *pendingTable) drain() []*call {
	if p.n == 0 {
		return nil
	}
	out := make([]*call, 0, p.n)
	for i := range p.byOp {
		for _, q := range p.byOp[i] {
			for c := q.head; c != nil; {
				next := c.next
				c.next = nil
				out = append(out, c)
				c = next
			}
		}
		p.byOp[i] = nil
	}
	p.n = 0
	return out
}
