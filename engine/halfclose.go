package engine

import (
	"github.com/baton-dev/baton/codec"
	"github.com/valyala/bytebufferpool"
)

// The client's end of input. A client that pipes its requests in (printf
// ... | nc) half-closes the connection after the last one: its FIN says it
// sends nothing more, not that it stopped reading. So the end of a
// client's input does not end the connection: every request it sent is
// answered, waits included (an A that waits 5 s gets its OK or TIMEOUT
// then), and only then does the server close it. A connection that has
// nothing due is closed at once, as before.
//
// What TCP cannot tell is whether the client closed only its sending half
// or the whole connection (a process that exited, or called close()): both
// send the same FIN. The difference shows when the server writes to it: a
// closed end answers with a reset. Only that counts as a disconnect (as a
// reset or a failed write always did): its unanswered acquires are
// abandoned, and a grant that lands for one is released. A grant written
// after the client's FIN is provisional until the client's kernel has
// acknowledged it (connState.provisional): if the connection resets first,
// nobody read it, and it is released like any grant for nobody
// (Node.releaseProvisional). So the acquires of a client that closed the
// connection (rather than half-closed it) stay queued until their answer
// is written and reset: a grant for one costs a Grant and a Release, as a
// grant in flight at a disconnect always did.
//
// gnet closes a connection itself when it reads the end of its input (it
// calls OnClose, writes what it can of its outbound buffer without waiting,
// and closes the socket), and it has no option to keep a half-closed one.
// So OnClose hands such a connection over (server.handOver): it keeps a
// duplicate of the socket and serves the rest of the connection from
// goroutines of its own, as TLS connections are served (streamConn, with no
// reader). A TLS connection's reader meets the end of input itself
// (close_notify, or a FIN at a record boundary) and stops reading while its
// writer goes on.
//
// Half-closing needs the kernel's view of the socket (POLLRDHUP, SIOCOUTQ:
// peer_linux.go); elsewhere the end of input is a disconnect, as before.

// delivery is what became of the bytes written to a socket
// (socketDelivery).
type delivery uint8

const (
	deliveryPending delivery = iota // some are not acknowledged yet
	deliveryAcked                   // the peer's kernel acknowledged every one
	deliveryFailed                  // the connection reset (or fd is closed)
)

// provisionalGrant is a grant sent to a client after its FIN (see above),
// with its shard, to be released if the connection resets before the
// client's kernel acknowledged it.
type provisionalGrant struct {
	s     *shard
	key   string
	token uint64
}

// sendGrant answers w's acquire with the grant of token (its own, fresh
// when a Grant of it applied; its owner's found again otherwise). Sent
// after the client's FIN, a fresh grant that no other acquire of its owner
// shares is provisional: a reset before the client's kernel took it makes
// it a grant for nobody, released (as granted releases one whose client is
// gone when it lands). mu must be held.
func (s *shard) sendGrant(w *waiter, token uint64, fresh bool) {
	r := &codec.Response{Op: w.op(), Key: bytesOf(w.ks.key), Status: codec.StatusOK, Token: token}
	var g *provisionalGrant
	if fresh && !s.ownerWaitsElsewhere(w) {
		g = &provisionalGrant{s: s, key: w.ks.key, token: token}
	}
	w.cs.sendGrant(r, s.hold(), g)
}

// ownerWaitsElsewhere reports whether another acquire of w's owner waits
// for w's key: the grant is its too (grantSameOwner), so it is not
// released for w's connection alone. mu must be held.
func (s *shard) ownerWaitsElsewhere(w *waiter) bool {
	if w.owner == "" {
		return false
	}
	for z := w.ks.head; z != nil; z = z.next {
		if z != w && z.owner == w.owner && z.permits == w.permits && z.state == waitQueued {
			return true
		}
	}
	return false
}

// releaseProvisional releases grant g, sent to a client whose connection
// then reset, unless the key has moved on since (released, expired, taken
// by a retry of its owner: the token is not the holder's any more). Only
// the serving leader releases, as in granted.
func (s *shard) releaseProvisional(g provisionalGrant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return
	}
	ks := s.keys[g.key]
	if ks == nil {
		if _, held := s.table.Grant(bytesOf(g.key), g.token); !held {
			return
		}
		ks = s.addKey(bytesOf(g.key))
	}
	if _, held := s.grantSlot(ks, g.token); !held {
		s.forgetIfIdle(ks)
		return
	}
	if s.node.tracing {
		s.trace("grant for a client that reset: released", "key", ks.key, "token", g.token)
	}
	s.giveBack(ks, g.token)
	s.kickIfPending()
}

// endOfInput records that the client sends nothing more, after the
// requests served so far, and reports whether anything is still due to it
// (dueLocked). Only its reader calls it. From here on nothing is written
// to an event loop's socket directly (writeHeld): the socket changes hands
// (server.handOver) or closes.
func (cs *connState) endOfInput() (due bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.eof, cs.finSeen, cs.socketClear = true, true, false
	return cs.dueLocked()
}

// dueLocked reports whether a connection that is not cut off still owes
// its client something: an answer to a request, answers queued or under
// way, a provisional grant not confirmed yet, the lines of a watch (which
// only U, which a half-closed client cannot send, or the node ends). mu
// must be held.
func (cs *connState) dueLocked() bool {
	return !cs.closed && (cs.answered < cs.asked || cs.out != nil || cs.writing.Load() != 0 || len(cs.provisional) > 0 || len(cs.watches) > 0)
}

// drained reports whether a connection whose client's input ended has
// nothing due any more: it is to be closed.
func (cs *connState) drained() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.eof && !cs.dueLocked()
}

// afterFlush says, after a flush, how many provisional grants the socket
// has been handed (to be confirmed once the client's kernel acknowledged
// everything written), and whether the client's input has ended.
func (cs *connState) afterFlush() (toConfirm int, inputEnded bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.flushedGrants, cs.eof
}

// confirmProvisional forgets the first n provisional grants: the client's
// kernel acknowledged them.
func (cs *connState) confirmProvisional(n int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.provisional = append(cs.provisional[:0], cs.provisional[n:]...)
	cs.flushedGrants -= n
	if len(cs.provisional) == 0 {
		cs.provisional = nil
	}
}

// takeProvisional returns the provisional grants left, once the connection
// is closed: none of them is known to have reached the client.
func (cs *connState) takeProvisional() []provisionalGrant {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	gs := cs.provisional
	cs.provisional, cs.flushedGrants = nil, 0
	return gs
}

// releaseProvisional releases the grants that a connection that ended
// without confirming them was sent after its client's FIN (closeConn).
func (n *Node) releaseProvisional(cs *connState) {
	for _, g := range cs.takeProvisional() {
		g.s.releaseProvisional(g)
	}
}

// takeOver prepares cs, whose client's input ended on an event loop
// (endOfInput), to be written from now on by a writer of its own
// (streamConn): the answers the loop had not sent yet (leftover) are queued
// first, and its unsent bytes are counted as a TLS connection's are
// (queuedUnsent). It reports false when it was cut off meanwhile: the
// connection is to be closed as before.
func (cs *connState) takeOver(leftover []byte) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return false
	}
	if len(leftover) > 0 {
		b := bytebufferpool.Get()
		b.B = append(b.B, leftover...)
		if cs.out != nil {
			b.B = append(b.B, cs.out.B...)
			bytebufferpool.Put(cs.out)
		}
		cs.out = b
	}
	cs.flushBy = flushLoop // the new writer's first flush is on its way
	cs.queuedUnsent = true
	if limit, cut := cs.adm.unsent.settle(cs, cs.queuedLocked()); cut {
		cs.cutLocked(limit)
	}
	return true
}
