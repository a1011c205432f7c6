package client

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/baton-dev/baton/codec"
)

// A watch (protocol 1.4, W and U) has a connection of its own: its lines
// come for as long as it lasts, one per change, which the pairing of one
// answer per request on the client's shared connections (pending.go) has
// no place for, and a watcher that reads slowly must not hold back the
// answers of everyone else's requests.

// Backoff of a watch that lost its node: the first pause, and the longest.
const (
	watchRetryFirst = 50 * time.Millisecond
	watchRetryMax   = time.Second
)

// watchSilence is how long a watch's connection may stay silent before
// the watch asks its node whether it is still there (a query of
// HeartbeatKey), and then how long the node has to answer before the
// watch counts the connection as lost and starts again elsewhere: a node
// that was paused or cut off sends nothing, and would leave the watch
// silent until TCP gives up.
var watchSilence = 5 * time.Second

// Watch watches the holders of key (protocol 1.4). The channel gets the
// key's committed state at once, then its state after each commit that
// changes its holders, in commit order: every grant's token appears (in
// a state with Held), and a state that is not Held each time a commit
// leaves the key free. An extend is not a change.
//
// The watch runs on the node that leads the key, on a connection of its
// own. When that node stops leading the key (MOVED) or the connection is
// lost, the watch is started again, on the leader, and goes on with the
// state it finds there: the changes in between are folded into that
// state, which comes whether or not it differs from the last one sent.
// While no node can be reached it retries, with a backoff up to a second,
// and sends nothing.
//
// The channel is closed when ctx ends (the watch is then ended on the
// server with U), when the client is closed, or when a server refuses
// the client's secret. Its buffer is small: a consumer that does not keep
// up holds the watch's connection back, and the server cuts such a
// connection off (its --max-unsent-per-conn), after which the watch is
// started again with the state then.
func (cl *Client) Watch(ctx context.Context, key string) (<-chan State, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	ch := make(chan State, 16)
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return nil, ErrClosed
	}
	cl.wg.Add(1)
	cl.mu.Unlock()
	go func() {
		defer cl.wg.Done()
		defer close(ch)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-cl.ctx.Done(): // Close
				cancel()
			case <-ctx.Done():
			}
		}()
		cl.watch(ctx, key, ch)
	}()
	return ch, nil
}

// watch runs a watch until ctx ends or a server refuses the secret.
func (cl *Client) watch(ctx context.Context, key string, ch chan<- State) {
	pause := watchRetryFirst
	var to string // a node named by MOVED
	for turn := 0; ctx.Err() == nil; turn++ {
		addr := to
		if addr == "" {
			addr = cl.watchAddr(turn)
		}
		moved, served, err := cl.watchOn(ctx, addr, key, ch)
		switch {
		case errors.Is(err, ErrAuth):
			return
		case moved != "":
			to, pause = moved, watchRetryFirst
			continue
		case served:
			pause = watchRetryFirst
		}
		to = ""
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, watchRetryMax)
	}
}

// watchAddr is the node a watch tries on its turn-th try without a MOVED
// to follow: the node that last said it leads, then each address of the
// client's in turn.
func (cl *Client) watchAddr(turn int) string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if turn == 0 && cl.preferred != "" {
		return cl.preferred
	}
	return cl.conns[turn%len(cl.conns)].addr
}

// watchOn watches key on the node at addr until the watch ends there: it
// returns the node MOVED names, whether the node sent any state, and why
// it ended.
func (cl *Client) watchOn(ctx context.Context, addr, key string, ch chan<- State) (moved string, served bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, cl.opts.dialTimeout)
	nc, err := cl.opts.dial(dctx, addr)
	if err == nil {
		lr := codec.NewLineReader(4096)
		if nc, err = cl.open(dctx, nc, addr, lr); err == nil {
			cancel()
			return cl.watchConn(ctx, nc, lr, key, ch)
		}
	}
	cancel()
	return "", false, err
}

// watchConn runs the watch on nc, a session open on its node (lr holds
// what was read after the hello), until it ends.
func (cl *Client) watchConn(ctx context.Context, nc net.Conn, lr *codec.LineReader, key string, ch chan<- State) (moved string, served bool, err error) {
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() {
		// Ends the watch on the server, then the read below.
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write(codec.AppendRequest(nil, &codec.Request{Op: codec.OpUnwatch, Key: []byte(key)}))
		_ = nc.SetReadDeadline(time.Now())
	})
	defer stop()
	if _, err := nc.Write(codec.AppendRequest(nil, &codec.Request{Op: codec.OpWatch, Key: []byte(key)})); err != nil {
		return "", false, err
	}
	var r codec.Response
	asked := false // a heartbeat was sent after a silence
	for {
		line, err := lr.Next()
		if err != nil {
			return "", served, err
		}
		if line == nil {
			_ = nc.SetReadDeadline(time.Now().Add(watchSilence))
			if ctx.Err() != nil {
				// The end's deadline (stop, above) may have come just
				// before the one set here, which would then keep this
				// read for watchSilence.
				return "", served, ctx.Err()
			}
			n, err := nc.Read(lr.Free())
			lr.Filled(n)
			var ne net.Error
			switch {
			case err == nil || n > 0:
				asked = false
			case ctx.Err() != nil:
				return "", served, ctx.Err()
			case errors.As(err, &ne) && ne.Timeout() && !asked:
				asked = true
				if _, err := nc.Write(codec.AppendRequest(nil, &codec.Request{Op: codec.OpQuery, Key: []byte(HeartbeatKey)})); err != nil {
					return "", served, err
				}
				continue
			}
			if err != nil {
				return "", served, err
			}
			continue
		}
		if err := codec.ParseResponse(line, &r); err != nil {
			return "", served, &badAnswerError{err}
		}
		if r.Op != codec.OpWatch || string(r.Key) != key {
			continue // U's OK, as the watch ends
		}
		switch r.Status {
		case codec.StatusMoved:
			return string(r.Addr), served, nil
		case codec.StatusErr:
			return "", served, &ServerError{Code: string(r.Code), Text: string(r.Text)}
		}
		served = true
		select {
		case ch <- stateOf(r.Status, r.Token, r.RemainingMs, string(r.Owner), r.Holders, r.Permits):
		case <-ctx.Done():
			return "", served, ctx.Err()
		}
	}
}
