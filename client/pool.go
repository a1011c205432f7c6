package client

// The connection pool: the Client's connections (one conn each, conn.go),
// adding the ones MOVED names, picking the one a request goes to, asking
// for a redial, and waking the requests that wait for a connection.

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// maxConns bounds the connections MOVED answers can add, so that a
// confused server cannot make the client dial without end.
const maxConns = 64

// addConnLocked starts a connection to addr. cl.mu is held, or cl is not
// shared yet.
func (cl *Client) addConnLocked(addr string) *conn {
	c := newConn(cl, addr)
	cl.conns = append(cl.conns, c)
	cl.wg.Add(1)
	go c.run()
	return c
}

// notifyChange wakes every request waiting for a connection to come up.
func (cl *Client) notifyChange() {
	cl.mu.Lock()
	close(cl.changed)
	cl.changed = make(chan struct{})
	cl.mu.Unlock()
}

// errTargetDown is a MOVED target that cannot be reached right now.
var errTargetDown = errors.New("the node named by MOVED is not reachable")

// pick returns a connection that is up: one to addr when addr is set (a
// MOVED target, added to the pool if new), else one to the preferred node
// if any is up, else any, round-robin. A connection to avoid (a node that
// just said it cannot serve) is taken only when no other is up, and is not
// the preferred one. It waits while a candidate is still dialling. With
// none usable it fails with an error matching ErrUnavailable.
func (cl *Client) pick(ctx context.Context, addr, avoid string) (*conn, error) {
	for {
		cl.mu.Lock()
		if cl.closed {
			cl.mu.Unlock()
			return nil, ErrClosed
		}
		if addr != "" && !cl.knownLocked(addr) {
			if len(cl.conns) >= maxConns {
				cl.mu.Unlock()
				return nil, errTargetDown
			}
			cl.addConnLocked(addr)
			// A node we did not know leads: the membership may have
			// changed.
			cl.askRefresh()
		}
		want := addr
		if want == "" && cl.preferred != avoid {
			want = cl.preferred
		}
		var c *conn
		dialing := false
		if want != "" {
			c, dialing = cl.chooseLocked(want, "")
		}
		if c == nil && addr == "" {
			c, dialing = cl.chooseLocked("", avoid)
			if c == nil && !dialing && avoid != "" {
				c, dialing = cl.chooseLocked("", "")
			}
		}
		changed := cl.changed
		cl.mu.Unlock()
		if c != nil {
			return c, nil
		}
		if !dialing {
			if err := cl.refusedBy(addr); err != nil {
				return nil, err
			}
			if addr != "" {
				// The leader named by MOVED is one we lost: it is likely
				// back (it leads), so try it now rather than at the next
				// scheduled dial.
				cl.redial(addr)
				return nil, errTargetDown
			}
			return nil, cl.noConnError()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// redial asks every connection to addr to dial again soon.
func (cl *Client) redial(addr string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, c := range cl.conns {
		if c.addr == addr {
			c.redialSoon()
		}
	}
}

// knownLocked reports whether a connection to addr exists.
func (cl *Client) knownLocked(addr string) bool {
	for _, c := range cl.conns {
		if c.addr == addr {
			return true
		}
	}
	return false
}

// chooseLocked returns the next connection that is up, round-robin, among
// those to addr ("" for all) and not to avoid, and whether one of them is
// being dialled.
func (cl *Client) chooseLocked(addr, avoid string) (*conn, bool) {
	n := len(cl.conns)
	start := int(cl.rr % uint32(n))
	cl.rr++
	dialing := false
	for i := range n {
		c := cl.conns[(start+i)%n]
		if (addr != "" && c.addr != addr) || (avoid != "" && c.addr == avoid) {
			continue
		}
		switch c.state.Load() {
		case stateUp:
			return c, false
		case stateDialing:
			dialing = true
		}
	}
	return nil, dialing
}

// refusedBy returns the ErrAuth of a connection to addr ("" for any) that
// is down because its server refused the secret, or nil.
func (cl *Client) refusedBy(addr string) error {
	cl.mu.Lock()
	conns := append([]*conn(nil), cl.conns...)
	cl.mu.Unlock()
	for _, c := range conns {
		if addr != "" && c.addr != addr || c.state.Load() != stateDown {
			continue
		}
		if err := c.lastError(); errors.Is(err, ErrAuth) {
			return err
		}
	}
	return nil
}

// noConnError says why no connection is usable, naming every address.
func (cl *Client) noConnError() error {
	cl.mu.Lock()
	conns := append([]*conn(nil), cl.conns...)
	cl.mu.Unlock()
	var parts []string
	seen := make(map[string]bool)
	for _, c := range conns {
		if seen[c.addr] {
			continue
		}
		seen[c.addr] = true
		parts = append(parts, c.lastError().Error())
	}
	return fmt.Errorf("%w: cannot connect: %s", ErrUnavailable, strings.Join(parts, "; "))
}

// prefer makes addr the node requests go to first.
func (cl *Client) prefer(addr string) {
	cl.mu.Lock()
	cl.preferred = addr
	cl.mu.Unlock()
}

// connCount is the number of connections in the pool.
func (cl *Client) connCount() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.conns)
}
