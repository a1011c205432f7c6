package codec

import (
	"bytes"
	"testing"
)

func equalResponse(a, b *Response) bool {
	return a.Op == b.Op && bytes.Equal(a.Key, b.Key) && a.Status == b.Status &&
		a.Token == b.Token && a.RemainingMs == b.RemainingMs && bytes.Equal(a.Addr, b.Addr) &&
		bytes.Equal(a.Code, b.Code) && bytes.Equal(a.Text, b.Text) && bytes.Equal(a.Owner, b.Owner) &&
		bytes.Equal(a.Value, b.Value) && a.Holders == b.Holders && a.Permits == b.Permits
}

func b(s string) []byte { return []byte(s) }

func TestResponseRoundTrip(t *testing.T) {
	tests := []struct {
		r    Response
		line string
	}{
		{Response{Op: 'A', Key: b("orders/42"), Status: StatusOK, Token: 1234567}, "A orders/42 OK 1234567"},
		{Response{Op: 'A', Key: b("k"), Status: StatusOK, Token: 1<<64 - 1}, "A k OK 18446744073709551615"},
		{Response{Op: 'R', Key: b("k"), Status: StatusOK}, "R k OK"},
		{Response{Op: 'K', Key: b("k"), Status: StatusOK}, "K k OK"},
		{Response{Op: 'A', Key: b("k"), Status: StatusTimeout}, "A k TIMEOUT"},
		{Response{Op: 'R', Key: b("k"), Status: StatusNotHeld}, "R k NOTHELD"},
		{Response{Op: 'K', Key: b("k"), Status: StatusNotHeld}, "K k NOTHELD"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 17, RemainingMs: 9500}, "Q k HELD 17 9500"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 17, RemainingMs: 0}, "Q k HELD 17 0"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 17, RemainingMs: 9500, Owner: b("client-7")}, "Q k HELD 17 9500 client-7"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 1<<64 - 1, RemainingMs: 0, Owner: b(owner64)}, "Q k HELD 18446744073709551615 0 " + owner64},
		{Response{Op: 'Q', Key: b("ключ"), Status: StatusHeld, Token: 1, RemainingMs: 1, Owner: b(ownerUTF64)}, "Q ключ HELD 1 1 " + ownerUTF64},
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 1, RemainingMs: 1, Owner: b("3")}, "Q k HELD 1 1 3"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusFree}, "Q k FREE"},
		{Response{Op: 'A', Key: b("k"), Status: StatusMoved, Addr: b("127.0.0.1:7710")}, "A k MOVED 127.0.0.1:7710"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusMoved, Addr: b("[::1]:7700")}, "Q k MOVED [::1]:7700"},
		{Response{Op: 'K', Key: b("k"), Status: StatusErr, Code: b("unavailable")}, "K k ERR unavailable"},
		{Response{Op: 'A', Key: b("k"), Status: StatusErr, Code: b("badrequest"), Text: b("lease_ms must be 1..86400000")},
			"A k ERR badrequest lease_ms must be 1..86400000"},
		{Response{Op: '?', Key: b("-"), Status: StatusErr, Code: b("toolong"), Text: b("line longer than 1024 bytes")},
			"? - ERR toolong line longer than 1024 bytes"},
		{Response{Op: 'R', Key: b("ключ"), Status: StatusErr, Code: b("overloaded"), Text: b("a  b")}, "R ключ ERR overloaded a  b"},
		// Answers to H (protocol 1.2).
		{Response{Op: 'H', Key: b("-"), Status: StatusOK}, "H - OK"},
		{Response{Op: 'H', Key: b("-"), Status: StatusErr, Code: b("auth")}, "H - ERR auth"},
		{Response{Op: 'H', Key: b("-"), Status: StatusErr, Code: b("badrequest"), Text: b("missing secret")}, "H - ERR badrequest missing secret"},
		// Protocol 1.4: S answers as A; Q and W may be SHARED; W states
		// as Q's; U OK.
		{Response{Op: 'S', Key: b("jobs"), Status: StatusOK, Token: 33}, "S jobs OK 33"},
		{Response{Op: 'S', Key: b("jobs"), Status: StatusTimeout}, "S jobs TIMEOUT"},
		{Response{Op: 'S', Key: b("jobs"), Status: StatusMoved, Addr: b("127.0.0.1:7710")}, "S jobs MOVED 127.0.0.1:7710"},
		{Response{Op: 'Q', Key: b("jobs"), Status: StatusShared, Holders: 3, Permits: 4}, "Q jobs SHARED 3 4"},
		{Response{Op: 'W', Key: b("jobs"), Status: StatusShared, Holders: 1000000, Permits: 1000000}, "W jobs SHARED 1000000 1000000"},
		{Response{Op: 'W', Key: b("k"), Status: StatusHeld, Token: 17, RemainingMs: 9500, Owner: b("node-a")}, "W k HELD 17 9500 node-a"},
		{Response{Op: 'W', Key: b("k"), Status: StatusFree}, "W k FREE"},
		{Response{Op: 'W', Key: b("k"), Status: StatusMoved, Addr: b("127.0.0.1:7710")}, "W k MOVED 127.0.0.1:7710"},
		{Response{Op: 'W', Key: b("k"), Status: StatusErr, Code: b("overloaded"), Text: b("too many watches")}, "W k ERR overloaded too many watches"},
		{Response{Op: 'U', Key: b("k"), Status: StatusOK}, "U k OK"},
		// Answers to C and M (protocol 1.3): OK with the rest of the line.
		{Response{Op: 'C', Key: b("-"), Status: StatusOK, Value: b("127.0.0.1:7700,127.0.0.1:7710")}, "C - OK 127.0.0.1:7700,127.0.0.1:7710"},
		{Response{Op: 'M', Key: b("-"), Status: StatusOK}, "M - OK"},
		{Response{Op: 'M', Key: b("-"), Status: StatusOK, Value: b("1/voter/a:1/a:2/- 4/learner/b:1/b:2/b:3")}, "M - OK 1/voter/a:1/a:2/- 4/learner/b:1/b:2/b:3"},
		{Response{Op: 'M', Key: b("-"), Status: StatusMoved, Addr: b("127.0.0.1:7710")}, "M - MOVED 127.0.0.1:7710"},
		{Response{Op: 'M', Key: b("-"), Status: StatusErr, Code: b("refused"), Text: b("member 2 is the last voter")}, "M - ERR refused member 2 is the last voter"},
	}
	for _, tt := range tests {
		got := AppendResponse(nil, &tt.r)
		if string(got) != tt.line+"\n" {
			t.Errorf("AppendResponse(%+v) = %q, want %q", tt.r, got, tt.line+"\n")
		}
		r := Response{Op: 'Z', Key: b("stale"), Status: 99, Token: 9, RemainingMs: 9, Addr: b("x"), Code: b("x"), Text: b("x"), Owner: b("x")}
		if err := ParseResponse([]byte(tt.line), &r); err != nil || !equalResponse(&r, &tt.r) {
			t.Errorf("ParseResponse(%q) = %+v, %v; want %+v", tt.line, r, err, tt.r)
		}
		// No owner is nil, so a client can tell "none" without a length test.
		if tt.r.Owner == nil && r.Owner != nil {
			t.Errorf("ParseResponse(%q): Owner = %q, want nil", tt.line, r.Owner)
		}
	}
}

// TestAppendResponseOwner checks that the owner is written for HELD only,
// and only when there is one.
func TestAppendResponseOwner(t *testing.T) {
	tests := []struct {
		r    Response
		line string
	}{
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 5, RemainingMs: 10, Owner: b("o")}, "Q k HELD 5 10 o"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 5, RemainingMs: 10, Owner: b("")}, "Q k HELD 5 10"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 5, RemainingMs: 10}, "Q k HELD 5 10"},
		// An acquire's OK does not echo the owner: the client sent it.
		{Response{Op: 'A', Key: b("k"), Status: StatusOK, Token: 5, Owner: b("o")}, "A k OK 5"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusFree, Owner: b("o")}, "Q k FREE"},
		{Response{Op: 'A', Key: b("k"), Status: StatusTimeout, Owner: b("o")}, "A k TIMEOUT"},
		{Response{Op: 'Q', Key: b("k"), Status: StatusMoved, Addr: b("h:1"), Owner: b("o")}, "Q k MOVED h:1"},
	}
	for _, tt := range tests {
		if got := AppendResponse(nil, &tt.r); string(got) != tt.line+"\n" {
			t.Errorf("AppendResponse(%+v) = %q, want %q", tt.r, got, tt.line+"\n")
		}
	}
}

func TestParseResponseLenient(t *testing.T) {
	tests := []struct {
		line string
		want Response
	}{
		{"  A   k  OK   5  ", Response{Op: 'A', Key: b("k"), Status: StatusOK, Token: 5}},
		{"A k OK 007", Response{Op: 'A', Key: b("k"), Status: StatusOK, Token: 7}},
		{"A k ERR internal   ", Response{Op: 'A', Key: b("k"), Status: StatusErr, Code: b("internal")}},
		{"A k ERR internal   disk  full  ", Response{Op: 'A', Key: b("k"), Status: StatusErr, Code: b("internal"), Text: b("disk  full")}},
		{"? odd ERR x", Response{Op: '?', Key: b("odd"), Status: StatusErr, Code: b("x")}},
		{"  Q  k  HELD  1  2   o  ", Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 1, RemainingMs: 2, Owner: b("o")}},
		{"Q k HELD 01 002 o", Response{Op: 'Q', Key: b("k"), Status: StatusHeld, Token: 1, RemainingMs: 2, Owner: b("o")}},
	}
	for _, tt := range tests {
		var r Response
		if err := ParseResponse([]byte(tt.line), &r); err != nil || !equalResponse(&r, &tt.want) {
			t.Errorf("ParseResponse(%q) = %+v, %v; want %+v", tt.line, r, err, tt.want)
		}
	}
}

func TestParseResponseErrors(t *testing.T) {
	tests := []struct {
		line string
		err  error
	}{
		{"", ErrRespOp},
		{"X k OK", ErrRespOp},
		{"AA k OK 1", ErrRespOp},
		{"a k OK 1", ErrRespOp},
		{"A", ErrRespKey},
		{"A " + key251 + " OK 1", ErrRespKey},
		{"A k\x01 OK 1", ErrRespKey},
		{"A k", ErrRespStatus},
		{"W k OK", ErrRespStatus},
		{"U k MOVED a:1", ErrRespStatus},
		{"A k SHARED 1 2", ErrRespStatus},
		{"S k NOTHELD", ErrRespStatus},
		{"Q k SHARED 0 2", ErrRespValue},
		{"Q k SHARED 3 2", ErrRespValue},
		{"Q k SHARED 1 0", ErrRespValue},
		{"Q k SHARED 1 1000001", ErrRespValue},
		{"Q k SHARED 1", ErrRespValue},
		{"Q k SHARED 1 2 3", ErrRespExtraField},
		{"A k ok 1", ErrRespStatus},
		{"A k GRANTED 1", ErrRespStatus},
		{"Q k OK", ErrRespStatus},
		{"R k TIMEOUT", ErrRespStatus},
		{"A k NOTHELD", ErrRespStatus},
		{"A k HELD 1 1", ErrRespStatus},
		{"R k FREE", ErrRespStatus},
		{"? - OK", ErrRespStatus},
		{"? - MOVED h:1", ErrRespStatus},
		{"A k OK", ErrRespValue},
		{"A k OK 0", ErrRespValue},
		{"A k OK 18446744073709551616", ErrRespValue},
		{"A k OK x", ErrRespValue},
		{"Q k HELD 1", ErrRespValue},
		{"Q k HELD 0 1", ErrRespValue},
		{"Q k HELD 1 -1", ErrRespValue},
		{"A k MOVED", ErrRespValue},
		{"A k MOVED h\x7f:1", ErrRespValue},
		{"A k ERR", ErrRespValue},
		{"A k ERR   ", ErrRespValue},
		{"A k ERR internal bad\x00text", ErrRespValue},
		{"A k ERR internal bad\rtext", ErrRespValue},
		{"A k OK 1 2", ErrRespExtraField},
		{"R k OK 1", ErrRespExtraField},
		{"A k TIMEOUT 5", ErrRespExtraField},
		{"Q k HELD 1 2 3 4", ErrRespExtraField},
		{"Q k HELD 1 2 o o", ErrRespExtraField},
		{"Q k HELD 1 2 o x y z", ErrRespExtraField},
		{"A k OK 1 client-7", ErrRespExtraField},
		{"Q k FREE client-7", ErrRespExtraField},
		{"Q k HELD 1 2 " + owner65, ErrRespValue},
		{"Q k HELD 1 2 " + ownerUTF66, ErrRespValue},
		{"Q k HELD 1 2 o\x7f", ErrRespValue},
		{"Q k HELD 1 2 \x7f", ErrRespValue},
		{"Q k HELD 1 2 o\x01", ErrRespValue},
		{"Q k HELD 1 2 a\tb", ErrRespValue},
		{"Q k HELD 1 2 o\r", ErrRespValue},
		{"Q k HELD 1 2 \x00 x", ErrRespValue},
		{"Q k HELD 0 2 o", ErrRespValue},
		{"Q k HELD 1 x o", ErrRespValue},
		{"Q k FREE x", ErrRespExtraField},
		{"A k MOVED h:1 h:2", ErrRespExtraField},
		{"H k OK", ErrRespKey},
		{"H", ErrRespKey},
		{"H - TIMEOUT", ErrRespStatus},
		{"H - NOTHELD", ErrRespStatus},
		{"H - FREE", ErrRespStatus},
		{"H - MOVED h:1", ErrRespStatus},
		{"H - OK 1", ErrRespExtraField},
		{"H - ERR", ErrRespValue},
		{"C k OK a:1", ErrRespKey},
		{"M k OK", ErrRespKey},
		{"C - MOVED h:1", ErrRespStatus},
		{"C - TIMEOUT", ErrRespStatus},
		{"M - FREE", ErrRespStatus},
		{"C - OK a:1\x01", ErrRespValue},
		{"M - MOVED", ErrRespValue},
	}
	for _, tt := range tests {
		var r Response
		if err := ParseResponse([]byte(tt.line), &r); err != tt.err {
			t.Errorf("ParseResponse(%q) error = %v, want %v", tt.line, err, tt.err)
		}
		if tt.err == ErrRespValue && r.Owner != nil {
			t.Errorf("ParseResponse(%q) kept a rejected owner %q", tt.line, r.Owner)
		}
	}
}

func TestAppendResponseUnknownStatus(t *testing.T) {
	for _, s := range []Status{0, StatusShared + 1, 255} {
		r := Response{Op: 'A', Key: b("k"), Status: s}
		if got := AppendResponse(nil, &r); string(got) != "A k ERR internal\n" {
			t.Errorf("AppendResponse(status %d) = %q", s, got)
		}
	}
}

func TestStatusString(t *testing.T) {
	if StatusNotHeld.String() != "NOTHELD" || Status(0).String() != "Status(0)" || Status(99).String() != "Status(99)" {
		t.Errorf("Status.String: %v %v %v", StatusNotHeld, Status(0), Status(99))
	}
}
