package client

// The Client's API: New and its options, Close, and the requests (Acquire,
// TryAcquire, Release, ForceRelease, Extend, Query). The connections it
// sends them on are in pool.go, the retry loop they share in exchange.go.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Timing of the client's background work and retries.
const (
	// DefaultDialTimeout bounds one dial; see WithDialTimeout.
	DefaultDialTimeout = 5 * time.Second
	// RedialInterval is how often a connection that is down is dialled again.
	RedialInterval = 3 * time.Second
	// ReleaseWindow is how long a release keeps trying, ReleaseRetryInterval
	// apart, when it cannot get an answer.
	ReleaseWindow = 5 * time.Second
	// ReleaseRetryInterval is the pause between two release attempts.
	ReleaseRetryInterval = 200 * time.Millisecond
	// RefreshInterval is how often the client refreshes its address list
	// from the cluster when nothing else made it do so (see Client).
	RefreshInterval = 30 * time.Second
)

// Limits of the values a request carries, as the protocol sets them.
const (
	// MaxLease is the longest lease.
	MaxLease = codec.MaxLeaseMs * time.Millisecond
	// MaxWait is the longest finite wait.
	MaxWait = codec.MaxWaitMs * time.Millisecond
	// MaxPermits is the largest permits of AcquireShared.
	MaxPermits = codec.MaxPermits
)

// Special waits of Acquire.
const (
	// WaitForever waits until the lock is granted (or the context ends).
	WaitForever time.Duration = 0
	// NoWait is a try-lock: granted at once or ErrTimeout. Any negative wait
	// means the same.
	NoWait time.Duration = -1
)

// Option configures a Client.
type Option func(*options)

type options struct {
	dialTimeout    time.Duration
	dial           func(ctx context.Context, addr string) (net.Conn, error)
	redialInterval time.Duration // RedialInterval; tests shorten it
	stallTimeout   time.Duration // WithStallTimeout; 0: off
	ownerPrefix    string        // WithOwnerPrefix
	tls            *tls.Config   // WithTLS; nil: plain TCP
	secret         string        // WithSecret; "": no H
	fixed          bool          // WithFixedAddresses: no address refresh
	// refreshInterval is RefreshInterval and refreshGap refreshGap
	// (refresh.go); tests shorten them.
	refreshInterval time.Duration
	refreshGap      time.Duration
	memberWindow    time.Duration // MemberWindow; tests shorten it
	versionWindow   time.Duration // versionWindow (exchange.go); tests shorten it
}

// WithDialTimeout bounds each dial (default DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.dialTimeout = d
		}
	}
}

// WithDialer makes the client open its connections with dial instead of a
// plain TCP dial: for a proxy, or fault injection in tests. dial must
// honour ctx, which carries the dial timeout. WithTLS and WithSecret apply
// on top of what dial returns.
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(o *options) {
		if dial != nil {
			o.dial = dial
		}
	}
}

// Client is a connection pool to a baton cluster. It is safe for use by many
// goroutines at once, and meant to be shared: create one per process.
//
// It keeps one connection to every address it was given (two when given a
// single address, so that one dropping does not interrupt service), sends
// requests round-robin over the connections that are up, and redials a
// connection that is down every RedialInterval in the background. Requests
// are pipelined: many callers share a connection, and each answer is paired
// with its request by the echoed op and key.
//
// The addresses given to New are where the client starts. It asks the
// cluster for its members' client addresses (C -, protocol 1.3) once it
// has connected, every RefreshInterval, whenever a connection is lost and
// whenever MOVED names a node it does not know, and from then on keeps
// one connection to each of those addresses instead: so a client keeps
// working while members are replaced one by one, until none of those it
// was started with is left. A connection to a node that left the list
// takes no new request and closes once the requests already sent on it
// have their answers. On a TLS client the cluster names its members' TLS
// addresses. An answer that names no address, or one that cannot be read,
// changes nothing, and a server from before protocol 1.3 (which answers
// C - with ERR badrequest) leaves the addresses as they were.
// WithFixedAddresses turns the refresh off.
//
// What a request does when something goes wrong:
//   - a connection that fails while the request waits for its answer: the
//     request is sent again on the next connection; the caller gets an error
//     (matching ErrUnavailable) only when as many connections as there are
//     have failed it, or none is up at all. A connection that stays open
//     but reads nothing at all, not even the answer to a heartbeat, for the
//     stall timeout (see WithStallTimeout) has failed too;
//   - MOVED: the request goes to the named node (dialled if it is new), and
//     that node becomes the preferred one for all requests;
//   - ERR unavailable: retried with a growing backoff (up to 250 ms)
//     until the context ends (an acquire's wait too: the error then
//     matches ErrTimeout and says what the last answer was), on another
//     node than the one that said it (a node cut off from the others
//     knows no leader while they have elected one); AcquireShared says
//     how it treats a cluster whose version is too low for it;
//   - any other ERR: returned as a *ServerError;
//   - a server that refuses the secret (see WithSecret): ErrAuth, at once.
//
// A retried acquire names the same owner as its first attempt (see
// Acquire), so that the server answers it with the grant an earlier
// attempt may have got. Release does more (see Release).
type Client struct {
	opts   options
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the client started

	// mu guards the pool below (pool.go). Lock order: Lock.mu then
	// Client.mu (Lock.KeepAlive takes mu while it holds its Lock's); mu is
	// never held together with a conn.mu.
	mu        sync.Mutex
	conns     []*conn
	preferred string        // the address of the node that last sent us MOVED to itself
	rr        uint32        // round-robin counter
	changed   chan struct{} // closed (and replaced) when a connection changes state
	closed    bool
	up        int            // sessions up, retired connections' included
	retiring  map[*conn]bool // retired connections whose goroutine still runs

	// refreshNow asks the refresh goroutine for a refresh (capacity 1);
	// nil with WithFixedAddresses, which makes asking a no-op.
	refreshNow chan struct{}
}

// New returns a client of the servers at addrs (host:port client
// addresses; duplicates are ignored). It does not wait for the
// connections: they are dialled in the background, and a request waits for
// a connection that is still being dialled. Close it when done.
func New(addrs []string, opts ...Option) (*Client, error) {
	o := options{dialTimeout: DefaultDialTimeout, redialInterval: RedialInterval, stallTimeout: DefaultStallTimeout,
		refreshInterval: RefreshInterval, refreshGap: refreshGap, memberWindow: MemberWindow,
		versionWindow: versionWindow}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkOwnerPrefix(o.ownerPrefix); err != nil {
		return nil, err
	}
	if err := checkSecret(o.secret); err != nil {
		return nil, err
	}
	if o.dial == nil {
		d := &net.Dialer{}
		o.dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	uniq, err := checkAddrs(addrs)
	if err != nil {
		return nil, argError("%v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &Client{opts: o, ctx: ctx, cancel: cancel, changed: make(chan struct{}), retiring: make(map[*conn]bool)}
	if !o.fixed {
		cl.refreshNow = make(chan struct{}, 1)
		cl.wg.Add(1)
		go cl.refreshLoop()
	}
	cl.mu.Lock() // the first connection to come up may start a refresh
	for _, a := range connAddrs(uniq) {
		cl.addConnLocked(a)
	}
	cl.mu.Unlock()
	return cl, nil
}

// checkAddrs validates a list of server addresses (host:port) and drops
// blanks and duplicates. It fails when none is left or there are more
// than the pool may hold.
func checkAddrs(addrs []string) ([]string, error) {
	var uniq []string
	seen := make(map[string]bool)
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" || seen[a] {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("bad server address %q: want host:port", a)
		}
		seen[a] = true
		uniq = append(uniq, a)
	}
	if len(uniq) == 0 {
		return nil, errors.New("no server address")
	}
	if len(uniq) > maxConns/2 {
		return nil, fmt.Errorf("%d server addresses: at most %d", len(uniq), maxConns/2)
	}
	return uniq, nil
}

// connAddrs is the address of each connection the pool keeps for the
// addresses uniq: one each, two to a lone one.
func connAddrs(uniq []string) []string {
	if len(uniq) == 1 {
		return []string{uniq[0], uniq[0]}
	}
	return uniq
}

// Close closes every connection and stops the background work. Requests
// under way fail with ErrClosed, and so does every later call. Locks stay
// held on the server until they are released (by another client) or their
// lease runs out; a kept-alive lock reports ErrLost. Close is idempotent.
func (cl *Client) Close() error {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return nil
	}
	cl.closed = true
	conns := append([]*conn(nil), cl.conns...)
	for c := range cl.retiring {
		conns = append(conns, c)
	}
	cl.mu.Unlock()
	cl.cancel()
	for _, c := range conns {
		c.drop()
	}
	cl.notifyChange()
	cl.wg.Wait()
	return nil
}

// checkKey validates a key before anything is sent.
func checkKey(key string) error {
	if !codec.ValidKey([]byte(key)) {
		return argError("bad key %q: want 1 to %d bytes, none of them a space, a control character or DEL", key, codec.MaxKey)
	}
	return nil
}

// leaseMs validates a lease and converts it to the wire's milliseconds,
// rounding up so that a sub-millisecond remainder is not lost.
func leaseMs(lease time.Duration) (uint32, error) {
	if lease <= 0 || lease > MaxLease {
		return 0, argError("bad lease %v: want 1ms to 24h", lease)
	}
	return uint32(ceilMs(lease)), nil
}

// ceilMs rounds d up to whole milliseconds, so that a short duration never
// becomes 0, which means something else on the wire.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Acquire asks for the lock on key with the given lease, waiting at most
// wait for it: WaitForever (0) waits until it is granted, NoWait (any
// negative wait) is a try-lock, anything else is rounded up to whole
// milliseconds and may be at most MaxWait. The lease (1ms to MaxLease)
// starts when the lock is granted.
//
// The context bounds the whole call. When it has a deadline, the wait sent
// to the server is the smaller of wait and the time left, so the server
// gives up when the caller does; a deadline that passes returns an error
// matching both ErrTimeout and context.DeadlineExceeded. Whenever Acquire
// returns an error the caller does not hold the lock: a grant that arrives
// after the caller gave up is released at once.
//
// Every call names an owner, a fresh random one (see WithOwnerPrefix)
// unless WithOwner gives it, which each retry sends again: when an answer
// is lost (a connection that fails after the server granted, a leader
// that dies after the grant committed), the retry gets that same grant
// back instead of waiting behind it until its lease runs out. Such a
// grant, which may be older than the retry, has its lease renewed (an
// extend) before Acquire returns it, so that the Lock's lease is known; one
// that ran out meanwhile is asked for again. Lock.Owner tells the owner,
// and Query shows it for the holder.
//
// Waiters are served first come, first served, per node: when a
// connection fails or leadership moves, the request joins the queue again
// at the back, unless its earlier attempt still waits there (the server
// has not noticed yet that the connection failed), whose place it takes.
func (cl *Client) Acquire(ctx context.Context, key string, lease, wait time.Duration, opts ...AcquireOption) (*Lock, error) {
	return cl.acquire(ctx, acquireOp{name: "acquire", op: codec.OpAcquire}, key, lease, wait, opts)
}

// AcquireShared asks for one of permits shared holds of key (S, protocol
// 1.4), with the given lease, waiting at most wait for it; it is Acquire
// in every other respect: the waits, the context, the owner and its
// retries, the clean-up of a grant that arrives after the caller gave up,
// and the *Lock it returns, whose Token, Release, Extend and KeepAlive
// are those of this one grant.
//
// A key is held, at any moment, by nobody, by one exclusive holder
// (Acquire) or by 1 to permits shared holders (AcquireShared), and one
// first come, first served queue per key holds both kinds: a shared hold
// is granted once fewer than permits shared holders and no exclusive one
// hold the key, an exclusive lock once nobody holds it, and nobody
// overtakes the head of the queue. So AcquireShared with permits N is a
// counting semaphore of N (at most N holders at once), and AcquireShared
// for readers (with a permits larger than the readers can ever be) beside
// Acquire for the writer is a fair read-write lock. permits is 1 to
// MaxPermits, and must be the same for every holder and waiter of the
// key: a permits that differs from theirs is refused with a *ServerError
// of code "badrequest", and so is an owner (WithOwner) that holds the key
// exclusively (release it first: no upgrade or downgrade in place).
//
// Every shared grant has a token of its own, greater than every token of
// the key before it, but several hold at once by design: a resource
// fenced by tokens can take a write only with a token at least as large
// as every one it has seen, and a read only with one larger than the last
// write's.
//
// The server must be at cluster version 4 (every member running a build
// with shared holds; baton status shows the version). Below it the server
// answers ERR unavailable with its reason, which AcquireShared retries as
// it retries any ERR unavailable (on another node, with backoff: the
// version is raised one shard at a time, within about a second of each
// other), but for no longer than 5 seconds, then returns it: an error
// matching ErrUnsupported and ErrUnavailable, a *ServerError whose Text
// is the server's reason. When the wait or the context ends first, the
// error (ErrTimeout, or the context's) matches and says the same. A server
// from before protocol 1.4, which cannot read S, makes an error matching
// ErrUnsupported at once.
func (cl *Client) AcquireShared(ctx context.Context, key string, permits int, lease, wait time.Duration, opts ...AcquireOption) (*Lock, error) {
	if permits < 1 || permits > MaxPermits {
		return nil, argError("bad permits %d: want 1 to %d", permits, MaxPermits)
	}
	return cl.acquire(ctx, acquireOp{name: "acquire-shared", op: codec.OpShared, permits: uint32(permits)}, key, lease, wait, opts)
}

// acquireOp is what an acquire asks for: an exclusive lock (A) or one of
// permits shared holds (S), and its name in errors.
type acquireOp struct {
	name    string
	op      byte
	permits uint32 // S only
}

// acquire is Acquire and AcquireShared: everything but the op and its
// permits is the same.
func (cl *Client) acquire(ctx context.Context, ao acquireOp, key string, lease, wait time.Duration, opts []AcquireOption) (*Lock, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	lms, err := leaseMs(lease)
	if err != nil {
		return nil, err
	}
	if wait > MaxWait {
		return nil, argError("bad wait %v: want at most 24h (or WaitForever, or NoWait)", wait)
	}
	owner, explicit, err := cl.acquireOwner(opts)
	if err != nil {
		return nil, err
	}
	var waitEnd time.Time // zero: forever
	if wait > 0 {
		waitEnd = time.Now().Add(wait)
	}
	var (
		ctxLimited bool      // the wait sent was cut short by ctx's deadline
		sentAt     time.Time // when the last attempt was prepared
	)
	prepare := func(req *codec.Request) error {
		sentAt = time.Now()
		if wait < 0 {
			req.WaitMs = codec.WaitNone
			return nil
		}
		end := waitEnd
		ctxLimited = false
		if d, ok := ctx.Deadline(); ok && (end.IsZero() || d.Before(end)) {
			end, ctxLimited = d, true
		}
		if end.IsZero() {
			req.WaitMs = codec.WaitForever
			return nil
		}
		left := end.Sub(sentAt)
		if left <= 0 {
			if ctxLimited {
				return fmt.Errorf("%w (%w)", ErrTimeout, context.DeadlineExceeded)
			}
			return ErrTimeout
		}
		req.WaitMs = min(ceilMs(left), codec.MaxWaitMs)
		return nil
	}
	// Built once: every retry in exchange sends this same request, owner
	// included.
	req := codec.Request{Op: ao.op, Key: []byte(key), Permits: ao.permits, LeaseMs: lms, Owner: owner}
	p := policy{prepare: prepare}
	if ao.op == codec.OpShared {
		p.versionWindow = cl.opts.versionWindow
	}
	// mayBeOld: the caller's owner may hold the key from before this call.
	mayBeOld := explicit
	for {
		ans, err := cl.exchange(ctx, &req, key, p)
		if err != nil {
			if ans.ambiguous {
				// An attempt may have been granted without its answer
				// reaching us (its connection failed, or its node gave up
				// waiting for the commit): nobody would release it.
				cl.cleanUpAcquire(&req)
			}
			return nil, opErr(ao.name, key, acquireError(err))
		}
		switch ans.status {
		case codec.StatusOK:
			if !mayBeOld && !ans.ambiguous {
				// Granted after the last attempt was sent: the lease
				// counts from then.
				return newLock(cl, key, ans.token, owner, lease, sentAt), nil
			}
			// The grant may be older than the last attempt: an earlier one
			// may have got it (the server answers a retry of the owner with
			// the owner's grant), or the caller's owner may have held the
			// key since before this call. Its lease started then, how long
			// ago nobody here knows, and its answer may even have come
			// after it ran out (held up on the connection behind another
			// acquire of the key). Renew it, so that the Lock's lease is
			// known.
			renewed := time.Now()
			err := cl.extend(ctx, key, ans.token, lease)
			switch {
			case err == nil:
				return newLock(cl, key, ans.token, owner, lease, renewed), nil
			case errors.Is(err, ErrNotHeld):
				// It ran out before it could be renewed. The owner names
				// nothing now, so asking again is a new acquire, whose
				// grant (unless a retry makes it doubtful again) needs no
				// renewal: were it renewed too, a lease shorter than a
				// round trip would never end this loop.
				mayBeOld = false
				continue
			}
			cl.releaseAbandoned(key, ans.token)
			return nil, opErr(ao.name, key, fmt.Errorf("renewing the lease of token %d: %w", ans.token, acquireError(err)))
		case codec.StatusTimeout:
			if ctxLimited {
				return nil, opErr(ao.name, key, fmt.Errorf("%w (%w)", ErrTimeout, context.DeadlineExceeded))
			}
			return nil, opErr(ao.name, key, ErrTimeout)
		}
		return nil, opErr(ao.name, key, fmt.Errorf("unexpected answer %s", ans.status))
	}
}

// acquireError makes a deadline that ended an acquire match ErrTimeout too.
func acquireError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w (%w)", ErrTimeout, err)
	}
	return err
}

// TryAcquire is Acquire with NoWait: it takes the lock if it is free, and
// returns ErrTimeout at once if it is not.
func (cl *Client) TryAcquire(ctx context.Context, key string, lease time.Duration, opts ...AcquireOption) (*Lock, error) {
	return cl.Acquire(ctx, key, lease, NoWait, opts...)
}

// Release releases the grant of key with the given token (Lock.Release is
// the usual way to call it). It returns ErrNotHeld when that grant no
// longer holds the key.
//
// A release that cannot get an answer (no connection, a connection lost,
// no leader) is sent again every ReleaseRetryInterval for up to
// ReleaseWindow, so that a lock is not left held until its lease runs out
// because of a short outage. A repeated release is harmless: it carries the
// token. When an earlier attempt may have gone through, a NOTHELD answer
// counts as success.
func (cl *Client) Release(ctx context.Context, key string, token uint64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if token == 0 {
		return argError("release %s: token 0 is not a token (ForceRelease releases whoever holds the key)", key)
	}
	return opErr("release", key, cl.release(ctx, key, token))
}

func (cl *Client) release(ctx context.Context, key string, token uint64) error {
	rctx, cancel := context.WithTimeout(ctx, ReleaseWindow)
	defer cancel()
	req := codec.Request{Op: codec.OpRelease, Key: []byte(key), Token: token}
	ans, err := cl.exchange(rctx, &req, key, policy{steady: ReleaseRetryInterval})
	if err != nil {
		if ctx.Err() == nil && rctx.Err() != nil {
			// Our window ran out, not the caller's context.
			var g *gaveUpError
			if errors.As(err, &g) {
				return fmt.Errorf("%w: no answer within %v (last error: %w)", ErrUnavailable, ReleaseWindow, g.last)
			}
			return fmt.Errorf("%w: no answer within %v", ErrUnavailable, ReleaseWindow)
		}
		return err
	}
	if ans.status == codec.StatusNotHeld && !ans.ambiguous {
		return ErrNotHeld
	}
	return nil
}

// cleanUpAcquire releases, in the background, the grant an acquire (A or
// S, acq) that gave up may hold unseen: a try-lock (the same request, not
// waiting) with the acquire's owner gets that grant back if there is one
// (or takes the key if it is free), and its token is released; retried
// as a release is, for ReleaseWindow.
func (cl *Client) cleanUpAcquire(acq *codec.Request) {
	req := *acq
	req.WaitMs = codec.WaitNone
	key := string(req.Key)
	cl.inBackground(func() {
		ctx, cancel := context.WithTimeout(cl.ctx, ReleaseWindow)
		defer cancel()
		if ans, err := cl.exchange(ctx, &req, key, policy{steady: ReleaseRetryInterval}); err == nil && ans.status == codec.StatusOK {
			_ = cl.release(cl.ctx, key, ans.token)
		}
	})
}

// releaseAbandoned releases, in the background, a grant whose caller gave
// up before it arrived.
func (cl *Client) releaseAbandoned(key string, token uint64) {
	cl.inBackground(func() { _ = cl.release(cl.ctx, key, token) })
}

// inBackground runs fn on a goroutine of the client's (Close waits for
// it), unless the client is closed.
func (cl *Client) inBackground(fn func()) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return
	}
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		fn()
	}()
}

// ForceRelease releases key whoever holds it (a release without a token),
// for operators clearing a lock left by a crashed holder. It returns
// ErrNotHeld when the key is free. Unlike Release it is never sent twice
// once it may have taken effect, since a second one would free the next
// holder: when the outcome is unknown it returns an error matching
// ErrUnavailable; Query tells what happened.
func (cl *Client) ForceRelease(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	req := codec.Request{Op: codec.OpRelease, Key: []byte(key)}
	ans, err := cl.exchange(ctx, &req, key, policy{once: true})
	if err != nil {
		return opErr("force-release", key, err)
	}
	if ans.status == codec.StatusNotHeld {
		return opErr("force-release", key, ErrNotHeld)
	}
	return nil
}

// Extend sets the lease of the grant of key with the given token to lease
// from now (Lock.Extend is the usual way to call it). It returns ErrNotHeld
// when that grant no longer holds the key.
func (cl *Client) Extend(ctx context.Context, key string, token uint64, lease time.Duration) error {
	return opErr("extend", key, cl.extend(ctx, key, token, lease))
}

func (cl *Client) extend(ctx context.Context, key string, token uint64, lease time.Duration) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if token == 0 {
		return argError("token 0 is not a token")
	}
	lms, err := leaseMs(lease)
	if err != nil {
		return err
	}
	req := codec.Request{Op: codec.OpExtend, Key: []byte(key), Token: token, LeaseMs: lms}
	ans, err := cl.exchange(ctx, &req, key, policy{})
	if err != nil {
		return err
	}
	if ans.status == codec.StatusNotHeld {
		return ErrNotHeld
	}
	return nil
}

// State is what Query and Watch report about a key.
type State struct {
	// Held is whether an exclusive grant (Acquire) holds the key.
	Held bool
	// Token is the holder's fencing token, when Held.
	Token uint64
	// Remaining is what is left of the holder's lease, rounded up to a
	// millisecond; 0 for a lease that has run out and whose expiry is being
	// committed.
	Remaining time.Duration
	// Owner is the owner the holder's acquire named (see Lock.Owner), when
	// Held; "" when the grant has none (its acquire came from a client of
	// protocol version 1).
	Owner string
	// Holders is how many grants hold the key: 0 when it is free, 1 when
	// Held, 1..Permits while shared holds (protocol 1.4) hold it.
	Holders int
	// Permits is 1 when Held, the key's permits while shared holds hold
	// it, 0 when it is free.
	Permits int
}

// Query returns the committed state of key: never older than what an
// earlier answered request changed.
func (cl *Client) Query(ctx context.Context, key string) (State, error) {
	if err := checkKey(key); err != nil {
		return State{}, err
	}
	req := codec.Request{Op: codec.OpQuery, Key: []byte(key)}
	ans, err := cl.exchange(ctx, &req, key, policy{})
	if err != nil {
		return State{}, opErr("query", key, err)
	}
	return stateOf(ans.status, ans.token, ans.remainingMs, ans.owner, ans.holders, ans.permits), nil
}

// stateOf is the State an answer of Q or a line of W says (HELD, SHARED
// or FREE), from its fields.
func stateOf(status codec.Status, token, remainingMs uint64, owner string, holders, permits uint64) State {
	switch status {
	case codec.StatusHeld:
		return State{Held: true, Token: token, Remaining: time.Duration(remainingMs) * time.Millisecond, Owner: owner, Holders: 1, Permits: 1}
	case codec.StatusShared:
		return State{Holders: int(holders), Permits: int(permits)}
	}
	return State{}
}
