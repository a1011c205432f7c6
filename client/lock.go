package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// keepAliveRetry is the pause between two extend attempts of a keep-alive
// that could not reach the cluster.
const keepAliveRetry = 200 * time.Millisecond

// Lock is one grant of a key, as returned by Acquire (the key's exclusive
// lock) or AcquireShared (one of its shared holds, with a token of its
// own). Its methods are safe for concurrent use.
//
// The client tracks the lease with its own clock, conservatively: from the
// moment the acquire (or the last extend) was sent, not from when the
// server granted it (or, when the grant may be older than that, from when
// Acquire renewed it; see Acquire). Done is closed when, as far as the
// client can tell, the lock is no longer held.
type Lock struct {
	cl    *Client
	key   string
	token uint64
	owner []byte // as sent; never changed, so Owner may read it without mu

	// Lock order: Lock.mu then Client.mu (KeepAlive); mu is never held
	// together with a conn.mu or another Lock's mu.
	mu       sync.Mutex
	lease    time.Duration // the lease asked for last, which the keep-alive renews
	expires  time.Time     // the lease's end by the client's clock
	done     chan struct{} // made on the first Done call or on the end
	timer    *time.Timer   // closes done when the lease runs out; made with done
	ended    bool
	err      error // why it ended; nil after Release
	released bool
	kaStop   context.CancelFunc // stops the keep-alive; nil when none runs
	kaDone   chan struct{}      // closed when the keep-alive goroutine has returned
}

// newLock is the Lock of a grant whose lease started no earlier than
// leaseFrom.
func newLock(cl *Client, key string, token uint64, owner []byte, lease time.Duration, leaseFrom time.Time) *Lock {
	return &Lock{cl: cl, key: key, token: token, owner: owner, lease: lease, expires: leaseFrom.Add(lease)}
}

// Key is the locked key.
func (l *Lock) Key() string { return l.key }

// Token is the grant's fencing token: greater than every token the key had
// before. Pass it to whatever the lock protects, and have that reject
// tokens older than the newest it has seen.
func (l *Lock) Token() uint64 { return l.token }

// Owner is the owner the acquire named: the client's random one (with the
// prefix of WithOwnerPrefix) or the one given with WithOwner. Query shows
// it for the holder, so a holder can tell its own grant in a query.
func (l *Lock) Owner() string { return string(l.owner) }

// Release releases the lock (sending its token, so that it can never free
// someone else's grant) and stops the keep-alive. It retries for up to
// ReleaseWindow when the cluster cannot be reached (see Client.Release),
// within ctx: after the context of the work was cancelled, release with a
// fresh one. It returns ErrNotHeld when the lock had already been lost; a
// second Release after a successful one returns nil.
func (l *Lock) Release(ctx context.Context) error {
	l.stopKeepAlive()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil
	}
	err := l.cl.Release(ctx, l.key, l.token)
	switch {
	case err == nil:
		l.mu.Lock()
		l.released = true
		l.endLocked(nil)
		l.mu.Unlock()
	case errors.Is(err, ErrNotHeld):
		l.lose(err)
	}
	return err
}

// Extend sets the lease to lease from now (1ms to MaxLease); a running
// keep-alive renews this new lease from then on. It returns ErrNotHeld when
// the lock was lost, which also closes Done.
func (l *Lock) Extend(ctx context.Context, lease time.Duration) error {
	return opErr("extend", l.key, l.extend(ctx, lease))
}

func (l *Lock) extend(ctx context.Context, lease time.Duration) error {
	sent := time.Now()
	err := l.cl.extend(ctx, l.key, l.token, lease)
	if errors.Is(err, ErrNotHeld) {
		l.lose(err)
		return err
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	if !l.ended {
		l.lease = lease
		l.expires = sent.Add(lease)
		if l.timer != nil {
			l.timer.Reset(time.Until(l.expires))
		}
	}
	l.mu.Unlock()
	return nil
}

// KeepAlive starts renewing the lease in the background: an extend (to the
// lease last asked for) a third of a lease after the previous one, retried
// until the lease would run out. When the lock is lost (the server answers
// NOTHELD, the lease runs out before an extend gets through, or the Client
// is closed), Done is closed and Err says why. Release stops it. Calling it
// again does nothing.
func (l *Lock) KeepAlive() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kaStop != nil || l.ended {
		return
	}
	l.cl.mu.Lock()
	defer l.cl.mu.Unlock()
	if l.cl.closed {
		return
	}
	ctx, cancel := context.WithCancel(l.cl.ctx)
	l.kaStop, l.kaDone = cancel, make(chan struct{})
	l.cl.wg.Add(1)
	go func() {
		defer l.cl.wg.Done()
		defer close(l.kaDone)
		l.keepAlive(ctx)
	}()
}

// stopKeepAlive stops the keep-alive, if one runs, and waits for it, so
// that no extend of it is sent after a release.
func (l *Lock) stopKeepAlive() {
	l.mu.Lock()
	stop, done := l.kaStop, l.kaDone
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func (l *Lock) keepAlive(ctx context.Context) {
	for {
		l.mu.Lock()
		if l.ended {
			l.mu.Unlock()
			return
		}
		lease, expires := l.lease, l.expires
		l.mu.Unlock()
		next := expires.Add(-lease).Add(max(lease/3, time.Millisecond))
		if !sleepUntil(ctx, next) {
			l.closedUnder(ctx)
			return
		}
		// Extend until it gets through or the lease runs out; each try is
		// bounded by the lease's end.
		for {
			actx, cancel := context.WithDeadline(ctx, expires)
			err := l.extend(actx, lease)
			cancel()
			if err == nil {
				break
			}
			switch {
			case ctx.Err() != nil:
				l.closedUnder(ctx)
				return
			case errors.Is(err, ErrNotHeld):
				return // extend marked it lost
			case !time.Now().Before(expires):
				l.lose(fmt.Errorf("lease ran out before it could be extended: %w", err))
				return
			}
			if !sleepUntil(ctx, time.Now().Add(keepAliveRetry)) {
				l.closedUnder(ctx)
				return
			}
		}
	}
}

// closedUnder records why a keep-alive stopped before the lock ended: when
// the client was closed, the lock can no longer be kept.
func (l *Lock) closedUnder(ctx context.Context) {
	if l.cl.ctx.Err() != nil {
		l.lose(ErrClosed)
	}
}

// sleepUntil waits until t or until ctx ends; it reports false for the
// latter.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Done returns a channel that is closed when the lock is no longer held as
// far as the client knows: it was released, the server answered NOTHELD,
// its lease ran out by the client's clock (use KeepAlive to keep it from
// running out), or the client was closed under a kept-alive lock.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.ended {
			close(l.done)
		} else {
			l.timer = time.AfterFunc(time.Until(l.expires), l.checkExpiry)
		}
	}
	return l.done
}

// checkExpiry runs when the lease should have run out; an extend may have
// moved the end since the timer was set.
func (l *Lock) checkExpiry() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if left := time.Until(l.expires); left > 0 {
		l.timer.Reset(left)
		return
	}
	l.endLocked(fmt.Errorf("%w: lease of %v ran out", ErrLost, l.lease))
}

// Err is nil while the lock is held and after a successful Release. Once
// Done is closed for any other reason, it returns an error matching ErrLost
// (and ErrNotHeld or ErrClosed when that was the cause).
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lose marks the lock lost because of cause.
func (l *Lock) lose(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(fmt.Errorf("%w: %w", ErrLost, cause))
}

// endLocked marks the lock ended with err (nil: released) and closes Done.
func (l *Lock) endLocked(err error) {
	if l.ended {
		return
	}
	l.ended = true
	l.err = err
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.done == nil {
		l.done = make(chan struct{})
	}
	close(l.done)
}
