package engine

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// limitKind names one of the Limits, in the order of Limits.limitFields.
type limitKind uint8

const (
	limitConns limitKind = iota
	limitWaitersPerConn
	limitWaitersPerKey
	limitWaiters
	limitPendingQueries
	limitProposalsInFlight
	limitPendingCommands
	limitUnsentPerConn
	limitUnsent
	limitWatchesPerConn
	limitWatches
	numLimits
)

// limitEffects says, per limit, what each hit counted in a log line did.
var limitEffects = [numLimits]string{
	limitConns:             "connections refused",
	limitWaitersPerConn:    "acquires answered ERR overloaded",
	limitWaitersPerKey:     "acquires answered ERR overloaded",
	limitWaiters:           "acquires answered ERR overloaded",
	limitPendingQueries:    "queries answered ERR overloaded",
	limitProposalsInFlight: "times commands had to wait for Raft",
	limitPendingCommands:   "requests answered ERR overloaded",
	limitUnsentPerConn:     "connections cut off",
	limitUnsent:            "connections cut off",
	limitWatchesPerConn:    "watches answered ERR overloaded",
	limitWatches:           "watches answered ERR overloaded",
}

const (
	// limitLogEvery is the least time between two lines about one limit.
	limitLogEvery = 10 * time.Second
	// limitLogPoll is how often the counts are looked at: how late the
	// first line about a limit may come.
	limitLogPoll = time.Second
)

// limitLog counts how often each limit is hit and logs the counts, at most
// one line per limit per limitLogEvery, so that a client hammering a limit
// cannot flood the log. A hit costs an atomic add and never writes the log
// itself: hits happen on event loops and under shard locks, and a slow
// log must not stall them. run writes the lines.
type limitLog struct {
	log    *slog.Logger
	limits Limits
	counts [numLimits]atomic.Int64
	// by: who hit the limit last (a client address), for limits that
	// connections hit.
	by [numLimits]atomic.Pointer[string]
	// loggedAt: when the last line about each limit was written; used by
	// flush only, which run calls from one goroutine.
	loggedAt [numLimits]time.Time
}

func newLimitLog(l Limits, log *slog.Logger) *limitLog {
	return &limitLog{log: log, limits: l}
}

// hit counts one hit of limit k.
func (l *limitLog) hit(k limitKind) { l.counts[k].Add(1) }

// hitBy counts one hit of limit k by the client at addr.
func (l *limitLog) hitBy(k limitKind, addr string) {
	l.by[k].Store(&addr)
	l.counts[k].Add(1)
}

// run writes the lines until stop is closed, then one last time for the
// hits not logged yet.
func (l *limitLog) run(stop <-chan struct{}) {
	t := time.NewTicker(limitLogPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			l.flush(time.Now(), true)
			return
		case now := <-t.C:
			l.flush(now, false)
		}
	}
}

// flush logs one line per limit hit since its last line, unless that line
// is less than limitLogEvery old (and final is false).
func (l *limitLog) flush(now time.Time, final bool) {
	fields := l.limits.limitFields()
	for k := range numLimits {
		if l.counts[k].Load() == 0 {
			continue
		}
		if last := l.loggedAt[k]; !final && !last.IsZero() && now.Sub(last) < limitLogEvery {
			continue
		}
		l.loggedAt[k] = now
		args := []any{"limit", fields[k].flag, "value", *fields[k].v,
			"count", l.counts[k].Swap(0), "what", limitEffects[k]}
		if by := l.by[k].Swap(nil); by != nil {
			args = append(args, "last_remote", *by)
		}
		l.log.Warn("limit hit", args...)
	}
}
