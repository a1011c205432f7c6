package chaos

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Builders for hand-made histories; times are in ms on the recorder's
// clock.

func msec(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// hGrant is an A answered OK with token tok.
func hGrant(conn int, key string, leaseMs uint32, call, ret int, tok uint64) Op {
	return Op{Conn: conn, Op: codec.OpAcquire, Key: key, LeaseMs: leaseMs, WaitMs: codec.WaitNone,
		Call: msec(call), Return: msec(ret), Answered: true, Status: codec.StatusOK, RespToken: tok}
}

// hTimeout is an A answered TIMEOUT.
func hTimeout(conn int, key string, waitMs int64, call, ret int) Op {
	return Op{Conn: conn, Op: codec.OpAcquire, Key: key, LeaseMs: 1000, WaitMs: waitMs,
		Call: msec(call), Return: msec(ret), Answered: true, Status: codec.StatusTimeout}
}

// hRelease is an R of tok (0: whoever holds) answered st.
func hRelease(conn int, key string, tok uint64, call, ret int, st codec.Status) Op {
	return Op{Conn: conn, Op: codec.OpRelease, Key: key, Token: tok,
		Call: msec(call), Return: msec(ret), Answered: true, Status: st}
}

// hExtend is a K of tok answered st.
func hExtend(conn int, key string, tok uint64, leaseMs uint32, call, ret int, st codec.Status) Op {
	return Op{Conn: conn, Op: codec.OpExtend, Key: key, Token: tok, LeaseMs: leaseMs,
		Call: msec(call), Return: msec(ret), Answered: true, Status: st}
}

// hFree is a Q answered FREE.
func hFree(conn int, key string, call, ret int) Op {
	return Op{Conn: conn, Op: codec.OpQuery, Key: key,
		Call: msec(call), Return: msec(ret), Answered: true, Status: codec.StatusFree}
}

// hHeld is a Q answered HELD tok.
func hHeld(conn int, key string, call, ret int, tok uint64) Op {
	return Op{Conn: conn, Op: codec.OpQuery, Key: key,
		Call: msec(call), Return: msec(ret), Answered: true, Status: codec.StatusHeld, RespToken: tok, RemainingMs: 1}
}

// hOwned gives o the owner it names: the request's owner for an A, the
// owner shown for a Q HELD.
func hOwned(o Op, owner string) Op {
	if o.Op == codec.OpQuery {
		o.RespOwner = owner
	} else {
		o.Owner = owner
	}
	return o
}

// hLost makes o unanswered: its connection failed at its Return.
func hLost(o Op) Op {
	o.Answered, o.Status, o.RespToken, o.RemainingMs, o.RespOwner = false, 0, 0, 0, ""
	return o
}

// hFailed makes o answered ERR code.
func hFailed(o Op, code string) Op {
	o.Status, o.RespToken, o.RemainingMs, o.RespOwner, o.Code = codec.StatusErr, 0, 0, "", code
	return o
}

// hMoved makes o answered MOVED.
func hMoved(o Op) Op {
	o.Status, o.RespToken, o.RemainingMs, o.RespOwner = codec.StatusMoved, 0, 0, ""
	return o
}

func TestOpOutcome(t *testing.T) {
	tests := []struct {
		name string
		op   Op
		want outcome
	}{
		{"A OK", hGrant(1, "k", 100, 0, 1, 1025), outcomeKnown},
		{"A TIMEOUT", hTimeout(1, "k", -1, 0, 1), outcomeKnown},
		{"A ERR", hFailed(hGrant(1, "k", 100, 0, 1, 1025), codec.CodeUnavailable), outcomeUnknown},
		{"A unanswered", hLost(hGrant(1, "k", 100, 0, 1, 1025)), outcomeUnknown},
		{"A MOVED", hMoved(hGrant(1, "k", 100, 0, 1, 1025)), outcomeNone},
		{"R NOTHELD", hRelease(1, "k", 5, 0, 1, codec.StatusNotHeld), outcomeKnown},
		{"K ERR", hFailed(hExtend(1, "k", 5, 10, 0, 1, codec.StatusOK), codec.CodeOverloaded), outcomeUnknown},
		{"Q HELD", hHeld(1, "k", 0, 1, 1025), outcomeKnown},
		{"Q FREE", hFree(1, "k", 0, 1), outcomeKnown},
		{"Q ERR", hFailed(hFree(1, "k", 0, 1), codec.CodeUnavailable), outcomeNone},
		{"Q unanswered", hLost(hFree(1, "k", 0, 1)), outcomeNone},
		{"Q MOVED", hMoved(hFree(1, "k", 0, 1)), outcomeNone},
	}
	for _, tt := range tests {
		if got := tt.op.outcome(); got != tt.want {
			t.Errorf("%s: outcome %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestOpString(t *testing.T) {
	tests := []struct {
		op   Op
		want string
	}{
		{hGrant(3, "k", 100, 1, 2, 1025), "conn 3 A k 100 -1 [1.000ms, 2.000ms] OK 1025"},
		{hRelease(1, "k", 0, 0, 1, codec.StatusNotHeld), "conn 1 R k [0.000ms, 1.000ms] NOTHELD"},
		{hHeld(2, "x/y", 5, 6, 2049), "conn 2 Q x/y [5.000ms, 6.000ms] HELD 2049 1"},
		{hFailed(hExtend(1, "k", 7, 50, 0, 1, codec.StatusOK), "unavailable"), "conn 1 K k 7 50 [0.000ms, 1.000ms] ERR unavailable"},
		{hLost(hRelease(1, "k", 9, 0, 1, codec.StatusOK)), "conn 1 R k 9 [0.000ms, 1.000ms] unanswered"},
		{hOwned(hGrant(1, "k", 100, 1, 2, 1025), "o1"), "conn 1 A k 100 -1 o1 [1.000ms, 2.000ms] OK 1025"},
		{hOwned(hHeld(2, "k", 5, 6, 1025), "o1"), "conn 2 Q k [5.000ms, 6.000ms] HELD 1025 1 o1"},
		{hLost(hOwned(hGrant(1, "k", 100, 1, 2, 0), "o1")), "conn 1 A k 100 -1 o1 [1.000ms, 2.000ms] unanswered"},
	}
	for _, tt := range tests {
		if got := tt.op.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
