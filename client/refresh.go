package client

// The address refresh (protocol 1.3): the client asks the cluster which
// members serve clients (C -) and keeps its connections to those, so that
// it follows a cluster whose members are replaced while it runs. When it
// asks is in Client's doc; Members is the request itself.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/codec"
)

const (
	// refreshGap spaces refreshes, so that a burst of reasons (a node's
	// every connection lost at once, MOVED answers naming a new leader to
	// many requests) costs one or two, not one each.
	refreshGap = time.Second
	// refreshTimeout bounds one refresh: a server that does not answer it
	// in that time is asked again at the next occasion.
	refreshTimeout = 5 * time.Second
)

// WithFixedAddresses makes the client keep the addresses given to New (and
// those MOVED answers name) instead of refreshing them from the cluster
// (see Client): for a client that reaches the cluster through addresses
// of its own, such as a proxy, a tunnel or a port mapping, at which the
// members' own addresses cannot be reached.
func WithFixedAddresses() Option {
	return func(o *options) {
		o.fixed = true
	}
}

// Members returns the client addresses of the cluster's voters, in
// priority order (C -, protocol 1.3), as the node asked knows them: their
// TLS addresses on a TLS client. The client refreshes its own addresses
// from the same answer (see Client). A server from before protocol 1.3
// makes an error matching ErrUnsupported.
func (cl *Client) Members(ctx context.Context) ([]string, error) {
	addrs, err := cl.members(ctx)
	return addrs, opErr("members", "", err)
}

func (cl *Client) members(ctx context.Context) ([]string, error) {
	req := codec.Request{Op: codec.OpCluster, Key: []byte(codec.HelloKey)}
	ans, err := cl.exchange(ctx, &req, codec.HelloKey, policy{})
	if err != nil {
		var se *ServerError
		if errors.As(err, &se) && se.Code == codec.CodeBadRequest && !errors.Is(err, ErrUnsupported) {
			// C takes no argument to get wrong: a server that knows the op
			// but not the request.
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		return nil, err
	}
	addrs, err := checkAddrs(strings.Split(ans.value, ","))
	if err != nil {
		return nil, fmt.Errorf("bad answer C - OK %s: %w", ans.value, err)
	}
	return addrs, nil
}

// askRefresh asks the refresh goroutine for a refresh, without waiting;
// asking again before it starts is asking once. With WithFixedAddresses
// it does nothing. Client.mu may be held.
func (cl *Client) askRefresh() {
	select {
	case cl.refreshNow <- struct{}{}:
	default:
	}
}

// sessionUp counts a session that came up: the client connects when the
// first comes up, or the first after all were down.
func (cl *Client) sessionUp() {
	cl.mu.Lock()
	cl.up++
	if cl.up == 1 {
		cl.askRefresh()
	}
	cl.mu.Unlock()
}

// sessionDown counts a session that ended; lost: it was neither retired
// nor closed with the client.
func (cl *Client) sessionDown(lost bool) {
	cl.mu.Lock()
	cl.up--
	if lost {
		cl.askRefresh()
	}
	cl.mu.Unlock()
}

// refreshLoop is the refresh goroutine: a refresh when asked, at most one
// per refreshGap, and one every refreshInterval after the last.
func (cl *Client) refreshLoop() {
	defer cl.wg.Done()
	period := time.NewTimer(cl.opts.refreshInterval)
	defer period.Stop()
	var last time.Time
	for {
		select {
		case <-cl.refreshNow:
		case <-period.C:
		case <-cl.ctx.Done():
			return
		}
		if wait := cl.opts.refreshGap - time.Since(last); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-cl.ctx.Done():
				t.Stop()
				return
			}
		}
		last = time.Now()
		cl.refresh()
		period.Reset(cl.opts.refreshInterval)
	}
}

// refresh asks the cluster for its members' addresses and keeps the pool
// on them. Whatever fails (no connection, an old server, an answer that
// names nothing usable) leaves the pool as it is, to be tried again at
// the next occasion.
func (cl *Client) refresh() {
	ctx, cancel := context.WithTimeout(cl.ctx, refreshTimeout)
	defer cancel()
	addrs, err := cl.members(ctx)
	if err != nil {
		return
	}
	cl.useAddrs(addrs)
}

// useAddrs makes the pool's connections those of addrs (valid, without
// duplicates, not empty): connections to addresses still listed are
// kept, the others retired, the missing ones added.
func (cl *Client) useAddrs(addrs []string) {
	want := make(map[string]int) // connections still to find or make, per address
	for _, a := range connAddrs(addrs) {
		want[a]++
	}
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return
	}
	var keep, retire []*conn
	for _, c := range cl.conns {
		if want[c.addr] > 0 {
			want[c.addr]--
			keep = append(keep, c)
		} else {
			retire = append(retire, c)
		}
	}
	missing := 0
	for _, n := range want {
		missing += n
	}
	if len(retire) == 0 && missing == 0 {
		cl.mu.Unlock()
		return
	}
	cl.conns = keep
	for _, a := range connAddrs(addrs) {
		if want[a] > 0 {
			want[a]--
			cl.addConnLocked(a)
		}
	}
	if !cl.knownLocked(cl.preferred) {
		cl.preferred = ""
	}
	for _, c := range retire {
		cl.retiring[c] = true
	}
	cl.mu.Unlock()
	for _, c := range retire {
		c.retire()
	}
	cl.notifyChange()
}

// forgetRetired drops c, whose goroutine is ending, from the retired
// connections Close must close.
func (cl *Client) forgetRetired(c *conn) {
	cl.mu.Lock()
	delete(cl.retiring, c)
	cl.mu.Unlock()
}

// addrs returns the address of every connection in the pool, in order.
func (cl *Client) addrs() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	out := make([]string, len(cl.conns))
	for i, c := range cl.conns {
		out[i] = c.addr
	}
	return out
}
