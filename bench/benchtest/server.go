// Package benchtest provides a minimal in-process stand-in for batond, so
// that the load generator and the command that wraps it can be tested
// without a real server.
//
// The fake speaks enough of the wire protocol for the bench workloads: A
// grants a free key at once with a fresh token (a held key answers TIMEOUT:
// there are no wait queues), R with the holder's token (or none) frees it,
// anything else is ERR badrequest. Leases never run out.
package benchtest

import (
	"errors"
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
}

// Server is a fake lock server listening on 127.0.0.1.
type Server struct {
	opts  Options
	ln    net.Listener
	token atomic.Uint64

	mu      sync.Mutex
	held    map[string]uint64
	conns   map[net.Conn]struct{}
	closed  bool
	accepts int

	wg sync.WaitGroup
}

// Start listens on a free port and serves until Close.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, ln: ln, held: make(map[string]uint64), conns: make(map[net.Conn]struct{})}
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

// Close stops listening, closes every connection and waits for the
// server's goroutines.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
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
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	in := make([]byte, 64<<10)
	var out []byte
	var req codec.Request
	r, w := 0, 0
	for {
		if r == w {
			r, w = 0, 0
		} else if w == len(in) {
			w = copy(in, in[r:w])
			r = 0
		}
		n, err := c.Read(in[w:])
		w += n
		for {
			line, m, serr := codec.SplitLine(in[r:w])
			if serr != nil {
				var pe *codec.ParseError
				if errors.As(serr, &pe) {
					out = codec.AppendParseError(out, nil, pe)
				}
				_, _ = c.Write(out)
				return
			}
			if m == 0 {
				break
			}
			r += m
			out = s.answer(out, line, &req)
		}
		if len(out) > 0 {
			if _, werr := c.Write(out); werr != nil {
				return
			}
			out = out[:0]
		}
		if err != nil {
			return
		}
	}
}

func (s *Server) answer(out, line []byte, req *codec.Request) []byte {
	if err := codec.ParseRequest(line, req); err != nil {
		var pe *codec.ParseError
		errors.As(err, &pe)
		return codec.AppendParseError(out, req, pe)
	}
	resp := codec.Response{Op: req.Op, Key: req.Key}
	s.mu.Lock()
	switch req.Op {
	case codec.OpAcquire:
		if _, busy := s.held[string(req.Key)]; busy {
			resp.Status = codec.StatusTimeout
			break
		}
		tok := s.opts.FixedToken
		if tok == 0 {
			tok = s.token.Add(1)
		}
		s.held[string(req.Key)] = tok
		resp.Status, resp.Token = codec.StatusOK, tok
	case codec.OpRelease:
		tok, ok := s.held[string(req.Key)]
		if !ok || (req.Token != 0 && req.Token != tok) {
			resp.Status = codec.StatusNotHeld
			break
		}
		delete(s.held, string(req.Key))
		resp.Status = codec.StatusOK
	default:
		resp.Status, resp.Code = codec.StatusErr, []byte(codec.CodeBadRequest)
	}
	s.mu.Unlock()
	return codec.AppendResponse(out, &resp)
}
