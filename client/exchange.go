package client

// The request loop: one request, sent until it gets an answer on whichever
// connection the pool picks, following MOVED and retrying failures as its
// policy says. A connection's own part of an exchange (queueing the bytes,
// pairing each answer with its call) is in conn.go and pending.go.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/baton-dev/baton/codec"
)

const (
	// movedHops is how many MOVED answers in a row a request follows at once;
	// beyond that leadership is changing hands, and it backs off.
	movedHops = 3
	// Backoff between retries of ERR unavailable: doubling, with jitter,
	// up to a quarter of a second. An election takes a few hundred
	// milliseconds (tools/bench-gap.sh): a longer pause would land well
	// after it more often than not (up to a second was a 1.2 s gap at a
	// kill -9 of the leader in about a third of the rounds, 0.4 s in the
	// others); a request every 250 ms costs a node that knows no leader
	// little to answer.
	backoffMin = 25 * time.Millisecond
	backoffMax = 250 * time.Millisecond
	// versionWindow is how long an S answered "ERR unavailable" because
	// the cluster's version is below shared holds' (4) is retried, from the
	// first such answer: the version is raised shard by shard, within
	// about a second of each other, so a request that races the raise
	// gets its hold; beyond that the cluster is not there yet (a member
	// still runs an older build), and waiting, possibly for ever, for an
	// upgrade is not what an acquire's wait is for.
	versionWindow = 5 * time.Second
)

// policy is how a request is retried.
type policy struct {
	// prepare, when set, fills in the request before each attempt (acquire
	// recomputes its wait) and may end the request with an error.
	prepare func(req *codec.Request) error
	// steady, when positive, replaces the fail-fast rules: every failure
	// (no connection, a lost connection, ERR unavailable or overloaded) is
	// retried this long after, until the context ends.
	steady time.Duration
	// once forbids sending the request again after it may have taken
	// effect: for a release without a token, which would free the next
	// holder, and for a membership change.
	once bool
	// window, when positive, bounds how long after the first attempt ERR
	// unavailable and a MOVED to a node that cannot be reached are
	// retried, once or not: for a membership request, whose ERR
	// unavailable says that nothing was done (no member coordinates
	// changes right now), and which is better refused than kept waiting.
	window time.Duration
	// versionWindow, when positive, bounds how long an ERR unavailable
	// that says the cluster's version is too low for the request (see
	// versionRefusal) is retried, from the first such answer; then it is
	// returned, matching ErrUnsupported. Zero: retried as any other.
	versionWindow time.Duration
}

// versionRefusal reports whether se is the server saying that the
// cluster's version is below what the request needs ("shared holds need
// cluster version 4 ...").
func versionRefusal(se *ServerError) bool {
	return se.Code == codec.CodeUnavailable && strings.Contains(se.Text, "cluster version")
}

// answer is the outcome of a request.
type answer struct {
	status      codec.Status
	token       uint64
	remainingMs uint64
	owner       string // Q HELD: the holder's owner, "" when it has none
	holders     uint64 // Q SHARED
	permits     uint64 // Q SHARED
	value       string // C and M OK: the rest of the line
	// ambiguous: an earlier attempt may have taken effect on the server (its
	// connection failed before the answer, or it got ERR unavailable, which
	// covers "not committed in time").
	ambiguous bool
}

// exchange sends req until it gets an answer other than MOVED and the
// errors the policy retries. Every attempt sends the same req (prepare may
// change its wait, nothing else): an acquire's owner is the same on every
// connection it tries, which is what lets the server recognize a retry.
// The error is the last failure when the context ends first.
func (cl *Client) exchange(ctx context.Context, req *codec.Request, key string, p policy) (answer, error) {
	var (
		ans     answer
		lastErr error
		target  string // where MOVED told us to go
		avoid   string // the node that last answered ERR unavailable
		drops   int
		hops    int
		backoff = backoffMin
		start   = time.Now()
		refused time.Time // the first versionRefusal answer
	)
	// windowOver: p.window has passed since the first attempt.
	windowOver := func() bool { return p.window > 0 && time.Since(start) > p.window }
	// pause sleeps before a retry: p.steady, or the growing backoff.
	pause := func() error {
		d := p.steady
		if d <= 0 {
			d = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, backoffMax)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-cl.ctx.Done():
			return ErrClosed
		}
	}
	fail := func(err error) (answer, error) {
		// The context, or an acquire's wait (prepare's ErrTimeout), ended
		// while a failure was being retried: say what that failure was.
		if lastErr != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout)) {
			err = &gaveUpError{ctxErr: err, last: lastErr}
		}
		return ans, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		c, err := cl.pick(ctx, target, avoid)
		target, avoid = "", ""
		if err != nil {
			switch {
			case errors.Is(err, ErrClosed), errors.Is(err, ErrAuth), ctx.Err() != nil:
				return fail(err)
			case errors.Is(err, errTargetDown):
				// Leadership moved to a node we cannot reach (yet): as good
				// as no leader.
				if windowOver() {
					return fail(fmt.Errorf("%w: %w (after %v)", ErrUnavailable, err, p.window))
				}
				lastErr = err
			case p.steady > 0:
				lastErr = err
			default:
				return fail(err)
			}
			if err := pause(); err != nil {
				return fail(err)
			}
			continue
		}

		// After pick, which may have waited for a dial: a wait computed from
		// the time left must be computed now.
		if p.prepare != nil {
			if err := p.prepare(req); err != nil {
				return fail(err)
			}
		}
		cll := newCall(req.Op, key)
		if err := c.send(cll, req); err != nil {
			// It went down between pick and send; nothing was sent, and
			// pick will not choose it again until it is back.
			lastErr = err
			continue
		}
		select {
		case <-cll.done:
		case <-ctx.Done():
			if cll.abandon() {
				return fail(ctx.Err())
			}
			<-cll.done
		}

		if cll.err != nil {
			if errors.Is(cll.err, ErrClosed) {
				return fail(ErrClosed)
			}
			var bad *badAnswerError
			if errors.As(cll.err, &bad) {
				return fail(bad)
			}
			var dropped *droppedError
			if errors.As(cll.err, &dropped) && errors.Is(dropped.err, ErrAuth) {
				return fail(dropped.err) // the server served nothing of it
			}
			lastErr = cll.err
			ans.ambiguous = true
			if p.once {
				return fail(fmt.Errorf("%w: %w (the request may or may not have taken effect)", ErrUnavailable, cll.err))
			}
			drops++
			if p.steady > 0 {
				if err := pause(); err != nil {
					return fail(err)
				}
			} else if drops >= cl.connCount() {
				return fail(fmt.Errorf("%w: %w", ErrUnavailable, cll.err))
			}
			continue
		}

		switch cll.status {
		case codec.StatusMoved:
			lastErr = fmt.Errorf("MOVED %s", cll.addr)
			target = cll.addr
			cl.prefer(cll.addr)
			hops++
			if hops > movedHops {
				if err := pause(); err != nil {
					return fail(err)
				}
			}
			continue
		case codec.StatusErr:
			se := &ServerError{Code: cll.code, Text: cll.text}
			if cll.unread {
				return fail(fmt.Errorf("%w: %w", ErrUnsupported, se))
			}
			retry := (se.Code == codec.CodeUnavailable && (!p.once || p.window > 0) && !windowOver()) ||
				(se.Code == codec.CodeOverloaded && p.steady > 0)
			if !retry {
				return fail(se)
			}
			if p.versionWindow > 0 && versionRefusal(se) {
				// A refusal: nothing was granted, so it leaves
				// ambiguous as it was.
				if refused.IsZero() {
					refused = time.Now()
				}
				lastErr = fmt.Errorf("%w: %w", ErrUnsupported, se)
				if time.Since(refused) >= p.versionWindow {
					return fail(lastErr)
				}
				avoid = c.addr
				if err := pause(); err != nil {
					return fail(err)
				}
				continue
			}
			lastErr = se
			ans.ambiguous = true
			if se.Code == codec.CodeUnavailable {
				// That node knows no leader (it may be cut off from the
				// others, who elected one meanwhile): ask another, which
				// answers or sends us on with MOVED.
				avoid = c.addr
			}
			if err := pause(); err != nil {
				return fail(err)
			}
			continue
		}
		ans.status, ans.token, ans.remainingMs, ans.owner, ans.value = cll.status, cll.token, cll.remainingMs, cll.owner, cll.value
		ans.holders, ans.permits = cll.holders, cll.permits
		return ans, nil
	}
}
