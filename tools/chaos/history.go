package chaos

import (
	"strconv"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Op is one request as seen on the wire by the recorder.
type Op struct {
	Conn        int           // which recorded connection, 1-based in Wrap order
	Op          byte          // codec.OpAcquire, OpShared, OpRelease, OpExtend or OpQuery
	Key         string        // the request's key
	Permits     uint32        // S
	LeaseMs     uint32        // A, S, K
	WaitMs      int64         // A, S (codec.WaitNone = -1 try-lock, 0 forever)
	Token       uint64        // R (0: whoever holds), K
	Owner       string        // A, S: the owner it names (protocol 1.1); "" when none
	Call        time.Duration // since the recorder started: before the request's bytes were written
	Return      time.Duration // when its answer line was read, or when it became unknown
	Answered    bool          // false: no answer came (the connection failed first, or the run ended)
	Status      codec.Status  // the answer, when Answered
	RespToken   uint64        // A OK, S OK, Q HELD
	RemainingMs uint64        // Q HELD
	RespOwner   string        // Q HELD: the holder's owner, as shown; "" when the grant has none
	RespHolders uint64        // Q SHARED
	RespPermits uint64        // Q SHARED
	Code        string        // ERR code
}

// outcome is what an answer tells the checkers about a request's effect.
type outcome uint8

const (
	// outcomeKnown: the answer says exactly what happened.
	outcomeKnown outcome = iota
	// outcomeUnknown: the request may or may not have taken effect, now or
	// later: no answer, or ERR (an "unavailable" proposal may still
	// commit after the server gave up waiting for it).
	outcomeUnknown
	// outcomeNone: the request surely changed nothing that the model needs
	// to see: MOVED (the node did not serve it), or a query that was not
	// answered with the state (a query changes nothing either way).
	outcomeNone
)

// outcome classifies o's answer for the linearizability checker.
func (o *Op) outcome() outcome {
	switch {
	case o.Answered && o.Status == codec.StatusMoved:
		return outcomeNone
	case o.Op == codec.OpQuery:
		if o.Answered && (o.Status == codec.StatusHeld || o.Status == codec.StatusFree || o.Status == codec.StatusShared) {
			return outcomeKnown
		}
		return outcomeNone
	case !o.Answered || o.Status == codec.StatusErr:
		return outcomeUnknown
	}
	return outcomeKnown
}

// answerBound is how long o may stay unanswered before it counts as a hang:
// its own wait, for an acquire that waits a while, plus slack. ok is false
// for an acquire that waits forever, which may rightly never be answered.
func (o *Op) answerBound(slack time.Duration) (d time.Duration, ok bool) {
	if !o.isAcquire() {
		return slack, true
	}
	switch {
	case o.WaitMs == codec.WaitForever:
		return 0, false
	case o.WaitMs > 0:
		return time.Duration(o.WaitMs)*time.Millisecond + slack, true
	}
	return slack, true // a try-lock is answered at once
}

// String renders o as one line for violation reports: the connection, the
// request as it went on the wire, its interval in ms and its answer.
func (o *Op) String() string {
	b := make([]byte, 0, 96)
	b = append(b, "conn "...)
	b = strconv.AppendInt(b, int64(o.Conn), 10)
	b = append(b, ' ')
	b = appendRequest(b, o)
	b = append(b, " ["...)
	b = appendMs(b, o.Call)
	b = append(b, ", "...)
	b = appendMs(b, o.Return)
	b = append(b, "] "...)
	b = appendAnswer(b, o)
	return string(b)
}

// appendRequest appends o's request line, without its LF.
func appendRequest(b []byte, o *Op) []byte {
	req := codec.Request{Op: o.Op, Key: []byte(o.Key), Permits: o.Permits, LeaseMs: o.LeaseMs, WaitMs: o.WaitMs, Token: o.Token, Owner: []byte(o.Owner)}
	b = codec.AppendRequest(b, &req)
	return b[:len(b)-1]
}

// appendAnswer appends what came back for o: its answer's status and values,
// or "unanswered".
func appendAnswer(b []byte, o *Op) []byte {
	if !o.Answered {
		return append(b, "unanswered"...)
	}
	b = append(b, o.Status.String()...)
	switch {
	case o.Status == codec.StatusOK && o.isAcquire():
		b = append(b, ' ')
		b = strconv.AppendUint(b, o.RespToken, 10)
	case o.Status == codec.StatusShared:
		b = append(b, ' ')
		b = strconv.AppendUint(b, o.RespHolders, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, o.RespPermits, 10)
	case o.Status == codec.StatusHeld:
		b = append(b, ' ')
		b = strconv.AppendUint(b, o.RespToken, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, o.RemainingMs, 10)
		if o.RespOwner != "" {
			b = append(b, ' ')
			b = append(b, o.RespOwner...)
		}
	case o.Status == codec.StatusErr:
		b = append(b, ' ')
		b = append(b, o.Code...)
	}
	return b
}

// isAcquire reports whether o is an acquire: exclusive (A) or shared (S).
func (o *Op) isAcquire() bool { return o.Op == codec.OpAcquire || o.Op == codec.OpShared }

// isGrant reports whether o is an acquire answered OK.
func (o *Op) isGrant() bool { return o.isAcquire() && o.Answered && o.Status == codec.StatusOK }

// grantOwner is the owner o names for the grant of its token: the
// request's owner for an A answered OK, the owner shown for a Q HELD.
func (o *Op) grantOwner() string {
	if o.Op == codec.OpQuery {
		return o.RespOwner
	}
	return o.Owner
}

// appendMs appends d in milliseconds with three decimals: histories span
// minutes, and a microsecond is fine enough to see which of two events came
// first.
func appendMs(b []byte, d time.Duration) []byte {
	b = strconv.AppendFloat(b, float64(d)/float64(time.Millisecond), 'f', 3, 64)
	return append(b, "ms"...)
}
