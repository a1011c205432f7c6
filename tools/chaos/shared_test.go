package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
)

// TestCheckShared: the shared checker passes histories a lock table with
// permits can give, and flags too many holders at once, an exclusive
// holder beside others, and queries that do not show what surely held the
// key.
func TestCheckShared(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	s := func(tok uint64, call, ret int, lease uint32) Op { // a shared grant
		return Op{Op: codec.OpShared, Key: "sem/a", Permits: SharedPermits, LeaseMs: lease, Call: ms(call), Return: ms(ret), Answered: true, Status: codec.StatusOK, RespToken: tok}
	}
	a := func(tok uint64, call, ret int, lease uint32) Op { // an exclusive grant
		return Op{Op: codec.OpAcquire, Key: "sem/a", LeaseMs: lease, Call: ms(call), Return: ms(ret), Answered: true, Status: codec.StatusOK, RespToken: tok}
	}
	r := func(tok uint64, call, ret int) Op {
		return Op{Op: codec.OpRelease, Key: "sem/a", Token: tok, Call: ms(call), Return: ms(ret), Answered: true, Status: codec.StatusOK}
	}
	q := func(call, ret int, st codec.Status, tok, holders uint64) Op {
		return Op{Op: codec.OpQuery, Key: "sem/a", Call: ms(call), Return: ms(ret), Answered: true, Status: st, RespToken: tok, RespHolders: holders, RespPermits: SharedPermits}
	}
	for _, tt := range []struct {
		name string
		h    []Op
		want string // a violation's text, "" for none
	}{
		{"two shared, then a writer after both released", []Op{
			s(1, 0, 5, 1000), s(2, 1, 6, 1000), q(10, 12, codec.StatusShared, 0, 2),
			r(1, 20, 22), r(2, 21, 23), a(3, 15, 30, 1000), q(40, 41, codec.StatusHeld, 3, 0),
		}, ""},
		{"a third shared hold at once", []Op{s(1, 0, 5, 1000), s(2, 1, 6, 1000), s(3, 2, 7, 1000)}, "3 shared grants (permits 2) held at once"},
		{"a writer beside a reader", []Op{s(1, 0, 5, 1000), a(2, 1, 6, 1000)}, "1 exclusive and 1 shared grants"},
		{"a lease that surely ran out ends the hold", []Op{s(1, 0, 5, 100), s(2, 1, 6, 100), s(3, 200, 205, 1000)}, ""},
		{"an extend keeps it", []Op{s(1, 0, 5, 100), s(2, 1, 6, 1000),
			{Op: codec.OpExtend, Key: "sem/a", Token: 1, LeaseMs: 1000, Call: ms(50), Return: ms(55), Answered: true, Status: codec.StatusOK},
			s(3, 200, 205, 1000)}, "3 shared grants"},
		{"an extend to a shorter lease ends the hold sooner", []Op{s(1, 0, 5, 1000), s(2, 1, 6, 1000),
			{Op: codec.OpExtend, Key: "sem/a", Token: 1, LeaseMs: 100, Call: ms(50), Return: ms(55), Answered: true, Status: codec.StatusOK},
			s(3, 200, 205, 1000)}, ""},
		{"an extend of unknown outcome may have shortened it", []Op{s(1, 0, 5, 1000), s(2, 1, 6, 1000),
			{Op: codec.OpExtend, Key: "sem/a", Token: 1, LeaseMs: 100, Call: ms(50), Return: ms(55)},
			s(3, 200, 205, 1000)}, ""},
		{"a query showing fewer than surely held", []Op{s(1, 0, 5, 1000), s(2, 1, 6, 1000), q(10, 12, codec.StatusShared, 0, 1)}, "while 2 shared grants surely held it"},
		{"FREE while held", []Op{s(1, 0, 5, 1000), q(10, 12, codec.StatusFree, 0, 0)}, "surely held it"},
		{"a shared token shown as HELD", []Op{s(1, 0, 5, 1000), r(1, 8, 9), q(10, 12, codec.StatusHeld, 1, 0)}, "shows a shared grant's token"},
		{"wrong permits", []Op{q(10, 12, codec.StatusShared, 0, 3)}, "the key's permits are 2"},
		{"other keys are not this checker's", []Op{
			{Op: codec.OpAcquire, Key: "k", LeaseMs: 1000, Answered: true, Status: codec.StatusOK, RespToken: 1},
			{Op: codec.OpAcquire, Key: "k", LeaseMs: 1000, Answered: true, Status: codec.StatusOK, RespToken: 2},
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := checkShared(tt.h)
			switch {
			case tt.want == "" && len(got) > 0:
				t.Fatalf("violations %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want) || !strings.HasPrefix(got[0], CheckerShared+": ")):
				t.Fatalf("violations %q, want one saying %q", got, tt.want)
			}
		})
	}
}
