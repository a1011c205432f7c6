package engine

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Answers a client has not taken yet are held in two places: the
// connection's own buffer (connState.out, and the flush under way), which
// the event loop empties into the socket at its next flush, and what the
// socket did not take, which gnet keeps in the connection's outbound
// buffer. A client that never reads makes the second grow with every
// request it sends, so both are bounded per connection (MaxUnsentPerConn:
// connState.unlockAndWake for the first, settle for the second), and the
// second over every connection (MaxUnsent). A TLS connection (any stream
// connection: stream.go) has no outbound buffer: what its socket has not
// taken is the write its writer goroutine has under way and, while that
// blocks on the client, the answers queued behind it; the ledger counts
// both (connState.queuedUnsent), settled under the connection's mutex as
// answers are queued and after each write.
//
// Past MaxUnsent the connections with the most unsent bytes are cut off.
// (Leaving their requests unread instead would not bound anything: gnet
// reads the socket all the same and keeps what the handler leaves in the
// connection's inbound buffer.) gnet's outbound buffer shrinks as the socket
// takes it, without telling the handler, and it can only be read on the
// connection's event loop; so the ledger knows each connection's count as
// of its last flush, which is never below the true one. To cut off, the
// sweeper picks the connections that had the most and has them look again
// (transport.recheck): each does on its own loop, and is cut off only if it still has that
// much and the node is still over the limit. (A TLS connection's count is
// exact, and it looks at once, off its writer, which may be blocked.)

// shedPause is how long the sweeper waits for the connections it woke
// before it looks at the sum again.
const shedPause = 20 * time.Millisecond

// unsentLedger keeps, for every connection, the bytes its socket has not
// taken.
type unsentLedger struct {
	perConn, total int64
	sum            atomic.Int64 // the counts of backlog
	// cutFrom: while the sum is over total, a connection with at least this
	// many unsent bytes is cut off when its loop next looks; 0 for none.
	cutFrom atomic.Int64
	kick    chan struct{} // wakes the sweeper: the sum went over total

	// mu is taken inside a connState's mu (a TLS connection's settle),
	// never the other way round.
	mu      sync.Mutex
	backlog map[*connState]int64 // connections with unsent bytes, by how many
}

func newUnsentLedger(l Limits) *unsentLedger {
	return &unsentLedger{
		perConn: int64(l.MaxUnsentPerConn),
		total:   int64(l.MaxUnsent),
		kick:    make(chan struct{}, 1),
		backlog: make(map[*connState]int64),
	}
}

// settle records that cs's socket has not taken unsent bytes (gnet holds
// them after a flush, or a TLS write has them under way), and says which
// limit, if any, cuts cs off. It runs on the one goroutine that writes cs's
// socket (its event loop), or under cs.mu (a TLS connection), or once the
// connection is closed (closeConn).
func (u *unsentLedger) settle(cs *connState, unsent int64) (limitKind, bool) {
	if d := unsent - cs.unsent; d != 0 {
		cs.unsent = unsent
		u.mu.Lock()
		if unsent == 0 {
			delete(u.backlog, cs)
		} else {
			u.backlog[cs] = unsent
		}
		u.mu.Unlock()
		if u.sum.Add(d) > u.total && d > 0 {
			select {
			case u.kick <- struct{}{}:
			default: // the sweeper is awake already
			}
		}
	}
	switch {
	case unsent > u.perConn:
		return limitUnsentPerConn, true
	case u.shedding(unsent):
		return limitUnsent, true
	}
	return 0, false
}

// shedding reports whether a connection with unsent bytes is one of those
// the sweeper cuts off while the node is over MaxUnsent.
func (u *unsentLedger) shedding(unsent int64) bool {
	if unsent == 0 || u.sum.Load() <= u.total {
		return false
	}
	from := u.cutFrom.Load()
	return from > 0 && unsent >= from
}

// stillShedding is shedding of cs's count as last settled; any goroutine
// may ask.
func (u *unsentLedger) stillShedding(cs *connState) bool {
	u.mu.Lock()
	unsent := u.backlog[cs]
	u.mu.Unlock()
	return u.shedding(unsent)
}

// forget drops a closed connection.
func (u *unsentLedger) forget(cs *connState) { u.settle(cs, 0) }

// runSweeper cuts the sum back under total whenever it goes over, until
// stop is closed.
func (u *unsentLedger) runSweeper(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-u.kick:
		}
		for u.sum.Load() > u.total && u.shed() {
			t.Reset(shedPause)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
		u.cutFrom.Store(0)
	}
}

// shed marks the connections with the most unsent bytes, as many as it
// takes to bring the sum under total, and has them look again, to be cut off. It
// reports whether it found any.
func (u *unsentLedger) shed() bool {
	type entry struct {
		cs     *connState
		unsent int64
	}
	u.mu.Lock()
	list := make([]entry, 0, len(u.backlog))
	for cs, n := range u.backlog {
		list = append(list, entry{cs, n})
	}
	u.mu.Unlock()
	slices.SortFunc(list, func(a, b entry) int { return cmp.Compare(b.unsent, a.unsent) }) // most first
	excess := u.sum.Load() - u.total
	n := 0
	for n < len(list) && excess > 0 {
		excess -= list[n].unsent
		n++
	}
	if n == 0 {
		return false
	}
	u.cutFrom.Store(list[n-1].unsent)
	for _, e := range list[:n] {
		e.cs.t.recheck()
	}
	return true
}
