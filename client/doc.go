// Package client is the Go client of baton, the distributed lock service.
//
// A Client is a small pool of persistent, pipelined connections to the
// servers of one cluster; create one per process and share it between
// goroutines. Acquire (or TryAcquire) returns a *Lock carrying a fencing
// token, which only grows for a key: pass it to whatever the lock protects
// so that a holder that stalled past its lease can be turned away.
//
//	c, err := client.New([]string{"10.0.0.1:7700", "10.0.0.2:7700", "10.0.0.3:7700"})
//	if err != nil { ... }
//	defer c.Close()
//
//	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
//	defer cancel()
//	lock, err := c.Acquire(ctx, "deploy/prod", 10*time.Second, client.WaitForever)
//	if errors.Is(err, client.ErrTimeout) { ... } // not granted within 30 s; nothing is held
//	if err != nil { ... }
//	defer lock.Release(context.Background())
//
//	lock.KeepAlive() // extend the 10 s lease every 3.3 s while the work runs
//	select {
//	case <-work(ctx, lock.Token()):
//	case <-lock.Done(): // lost: lock.Err() says why; stop touching the resource
//	}
//
// Durations are time.Durations; the wire carries milliseconds, and the
// client rounds up (a lease or wait of 1µs is 1 ms, never 0, which would
// mean "forever" for a wait). Leases run from 1 ms to 24 h, finite waits up
// to 24 h.
//
// Every acquire names an owner (protocol 1.1): a random 128-bit value,
// after the prefix set with WithOwnerPrefix (a host name and process id,
// say, so that Query shows who holds a lock), made once per Acquire and
// sent again by every retry of it. A retry whose first answer was lost
// with its connection or its leader thus gets its own grant back instead
// of queueing behind it for a lease. WithOwner names the owner of one
// acquire explicitly; an owner names one holder, and two that share one
// share the lock.
//
// AcquireShared (protocol 1.4) takes one of N shared holds of a key
// instead, each with its own token and Lock: a counting semaphore of N,
// or, beside Acquire for the writer, the readers' side of a fair
// read-write lock.
//
// Failures are retried where that is safe (see Client and Client.Release);
// what reaches the caller can be told apart with errors.Is (ErrTimeout,
// ErrNotHeld, ErrUnavailable, ErrClosed, context errors) and errors.As
// (*ServerError). Whenever Acquire returns an error, the caller holds
// nothing.
//
// A server started with --auth-file wants a shared secret: WithSecret
// makes the client send it (H, protocol 1.2) on every connection it opens,
// and a refusal is ErrAuth, not retried. WithTLS speaks TLS, to a server's
// --tls-listen address.
//
// The client follows a cluster whose members change (protocol 1.3): it
// asks the cluster for its members' client addresses (Members) when it
// connects, every RefreshInterval, when a connection is lost and when MOVED
// names a node it does not know, and keeps its connections to those, so a
// client made with the addresses of the first members keeps working after
// each of them has been replaced (see Client for the details, and
// WithFixedAddresses for a client behind a proxy). With a server from
// before protocol 1.3 it keeps the addresses it was given.
//
// An operator's program changes the membership with ListMembers,
// AddMember, RemoveMember and SetMemberPriority, over the same connections
// (TLS, the secret, MOVED to the member that coordinates changes); a change
// the cluster refuses matches ErrRefused, and a server too old for them
// ErrUnsupported. The command `baton member` is built on them.
//
// The protocol underneath is docs/protocol.md.
package client
