// Package benchtest provides a minimal in-process stand-in for batond, so
// that the load generator and the command that wraps it can be tested
// without a real server.
//
// The fake speaks enough of the wire protocol for the bench workloads: A
// grants a free key at once with a fresh token; on a held key it answers
// TIMEOUT, or with Options.Queue joins the key's queue (wait_ms is then
// ignored, except -1, which still answers TIMEOUT). R with the holder's
// token (or none) frees the key and grants it to the queue's head (or, with
// Options.LIFO, to its tail: a broken server). K with the holder's token
// answers OK, Q answers HELD (with the lease as remaining time) or FREE.
// Leases never run out; owners are counted (Owners), not acted on. S
// (shared holds, protocol 1.4) makes the key a semaphore of its permits:
// granted while fewer holders than that hold it and nobody waits, queued
// (or TIMEOUT) as A is otherwise; R with a holder's token frees that hold
// and grants the waiters that fit, K extends it, Q answers SHARED, and an
// S whose permits differ from the key's is ERR badrequest (the fake does
// not mix A and S on one key: either on a key the other holds is ERR
// badrequest too). Anything else is ERR badrequest.
package benchtest

import (
	"errors"
	"maps"
	"net"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/codec"
)

// Options change how the fake behaves.
type Options struct {
	// FixedToken, when not 0, is the token of every grant: a server that
	// breaks the fencing-token promise.
	FixedToken uint64
	// Queue makes acquires of held keys wait in the key's queue instead of
	// answering TIMEOUT.
	Queue bool
	// LIFO serves each queue newest first, breaking the FIFO promise.
	LIFO bool
}

// Server is a fake lock server listening on 127.0.0.1.
type Server struct {
	opts  Options
	ln    net.Listener
	token atomic.Uint64

	mu      sync.Mutex
	held    map[string]*lock
	conns   map[*conn]struct{}
	closed  bool
	accepts int
	owners  map[string]int // owner -> acquires that carried it

	wg sync.WaitGroup
}

// lock is a held key and the acquires waiting for it.
type lock struct {
	token   uint64
	leaseMs uint32
	waiters []waiter
	// Shared holds: the key's permits (0: held by A) and its holders'
	// tokens and leases.
	permits uint32
	shared  map[uint64]uint32
}

// waiter is a queued acquire.
type waiter struct {
	c       *conn
	leaseMs uint32
}

// fits reports whether l, a key of shared holds, takes one more holder.
func (s *Server) fits(l *lock) bool {
	return len(l.shared) < int(l.permits)
}

// conn is one client connection. Grants to queued acquires are written by
// whichever connection's goroutine released the key, so writes take wmu.
type conn struct {
	nc     net.Conn
	wmu    sync.Mutex
	closed bool // under Server.mu: its waiters are skipped
}

func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// delivery is an answer for another connection than the one being served.
type delivery struct {
	c    *conn
	line []byte
}

// Start listens on a free port and serves until Close.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, ln: ln, held: make(map[string]*lock), conns: make(map[*conn]struct{}), owners: make(map[string]int)}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address clients dial.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Accepted is the number of connections accepted so far.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepts
}

// Held is the number of keys held right now.
func (s *Server) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// Owners returns how many acquires carried each owner seen.
func (s *Server) Owners() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.owners)
}

// Close stops listening, closes every connection and waits for the
// server's goroutines.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := &conn{nc: nc}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.accepts++
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve answers every complete line of a read in one write, like a real
// server's event loop would.
func (s *Server) serve(c *conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		c.closed = true
		s.mu.Unlock()
		_ = c.nc.Close()
	}()
	in := codec.NewLineReader(64 << 10)
	var out []byte
	var others []delivery
	var req codec.Request
	for {
		n, err := c.nc.Read(in.Free())
		in.Filled(n)
		for {
			line, serr := in.Next()
			if serr != nil {
				var pe *codec.ParseError
				if errors.As(serr, &pe) {
					out = codec.AppendParseError(out, nil, pe)
				}
				_ = c.write(out)
				return
			}
			if line == nil {
				break
			}
			out, others = s.answer(c, out, others, line, &req)
		}
		if len(out) > 0 {
			if werr := c.write(out); werr != nil {
				return
			}
			out = out[:0]
		}
		for _, d := range others {
			_ = d.c.write(d.line) // a closed waiter's grant is lost with it
		}
		others = others[:0]
		if err != nil {
			return
		}
	}
}

// answer appends the answer to line to out, and grants for other
// connections to others.
func (s *Server) answer(c *conn, out []byte, others []delivery, line []byte, req *codec.Request) ([]byte, []delivery) {
	if err := codec.ParseRequest(line, req); err != nil {
		var pe *codec.ParseError
		errors.As(err, &pe)
		return codec.AppendParseError(out, req, pe), others
	}
	resp := codec.Response{Op: req.Op, Key: req.Key}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.held[string(req.Key)]
	switch req.Op {
	case codec.OpAcquire:
		if len(req.Owner) > 0 {
			s.owners[string(req.Owner)]++
		}
		if l != nil && l.permits > 0 {
			resp.Status, resp.Code = codec.StatusErr, []byte(codec.CodeBadRequest)
			break
		}
		if l == nil {
			l = &lock{}
			s.held[string(req.Key)] = l
			resp.Status, resp.Token = codec.StatusOK, s.grant(l, req.LeaseMs)
			break
		}
		if !s.opts.Queue || req.WaitMs == codec.WaitNone {
			resp.Status = codec.StatusTimeout
			break
		}
		l.waiters = append(l.waiters, waiter{c, req.LeaseMs})
		return out, others
	case codec.OpShared:
		if len(req.Owner) > 0 {
			s.owners[string(req.Owner)]++
		}
		switch {
		case l == nil:
			l = &lock{permits: req.Permits, shared: make(map[uint64]uint32)}
			s.held[string(req.Key)] = l
		case l.permits != req.Permits:
			resp.Status, resp.Code = codec.StatusErr, []byte(codec.CodeBadRequest)
			return codec.AppendResponse(out, &resp), others
		case !s.fits(l) || len(l.waiters) > 0:
			if !s.opts.Queue || req.WaitMs == codec.WaitNone {
				resp.Status = codec.StatusTimeout
				return codec.AppendResponse(out, &resp), others
			}
			l.waiters = append(l.waiters, waiter{c, req.LeaseMs})
			return out, others
		}
		resp.Status, resp.Token = codec.StatusOK, s.grantShared(l, req.LeaseMs)
	case codec.OpRelease:
		if l != nil && l.permits > 0 {
			resp.Status = codec.StatusNotHeld
			if _, ok := l.shared[req.Token]; ok || (req.Token == 0 && len(l.shared) > 0) {
				resp.Status = codec.StatusOK
				if req.Token == 0 {
					clear(l.shared)
				}
				delete(l.shared, req.Token)
				others = s.handOffShared(l, req.Key, others)
			}
			break
		}
		if l == nil || (req.Token != 0 && req.Token != l.token) {
			resp.Status = codec.StatusNotHeld
			break
		}
		resp.Status = codec.StatusOK
		others = s.handOff(l, req.Key, others)
	case codec.OpExtend:
		if l != nil && l.permits > 0 {
			resp.Status = codec.StatusNotHeld
			if _, ok := l.shared[req.Token]; ok {
				l.shared[req.Token] = req.LeaseMs
				resp.Status = codec.StatusOK
			}
			break
		}
		if l == nil || req.Token != l.token {
			resp.Status = codec.StatusNotHeld
			break
		}
		l.leaseMs = req.LeaseMs
		resp.Status = codec.StatusOK
	case codec.OpQuery:
		if l == nil {
			resp.Status = codec.StatusFree
			break
		}
		if l.permits > 0 {
			resp.Status, resp.Holders, resp.Permits = codec.StatusShared, uint64(len(l.shared)), uint64(l.permits)
			break
		}
		resp.Status, resp.Token, resp.RemainingMs = codec.StatusHeld, l.token, uint64(l.leaseMs)
	default:
		resp.Status, resp.Code = codec.StatusErr, []byte(codec.CodeBadRequest)
	}
	return codec.AppendResponse(out, &resp), others
}

// grant gives l a fresh token; s.mu is held.
func (s *Server) grant(l *lock, leaseMs uint32) uint64 {
	l.token = s.opts.FixedToken
	if l.token == 0 {
		l.token = s.token.Add(1)
	}
	l.leaseMs = leaseMs
	return l.token
}

// grantShared adds a holder to l, a key of shared holds, with a fresh
// token; s.mu is held.
func (s *Server) grantShared(l *lock, leaseMs uint32) uint64 {
	token := s.opts.FixedToken
	if token == 0 {
		token = s.token.Add(1)
	}
	l.shared[token] = leaseMs
	return token
}

// handOffShared grants l, a key of shared holds, to the live waiters that
// fit, in queue order (Options.LIFO: newest first), or frees key when
// nobody holds or waits; s.mu is held.
func (s *Server) handOffShared(l *lock, key []byte, others []delivery) []delivery {
	for s.fits(l) {
		w, ok := s.popWaiter(l)
		if !ok {
			break
		}
		resp := codec.Response{Op: codec.OpShared, Key: key, Status: codec.StatusOK, Token: s.grantShared(l, w.leaseMs)}
		others = append(others, delivery{w.c, codec.AppendResponse(nil, &resp)})
	}
	if len(l.shared) == 0 && len(l.waiters) == 0 {
		delete(s.held, string(key))
	}
	return others
}

// handOff passes l to its next live waiter, or frees key; s.mu is held.
// Grants go out after the answers of the batch being served, so a grant to
// the releasing connection itself follows its release's OK, as a real
// server's would.
func (s *Server) handOff(l *lock, key []byte, others []delivery) []delivery {
	if w, ok := s.popWaiter(l); ok {
		resp := codec.Response{Op: codec.OpAcquire, Key: key, Status: codec.StatusOK, Token: s.grant(l, w.leaseMs)}
		return append(others, delivery{w.c, codec.AppendResponse(nil, &resp)})
	}
	delete(s.held, string(key))
	return others
}

// popWaiter takes l's next live waiter in queue order (Options.LIFO:
// newest first), dropping those whose connection closed; ok is false when
// none is left. s.mu is held.
func (s *Server) popWaiter(l *lock) (w waiter, ok bool) {
	for len(l.waiters) > 0 {
		if s.opts.LIFO {
			w = l.waiters[len(l.waiters)-1]
			l.waiters = l.waiters[:len(l.waiters)-1]
		} else {
			w = l.waiters[0]
			l.waiters = l.waiters[1:]
		}
		if !w.c.closed {
			return w, true
		}
	}
	return waiter{}, false
}
