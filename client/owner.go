package client

// Owners (protocol 1.1): every acquire names its owner, so that a retry of
// an acquire whose answer was lost (a connection that died after the server
// granted, a leader that died after the grant committed) gets its own grant
// back instead of queueing behind it until its lease runs out. The owner is
// made once per Acquire and is part of the request that every retry sends
// again.

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/baton-dev/baton/codec"
)

// Sizes of the owners the client makes.
const (
	// ownerRandomBytes is the random part of an owner: 128 bits, so that two
	// acquires never share an owner by chance, and a retry is the only way
	// to name an owner again.
	ownerRandomBytes = 16
	// ownerRandomLen is the random part in hex.
	ownerRandomLen = 2 * ownerRandomBytes
)

// MaxOwnerPrefix is the longest prefix WithOwnerPrefix accepts, in bytes:
// what the protocol's limit on an owner (64 bytes) leaves beside the 32 hex
// digits of the random part.
const MaxOwnerPrefix = codec.MaxOwner - ownerRandomLen

// WithOwnerPrefix puts prefix in front of the random part of the owner
// that every acquire of the client names, so that a query shows who holds
// a lock: the host name and process id, say "web-3:4121:". The owner is
// prefix followed by 32 random hex digits with nothing between them, so
// end prefix with a separator. prefix may be at most MaxOwnerPrefix
// bytes, none of them a space, a control character or DEL; New rejects
// any other.
func WithOwnerPrefix(prefix string) Option {
	return func(o *options) {
		o.ownerPrefix = prefix
	}
}

// checkOwnerPrefix is New's check of WithOwnerPrefix.
func checkOwnerPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxOwnerPrefix || !codec.ValidOwner([]byte(prefix)) {
		return argError("bad owner prefix %q: want at most %d bytes, none of them a space, a control character or DEL", prefix, MaxOwnerPrefix)
	}
	return nil
}

// newOwner returns a fresh owner: prefix and 128 random bits in hex. It is
// the one allocation owners add to an acquire; the random bytes stay on
// the stack.
func newOwner(prefix string) []byte {
	var rnd [ownerRandomBytes]byte
	// crypto/rand.Read never fails: it crashes the program instead when the
	// system has no randomness to give.
	_, _ = rand.Read(rnd[:])
	owner := make([]byte, len(prefix)+ownerRandomLen)
	n := copy(owner, prefix)
	hex.Encode(owner[n:], rnd[:])
	return owner
}

// AcquireOption configures one Acquire (or TryAcquire).
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	owner    string // WithOwner
	ownerSet bool   // WithOwner was given: owner is the caller's, not a fresh one
}

// WithOwner makes an acquire name owner instead of a fresh random owner of
// its own. owner is 1 to 64 bytes (codec.MaxOwner), none of them a space,
// a control character or DEL; Acquire rejects any other.
//
// An owner names one holder. Acquire with the owner of the grant that
// holds the key now returns that grant (same token) instead of waiting
// for it: so a process that remembers its owner across a crash can take
// its lock back, and two processes (or goroutines) that use one owner
// share the lock, each believing it holds it alone. Give every holder an
// owner of its own, and reuse one only to retry that same holder's
// acquire; the client's random owners need none of this care.
//
// Since the grant may be older than the call, Acquire with WithOwner
// renews its lease before it returns (one more round trip: an extend to
// lease from then), so that the Lock's lease is known, as for a new grant.
// When the grant ran out before the renewal, Acquire asks for the lock
// again (a new acquire, since the owner names nothing then); when the
// renewal fails otherwise, Acquire releases the grant and returns the
// error, as it does for any grant it cannot hand over.
func WithOwner(owner string) AcquireOption {
	return func(o *acquireOptions) {
		o.owner, o.ownerSet = owner, true
	}
}

// checkOwner validates the owner of WithOwner.
func checkOwner(owner []byte) error {
	if !codec.ValidOwner(owner) {
		return argError("bad owner %q: want 1 to %d bytes, none of them a space, a control character or DEL", owner, codec.MaxOwner)
	}
	return nil
}

// acquireOwner returns the owner an acquire with opts names, and whether
// it is the caller's (WithOwner) rather than a fresh one.
func (cl *Client) acquireOwner(opts []AcquireOption) (owner []byte, explicit bool, err error) {
	if len(opts) == 0 {
		// The usual case, kept apart: the options below live on the heap
		// (the compiler cannot see what an option does with them).
		return newOwner(cl.opts.ownerPrefix), false, nil
	}
	var ao acquireOptions
	for _, opt := range opts {
		opt(&ao)
	}
	if !ao.ownerSet {
		return newOwner(cl.opts.ownerPrefix), false, nil
	}
	owner = []byte(ao.owner)
	if err := checkOwner(owner); err != nil {
		return nil, false, err
	}
	return owner, true, nil
}
