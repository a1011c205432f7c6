package chaos

import (
	"strconv"
	"time"

	"github.com/baton-dev/baton/client"
)

// CallEvent is one client-level event of the workload: a call of the
// client API by a worker (or the prober), or a holder walking away without
// a release. It is what the workload saw, to set beside what the recorder
// saw on the wire (Op) when a run fails: the owner of a grant ties the
// worker's Acquire to the requests that carried it.
//
// It is kept small and flat, since a long run logs some 200,000 of them:
// the strings are the plan's key, a constant kind and outcome, and the
// owner the client made anyway.
type CallEvent struct {
	Call   time.Duration // on the recorder's clock: just before the call
	Return time.Duration // just after it returned (= Call for a skip-release)
	Lease  time.Duration // acquire, try, probe, extend: the lease asked for
	Wait   time.Duration // acquire: the wait asked for; try, probe: client.NoWait
	Token  uint64        // the grant's token: got (acquire, try, probe, a query's holder), extended or released
	Key    string
	Owner  string // acquire, try, probe: the granted Lock's owner; query: the holder's; "" when none
	Kind   string // acquire, try, probe, extend, release, stale-release, query, skip-release
	// Outcome is outcomeOf's name for the call's error ("ok", "timeout",
	// ...); "" for a skip-release, which is no call.
	Outcome string
	Worker  int // 1-based; 0 is the prober
}

// String renders e as one line of a failure's history file: the worker,
// the call and its arguments, its interval in ms (as Op.String) and its
// outcome.
func (e *CallEvent) String() string {
	b := make([]byte, 0, 128)
	b = append(b, 'w')
	b = strconv.AppendInt(b, int64(e.Worker), 10)
	b = append(b, ' ')
	b = append(b, e.Kind...)
	b = append(b, ' ')
	b = append(b, e.Key...)
	switch e.Kind {
	case "acquire", "try", "probe":
		b = append(b, " lease "...)
		b = appendMs(b, e.Lease)
		if e.Wait == client.NoWait {
			b = append(b, " nowait"...)
		} else {
			b = append(b, " wait "...)
			b = appendMs(b, e.Wait)
		}
	case "extend":
		b = append(b, " token "...)
		b = strconv.AppendUint(b, e.Token, 10)
		b = append(b, " lease "...)
		b = appendMs(b, e.Lease)
	case "release", "stale-release", "skip-release":
		b = append(b, " token "...)
		b = strconv.AppendUint(b, e.Token, 10)
	}
	b = append(b, " ["...)
	b = appendMs(b, e.Call)
	b = append(b, ", "...)
	b = appendMs(b, e.Return)
	b = append(b, ']')
	if e.Outcome != "" {
		b = append(b, " -> "...)
		b = append(b, e.Outcome...)
	}
	switch {
	case e.Kind == "query" && e.Outcome == "ok" && e.Token == 0:
		b = append(b, " free"...)
	case e.Kind == "query" && e.Outcome == "ok":
		b = append(b, " held "...)
		b = strconv.AppendUint(b, e.Token, 10)
	case e.Outcome == "ok" && (e.Kind == "acquire" || e.Kind == "try" || e.Kind == "probe"):
		b = append(b, " token "...)
		b = strconv.AppendUint(b, e.Token, 10)
	}
	if e.Owner != "" && e.Outcome == "ok" {
		b = append(b, " owner "...)
		b = append(b, e.Owner...)
	}
	return string(b)
}

// isGrant reports whether e is a call that got a grant (whose Token and
// Owner are then the grant's).
func (e *CallEvent) isGrant() bool {
	return e.Outcome == "ok" && (e.Kind == "acquire" || e.Kind == "try" || e.Kind == "probe")
}

// WriteEvent is one write the fenced Resource was offered, stamped under
// its lock on the recorder's clock, with the holder's sure interval at that
// moment and the register's state before it.
type WriteEvent struct {
	At        time.Duration // the stamp
	From      time.Duration // the holder's sure interval at At: [From, SureUntil)
	SureUntil time.Duration
	Token     uint64
	// Fence, FenceWorker and FenceAt are the highest token the register
	// had taken before this write, who wrote it and when (0, 0, 0 before
	// the first write of the key).
	Fence       uint64
	FenceWorker int
	FenceAt     time.Duration
	Key         string
	Worker      int
	Accepted    bool
}

// covered reports whether the holder's lease surely covered the write.
func (w *WriteEvent) covered() bool {
	return w.At >= w.From && w.At < w.SureUntil
}

// verdict names what the resource made of w.
func (w *WriteEvent) verdict() string {
	switch {
	case w.Accepted:
		return "accepted"
	case w.covered():
		return "REJECTED inside its sure interval (violation)"
	}
	return "rejected (its lease may have run out)"
}

// String renders w as one line of a failure's history file, times in ms.
func (w *WriteEvent) String() string {
	b := make([]byte, 0, 160)
	b = append(b, 'w')
	b = strconv.AppendInt(b, int64(w.Worker), 10)
	b = append(b, " write "...)
	b = append(b, w.Key...)
	b = append(b, " token "...)
	b = strconv.AppendUint(b, w.Token, 10)
	b = append(b, " at "...)
	b = appendMs(b, w.At)
	b = append(b, " sure ["...)
	b = appendMs(b, w.From)
	b = append(b, ", "...)
	b = appendMs(b, w.SureUntil)
	b = append(b, ") -> "...)
	b = append(b, w.verdict()...)
	if w.Fence != 0 {
		b = append(b, "; register had token "...)
		b = strconv.AppendUint(b, w.Fence, 10)
		b = append(b, " from w"...)
		b = strconv.AppendInt(b, int64(w.FenceWorker), 10)
		b = append(b, " at "...)
		b = appendMs(b, w.FenceAt)
	}
	return string(b)
}
