package engine

import (
	"log/slog"
	"strconv"
	"sync/atomic"
)

// admission is what keeps clients within the node's Limits: the limits, the
// node-wide counts they bound, the texts of the ERR overloaded answers and
// the log of limits hit. Every connection of the node points at it.
type admission struct {
	limits  Limits
	conns   atomic.Int64 // client connections open
	waiters atomic.Int64 // unanswered acquires over every connection (connState.nwaiters)
	watches atomic.Int64 // watches over every connection (connState.watches)
	unsent  *unsentLedger
	hits    *limitLog

	// Texts of ERR overloaded that name a configured number.
	tooManyOnConn, tooManyForKey, tooManyOnNode string
	tooManyWatchesOnConn, tooManyWatchesOnNode  string
}

func newAdmission(l Limits, log *slog.Logger) *admission {
	onConn, onNode := watchLimitTexts(l)
	return &admission{
		tooManyWatchesOnConn: onConn,
		tooManyWatchesOnNode: onNode,
		limits:               l,
		unsent:               newUnsentLedger(l),
		hits:                 newLimitLog(l, log),
		tooManyOnConn:        "too many unanswered acquires on this connection (" + strconv.Itoa(l.MaxWaitersPerConn) + ")",
		tooManyForKey:        "too many acquires wait for this key (" + strconv.Itoa(l.MaxWaitersPerKey) + "), retry later",
		tooManyOnNode:        "too many acquires wait on this node (" + strconv.Itoa(l.MaxWaiters) + "), retry later",
	}
}

// admitConn counts a new connection in, or reports that it must be refused.
func (a *admission) admitConn() bool {
	if a.conns.Add(1) > int64(a.limits.MaxConns) {
		a.conns.Add(-1)
		return false
	}
	return true
}

// connClosed counts an admitted connection out.
func (a *admission) connClosed() { a.conns.Add(-1) }

// admitWaiter counts one more unanswered acquire on the node, or reports
// that MaxWaiters is reached.
func (a *admission) admitWaiter() bool {
	if a.waiters.Add(1) > int64(a.limits.MaxWaiters) {
		a.waiters.Add(-1)
		return false
	}
	return true
}

// waitersGone counts n unanswered acquires out.
func (a *admission) waitersGone(n int) { a.waiters.Add(-int64(n)) }

// admitWatch counts one more watch on the node, or reports that
// MaxWatches is reached.
func (a *admission) admitWatch() bool {
	if a.watches.Add(1) > int64(a.limits.MaxWatches) {
		a.watches.Add(-1)
		return false
	}
	return true
}

// watchesGone counts n watches out.
func (a *admission) watchesGone(n int) { a.watches.Add(-int64(n)) }
