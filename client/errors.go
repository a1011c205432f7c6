package client

import (
	"errors"
	"fmt"

	"github.com/baton-dev/baton/codec"
)

// Errors to test for with errors.Is. The client wraps them with the
// operation and the key, e.g. `baton: acquire orders/42: not granted in time`.
var (
	// ErrTimeout means an acquire was not granted in time: the server
	// answered TIMEOUT (the wait ran out, or a try-lock found the key
	// taken), or the context's deadline passed first. In the second case the
	// error also matches context.DeadlineExceeded. Either way nothing is
	// held.
	ErrTimeout = errors.New("not granted in time")

	// ErrNotHeld means the server answered NOTHELD: the lock with that token
	// no longer holds the key (it was released, or its lease ran out).
	ErrNotHeld = errors.New("not held")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("client closed")

	// ErrUnavailable means no server could be reached, or the cluster had no
	// leader for the key for as long as the client kept retrying. A
	// *ServerError with the code "unavailable" matches it too.
	ErrUnavailable = errors.New("unavailable")

	// ErrAuth means a server refused the client (protocol 1.2): the secret
	// of WithSecret is not the server's --auth-file, or the server wants
	// one and the client has none. Requests fail with it at once, without
	// retries: nothing sent before the server accepts the secret is served.
	ErrAuth = errors.New("refused: wrong or missing secret")

	// ErrLost is what Lock.Err reports once the lock is no longer held
	// without having been released: the server said NOTHELD, or the lease
	// ran out before the keep-alive could extend it, or the Client was
	// closed under a kept-alive lock.
	ErrLost = errors.New("lock lost")

	// ErrRefused means the cluster refused a membership change (protocol
	// 1.3, AddMember, RemoveMember, SetMemberPriority) and changed nothing:
	// it would cost the cluster its quorum, or another change is under way.
	// The error is a *ServerError whose Text says why.
	ErrRefused = errors.New("refused")

	// ErrUnsupported means the server does not serve the request: Members
	// and the membership methods need a server of protocol 1.3, and an
	// older one answers them "ERR badrequest"; AcquireShared needs a
	// server of protocol 1.4 and a cluster at version 4, and is refused
	// with "ERR badrequest" by an older server and with "ERR unavailable"
	// by a cluster that is not at version 4 yet. The error wraps that
	// *ServerError, whose Text says why.
	ErrUnsupported = errors.New("not supported by the server")
)

// ServerError is an `ERR <code> <text>` answer that the client does not
// retry by itself (see Client for what it does retry).
type ServerError struct {
	// Code is the one-word code: "badrequest", "unavailable", "overloaded",
	// "internal", "refused" (a membership change) or, from a newer server,
	// another word.
	Code string
	// Text is the server's explanation; it may be empty.
	Text string
}

func (e *ServerError) Error() string {
	if e.Text == "" {
		return "server error " + e.Code
	}
	return "server error " + e.Code + ": " + e.Text
}

// Is makes an "unavailable" answer match ErrUnavailable, and a "refused"
// one ErrRefused.
func (e *ServerError) Is(target error) bool {
	return target == ErrUnavailable && e.Code == codec.CodeUnavailable ||
		target == ErrRefused && e.Code == codec.CodeRefused
}

// opError names the operation and the key an error is about (no key for
// the requests about the cluster).
type opError struct {
	op  string
	key string
	err error
}

func (e *opError) Error() string {
	if e.key == "" {
		return "baton: " + e.op + ": " + e.err.Error()
	}
	return "baton: " + e.op + " " + e.key + ": " + e.err.Error()
}
func (e *opError) Unwrap() error { return e.err }

func opErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return &opError{op: op, key: key, err: err}
}

// argError is a bad argument, caught before anything is sent.
func argError(format string, a ...any) error {
	return fmt.Errorf("baton: "+format, a...)
}

// gaveUpError is a request whose context (or an acquire's wait) ended
// while it was being retried: it matches both the context's error (or
// ErrTimeout) and the last failure.
type gaveUpError struct {
	ctxErr error
	last   error
}

func (e *gaveUpError) Error() string {
	return e.ctxErr.Error() + " (last error: " + e.last.Error() + ")"
}
func (e *gaveUpError) Unwrap() []error { return []error{e.ctxErr, e.last} }
