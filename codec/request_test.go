package codec

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

var (
	key250 = strings.Repeat("k", MaxKey)
	key251 = strings.Repeat("k", MaxKey+1)

	owner64 = strings.Repeat("o", MaxOwner)
	owner65 = strings.Repeat("o", MaxOwner+1)
	// The limit counts bytes, not runes: 32 two-byte runes fill it.
	ownerUTF64 = strings.Repeat("é", MaxOwner/2)
	ownerUTF66 = strings.Repeat("é", MaxOwner/2+1)

	// The longest secret fills the longest line with "H ".
	secretMax = strings.Repeat("s", MaxSecret)
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		line string
		want Request // Key is compared as given; nil means "not read"
		err  error
	}{
		// Every form.
		{"A orders/42 10000 500", Request{Op: 'A', Key: []byte("orders/42"), LeaseMs: 10000, WaitMs: 500}, nil},
		{"R orders/42", Request{Op: 'R', Key: []byte("orders/42")}, nil},
		{"R orders/42 17", Request{Op: 'R', Key: []byte("orders/42"), Token: 17}, nil},
		{"K orders/42 17 3000", Request{Op: 'K', Key: []byte("orders/42"), Token: 17, LeaseMs: 3000}, nil},
		{"Q orders/42", Request{Op: 'Q', Key: []byte("orders/42")}, nil},

		// Spacing.
		{"A  k   1    0", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, nil},
		{"   Q k", Request{Op: 'Q', Key: []byte("k")}, nil},
		{"Q k   ", Request{Op: 'Q', Key: []byte("k")}, nil},
		{"  R   k  5  ", Request{Op: 'R', Key: []byte("k"), Token: 5}, nil},

		// Keys.
		{"Q " + key250, Request{Op: 'Q', Key: []byte(key250)}, nil},
		{"Q " + key251, Request{Op: 'Q'}, ErrKeyTooLong},
		{"Q ключ/日本", Request{Op: 'Q', Key: []byte("ключ/日本")}, nil},
		{"Q \xff\x80", Request{Op: 'Q', Key: []byte("\xff\x80")}, nil},
		{"Q !~", Request{Op: 'Q', Key: []byte("!~")}, nil},
		{"Q a\x7fb", Request{Op: 'Q'}, ErrKeyByte},
		{"Q a\x01b", Request{Op: 'Q'}, ErrKeyByte},
		{"Q a\tb", Request{Op: 'Q'}, ErrKeyByte},
		{"Q k\r", Request{Op: 'Q'}, ErrKeyByte},
		{"Q \x00", Request{Op: 'Q'}, ErrKeyByte},
		{"A", Request{Op: 'A'}, ErrMissingKey},
		{"Q   ", Request{Op: 'Q'}, ErrMissingKey},

		// Ops.
		{"", Request{}, ErrEmptyLine},
		{"    ", Request{}, ErrEmptyLine},
		{"a k 1 0", Request{}, ErrBadOp},
		{"q k", Request{}, ErrBadOp},
		{"AA k 1 0", Request{}, ErrBadOp},
		{"X k", Request{}, ErrBadOp},
		{"? k", Request{}, ErrBadOp},
		{"A\tk 1 0", Request{}, ErrBadOp},
		{"\x00", Request{}, ErrBadOp},

		// S, W and U (protocol 1.4): S is A with permits first.
		{"S jobs 4 10000 500", Request{Op: 'S', Key: []byte("jobs"), Permits: 4, LeaseMs: 10000, WaitMs: 500}, nil},
		{"S jobs 1000000 1 -1 reader-7", Request{Op: 'S', Key: []byte("jobs"), Permits: MaxPermits, LeaseMs: 1, WaitMs: WaitNone, Owner: []byte("reader-7")}, nil},
		{"S jobs", Request{Op: 'S', Key: []byte("jobs")}, ErrMissingPermits},
		{"S jobs 0 1 0", Request{Op: 'S', Key: []byte("jobs")}, ErrBadPermits},
		{"S jobs 1000001 1 0", Request{Op: 'S', Key: []byte("jobs")}, ErrBadPermits},
		{"S jobs x 1 0", Request{Op: 'S', Key: []byte("jobs")}, ErrBadPermits},
		{"S jobs 4", Request{Op: 'S', Key: []byte("jobs"), Permits: 4}, ErrMissingLease},
		{"S jobs 4 0 0", Request{Op: 'S', Key: []byte("jobs"), Permits: 4}, ErrBadLease},
		{"S jobs 4 1", Request{Op: 'S', Key: []byte("jobs"), Permits: 4, LeaseMs: 1}, ErrMissingWait},
		{"S jobs 4 1 -2", Request{Op: 'S', Key: []byte("jobs"), Permits: 4, LeaseMs: 1}, ErrBadWait},
		{"S jobs 4 1 0 " + owner65, Request{Op: 'S', Key: []byte("jobs"), Permits: 4, LeaseMs: 1}, ErrOwnerTooLong},
		{"S jobs 4 1 0 o x", Request{Op: 'S', Key: []byte("jobs"), Permits: 4, LeaseMs: 1, Owner: []byte("o")}, ErrExtraField},
		{"W leader/web", Request{Op: 'W', Key: []byte("leader/web")}, nil},
		{"W leader/web 1", Request{Op: 'W', Key: []byte("leader/web")}, ErrExtraField},
		{"W", Request{Op: 'W'}, ErrMissingKey},
		{"U leader/web", Request{Op: 'U', Key: []byte("leader/web")}, nil},
		{"U leader/web x", Request{Op: 'U', Key: []byte("leader/web")}, ErrExtraField},

		// C and M (protocol 1.3): the key "-"; M's verb and arguments as
		// one field, spaces at either end dropped.
		{"C -", Request{Op: 'C', Key: []byte("-")}, nil},
		{"C  -  ", Request{Op: 'C', Key: []byte("-")}, nil},
		{"C", Request{Op: 'C'}, ErrMissingKey},
		{"C k", Request{Op: 'C', Key: []byte("k")}, ErrClusterKey},
		{"C - x", Request{Op: 'C', Key: []byte("-")}, ErrExtraField},
		{"M - LIST", Request{Op: 'M', Key: []byte("-"), Args: []byte("LIST")}, nil},
		{"M -   REMOVE  4 FORCE  ", Request{Op: 'M', Key: []byte("-"), Args: []byte("REMOVE  4 FORCE")}, nil},
		{"M - ADD 10.0.0.4:7701/10.0.0.4:7700", Request{Op: 'M', Key: []byte("-"), Args: []byte("ADD 10.0.0.4:7701/10.0.0.4:7700")}, nil},
		{"M - a b c d e f g h", Request{Op: 'M', Key: []byte("-"), Args: []byte("a b c d e f g h")}, nil},
		{"M -", Request{Op: 'M', Key: []byte("-")}, ErrMissingVerb},
		{"M -    ", Request{Op: 'M', Key: []byte("-")}, ErrMissingVerb},
		{"M k LIST", Request{Op: 'M', Key: []byte("k")}, ErrClusterKey},

		// lease_ms.
		{"A k 1 0", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, nil},
		{"A k 86400000 0", Request{Op: 'A', Key: []byte("k"), LeaseMs: MaxLeaseMs}, nil},
		{"A k 0086400000 0", Request{Op: 'A', Key: []byte("k"), LeaseMs: MaxLeaseMs}, nil},
		{"A k 86400001 0", Request{Op: 'A', Key: []byte("k")}, ErrBadLease},
		{"A k 0 0", Request{Op: 'A', Key: []byte("k")}, ErrBadLease},
		{"A k -1 0", Request{Op: 'A', Key: []byte("k")}, ErrBadLease},
		{"A k +1 0", Request{Op: 'A', Key: []byte("k")}, ErrBadLease},
		{"A k 1x 0", Request{Op: 'A', Key: []byte("k")}, ErrBadLease},
		{"A k 99999999999999999999999 0", Request{Op: 'A', Key: []byte("k")}, ErrBadLease},
		{"A k", Request{Op: 'A', Key: []byte("k")}, ErrMissingLease},
		{"K k 5", Request{Op: 'K', Key: []byte("k"), Token: 5}, ErrMissingLease},
		{"K k 5 0", Request{Op: 'K', Key: []byte("k"), Token: 5}, ErrBadLease},
		{"K k 5 86400001", Request{Op: 'K', Key: []byte("k"), Token: 5}, ErrBadLease},

		// wait_ms.
		{"A k 1 -1", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitNone}, nil},
		{"A k 1 -01", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitNone}, nil},
		{"A k 1 0", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitForever}, nil},
		{"A k 1 000", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitForever}, nil},
		{"A k 1 86400000", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: MaxWaitMs}, nil},
		{"A k 1 86400001", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1 -2", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1 -0", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1 -", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1 --1", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1 +5", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1 5s", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrMissingWait},

		// token.
		{"R k 1", Request{Op: 'R', Key: []byte("k"), Token: 1}, nil},
		{"R k 18446744073709551615", Request{Op: 'R', Key: []byte("k"), Token: 1<<64 - 1}, nil},
		{"K k 18446744073709551615 1", Request{Op: 'K', Key: []byte("k"), Token: 1<<64 - 1, LeaseMs: 1}, nil},
		{"R k 18446744073709551616", Request{Op: 'R', Key: []byte("k")}, ErrBadToken},
		{"R k 99999999999999999999", Request{Op: 'R', Key: []byte("k")}, ErrBadToken},
		{"R k 0", Request{Op: 'R', Key: []byte("k")}, ErrBadToken},
		{"R k 000", Request{Op: 'R', Key: []byte("k")}, ErrBadToken},
		{"R k -1", Request{Op: 'R', Key: []byte("k")}, ErrBadToken},
		{"K k 0 1", Request{Op: 'K', Key: []byte("k")}, ErrBadToken},
		{"K k x 1", Request{Op: 'K', Key: []byte("k")}, ErrBadToken},
		{"K k", Request{Op: 'K', Key: []byte("k")}, ErrMissingToken},

		// Owners (protocol 1.1): an optional fifth field of A only.
		{"A orders/42 10000 500 client-7", Request{Op: 'A', Key: []byte("orders/42"), LeaseMs: 10000, WaitMs: 500, Owner: []byte("client-7")}, nil},
		{"A k 1 -1 x", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitNone, Owner: []byte("x")}, nil},
		{"A  k  1  0   o  ", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte("o")}, nil},
		{"A k 1 0 " + owner64, Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte(owner64)}, nil},
		{"A k 1 0 " + ownerUTF64, Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte(ownerUTF64)}, nil},
		{"A k 1 0 !~\xff\x80", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte("!~\xff\x80")}, nil},
		{"A k 1 0 0123456789abcdef0123456789abcdef", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte("0123456789abcdef0123456789abcdef")}, nil},
		{"A k 1 0 " + owner65, Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerTooLong},
		{"A k 1 0 " + ownerUTF66, Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerTooLong},
		{"A k 1 0 " + key251, Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerTooLong},
		{"A k 1 0 a\x7fb", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 \x7f", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 a\x01b", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 \x00", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 a\tb", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 \t", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 o\r", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 o\x1b[0m", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		// Too long wins over a bad byte: the length is checked first, as for keys.
		{"A k 1 0 " + owner64 + "\x01", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerTooLong},
		// Left to right: an earlier fault is named, a later one is not seen.
		{"A k 0 0 o", Request{Op: 'A', Key: []byte("k")}, ErrBadLease},
		{"A k 1 x o", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrBadWait},
		{"A k 1 0 a\x01 x", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerByte},
		{"A k 1 0 " + owner65 + " x", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1}, ErrOwnerTooLong},
		// A sixth field, and an owner on the ops that take none.
		{"A k 1 0 o x", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte("o")}, ErrExtraField},
		{"A k 1 0 o o", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte("o")}, ErrExtraField},
		{"A k 1 0 o x y z w", Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, Owner: []byte("o")}, ErrExtraField},
		{"R k 1 client-7", Request{Op: 'R', Key: []byte("k"), Token: 1}, ErrExtraField},
		{"K k 1 1 client-7", Request{Op: 'K', Key: []byte("k"), Token: 1, LeaseMs: 1}, ErrExtraField},
		{"Q k client-7", Request{Op: 'Q', Key: []byte("k")}, ErrExtraField},
		{"R k client-7", Request{Op: 'R', Key: []byte("k")}, ErrBadToken},

		// H (protocol 1.2): a secret and no key.
		{"H s3cret", Request{Op: 'H', Secret: []byte("s3cret")}, nil},
		{"  H   s3cret  ", Request{Op: 'H', Secret: []byte("s3cret")}, nil},
		{"H " + secretMax, Request{Op: 'H', Secret: []byte(secretMax)}, nil},
		{"H \xff\x80!~", Request{Op: 'H', Secret: []byte("\xff\x80!~")}, nil},
		{"H " + secretMax + "x", Request{Op: 'H'}, ErrSecretTooLong},
		{"H", Request{Op: 'H'}, ErrMissingSecret},
		{"H   ", Request{Op: 'H'}, ErrMissingSecret},
		{"H a\x7fb", Request{Op: 'H'}, ErrSecretByte},
		{"H a\tb", Request{Op: 'H'}, ErrSecretByte},
		{"H s\r", Request{Op: 'H'}, ErrSecretByte},
		{"H two words", Request{Op: 'H'}, ErrExtraField},
		{"h s3cret", Request{}, ErrBadOp},
		{"HH s3cret", Request{}, ErrBadOp},

		// Extra fields.
		{"R k 1 x", Request{Op: 'R', Key: []byte("k"), Token: 1}, ErrExtraField},
		{"K k 1 1 1", Request{Op: 'K', Key: []byte("k"), Token: 1, LeaseMs: 1}, ErrExtraField},
		{"Q k x", Request{Op: 'Q', Key: []byte("k")}, ErrExtraField},
		{"Q k x y z w v u t", Request{Op: 'Q', Key: []byte("k")}, ErrExtraField},
	}
	for _, tt := range tests {
		// Start from a dirty Request: ParseRequest must overwrite all of it.
		r := Request{Op: 'Z', Key: []byte("stale"), LeaseMs: 9, WaitMs: 9, Token: 9, Owner: []byte("stale"), Secret: []byte("stale")}
		err := ParseRequest([]byte(tt.line), &r)
		if err != tt.err {
			t.Errorf("ParseRequest(%q) error = %v, want %v", tt.line, err, tt.err)
		}
		if !equalRequest(&r, &tt.want) {
			t.Errorf("ParseRequest(%q) = %+v, want %+v", tt.line, r, tt.want)
		}
		if tt.want.Key == nil && r.Key != nil {
			t.Errorf("ParseRequest(%q): Key = %q, want nil", tt.line, r.Key)
		}
		// Absent is nil, not empty: the engine tells "no owner" by nil.
		if tt.want.Owner == nil && r.Owner != nil {
			t.Errorf("ParseRequest(%q): Owner = %q, want nil", tt.line, r.Owner)
		}
		if tt.want.Secret == nil && r.Secret != nil {
			t.Errorf("ParseRequest(%q): Secret = %q, want nil", tt.line, r.Secret)
		}
		// An owner is a sub-slice of the line that cannot be appended over it.
		if r.Owner != nil && (cap(r.Owner) != len(r.Owner) || !bytes.Contains([]byte(tt.line), r.Owner)) {
			t.Errorf("ParseRequest(%q): Owner %q (cap %d) is not a capped sub-slice", tt.line, r.Owner, cap(r.Owner))
		}
	}
}

// TestParseRequestOwnerAliases checks that Owner points into the line, as
// Key does, rather than into a copy: the hot path must not allocate one.
func TestParseRequestOwnerAliases(t *testing.T) {
	line := []byte("A k 1 0 client-7")
	var r Request
	if err := ParseRequest(line, &r); err != nil {
		t.Fatal(err)
	}
	if &r.Owner[0] != &line[8] {
		t.Errorf("Owner does not alias the line")
	}
}

func TestValidOwner(t *testing.T) {
	tests := []struct {
		owner string
		ok    bool
	}{
		{"o", true},
		{owner64, true},
		{ownerUTF64, true},
		{"\xff\x80!~", true},
		{"", false},
		{owner65, false},
		{ownerUTF66, false},
		{"a b", false},
		{"a\tb", false},
		{"a\x7f", false},
		{"\x00", false},
		{"o\n", false},
	}
	for _, tt := range tests {
		if got := ValidOwner([]byte(tt.owner)); got != tt.ok {
			t.Errorf("ValidOwner(%q) = %v, want %v", tt.owner, got, tt.ok)
		}
	}
	if ValidOwner(nil) {
		t.Errorf("ValidOwner(nil) = true")
	}
}

func equalRequest(a, b *Request) bool {
	return a.Op == b.Op && bytes.Equal(a.Key, b.Key) && a.LeaseMs == b.LeaseMs &&
		a.WaitMs == b.WaitMs && a.Token == b.Token && a.Permits == b.Permits && bytes.Equal(a.Owner, b.Owner) &&
		bytes.Equal(a.Secret, b.Secret) && bytes.Equal(a.Args, b.Args)
}

// onWire is r reduced to the fields its op puts on the wire, which is what
// parsing AppendRequest's line gives back.
func onWire(r Request) Request {
	w := Request{Op: r.Op, Key: r.Key}
	switch r.Op {
	case OpAcquire, OpShared:
		w.LeaseMs, w.WaitMs = r.LeaseMs, r.WaitMs
		if r.Op == OpShared {
			w.Permits = r.Permits
		}
		if len(r.Owner) > 0 {
			w.Owner = r.Owner
		}
	case OpRelease:
		w.Token = r.Token
	case OpExtend:
		w.Token, w.LeaseMs = r.Token, r.LeaseMs
	case OpMember:
		w.Args = r.Args
	case OpHello:
		w.Key, w.Secret = nil, r.Secret
	}
	return w
}

// TestErrorTexts keeps the texts honest about the limits they quote, and
// checks that every error is a distinct, wire-safe value.
func TestErrorTexts(t *testing.T) {
	all := []*ParseError{ErrTooLong, ErrEmptyLine, ErrBadOp, ErrMissingKey, ErrKeyTooLong,
		ErrKeyByte, ErrMissingLease, ErrBadLease, ErrMissingWait, ErrBadWait,
		ErrMissingToken, ErrBadToken, ErrOwnerTooLong, ErrOwnerByte, ErrMissingSecret,
		ErrSecretTooLong, ErrSecretByte, ErrExtraField}
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.Text] {
			t.Errorf("duplicate text %q", e.Text)
		}
		seen[e.Text] = true
		if !isText([]byte(e.Text)) || !isWord([]byte(e.Code)) {
			t.Errorf("%v is not wire-safe", e)
		}
		if !errors.Is(error(e), e) {
			t.Errorf("errors.Is(%v) = false", e)
		}
	}
	for _, c := range []struct {
		e *ParseError
		n uint64
	}{
		{ErrTooLong, MaxLine}, {ErrKeyTooLong, MaxKey}, {ErrBadLease, MaxLeaseMs},
		{ErrBadWait, MaxWaitMs}, {ErrBadToken, 1<<64 - 1}, {ErrOwnerTooLong, MaxOwner},
		{ErrSecretTooLong, MaxSecret},
	} {
		if !strings.Contains(c.e.Text, strconv.FormatUint(c.n, 10)) {
			t.Errorf("%q does not quote %d", c.e.Text, c.n)
		}
	}
	if ErrTooLong.Code != CodeTooLong {
		t.Errorf("ErrTooLong.Code = %q", ErrTooLong.Code)
	}
}

func TestValidSecret(t *testing.T) {
	for _, tt := range []struct {
		secret string
		ok     bool
	}{
		{"s", true}, {secretMax, true}, {"\xff\x80!~", true},
		{"", false}, {secretMax + "s", false}, {"a b", false}, {"a\tb", false}, {"a\x7f", false}, {"a\n", false},
	} {
		if got := ValidSecret([]byte(tt.secret)); got != tt.ok {
			t.Errorf("ValidSecret(%.20q) = %v, want %v", tt.secret, got, tt.ok)
		}
		if err := CheckSecret([]byte(tt.secret)); (err == nil) != tt.ok {
			t.Errorf("CheckSecret(%.20q) = %v, want ok %v", tt.secret, err, tt.ok)
		}
	}
}

func TestParseSecret(t *testing.T) {
	for _, tt := range []struct {
		file string
		want string // "" means an error
	}{
		{"s3cret", "s3cret"},
		{"s3cret\n", "s3cret"},
		{"s3cret\r\n", "s3cret"},
		{secretMax + "\n", secretMax},
		// Only one trailing newline is the file's: what is left must be a
		// secret that H can carry.
		{"s3cret\n\n", ""},
		{"", ""},
		{"\n", ""},
		{"\r\n", ""},
		{"two words\n", ""},
		{" s3cret", ""},
		{"s3cret\t\n", ""},
		{"line1\nline2\n", ""},
		{secretMax + "s", ""},
	} {
		got, err := ParseSecret([]byte(tt.file))
		if tt.want == "" {
			if err == nil {
				t.Errorf("ParseSecret(%.20q) = %q, want an error", tt.file, got)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("ParseSecret(%.20q) = %.20q, %v; want %.20q", tt.file, got, err, tt.want)
		}
	}
}

func TestSplitLine(t *testing.T) {
	content1024 := strings.Repeat("x", MaxLine)
	tests := []struct {
		buf  string
		line string
		n    int
		err  error
	}{
		{"", "", 0, nil},
		{"Q k", "", 0, nil},
		{"Q k\r", "", 0, nil},
		{"Q k\n", "Q k", 4, nil},
		{"Q k\r\n", "Q k", 5, nil},
		{"Q k\r\r\n", "Q k\r", 6, nil}, // only one CR is part of the terminator
		{"Q k\rx\n", "Q k\rx", 6, nil},
		{"\n", "", 1, nil},
		{"\r\n", "", 2, nil},
		{"Q a\nQ b\n", "Q a", 4, nil},
		{"\nQ b\n", "", 1, nil},
		{content1024 + "\n", content1024, MaxLine + 1, nil},
		{content1024 + "\r\n", content1024, MaxLine + 2, nil},
		{content1024 + "\n" + content1024, content1024, MaxLine + 1, nil},
		{content1024 + "x\n", "", 0, ErrTooLong},
		{content1024 + "x\r\n", "", 0, ErrTooLong},
		{content1024 + "\r\r\n", "", 0, ErrTooLong},
		// Before the LF arrives: 1024 bytes or 1024 and a CR may still be a
		// good line; a 1025th byte that is not CR, or a 1026th, is not.
		{content1024, "", 0, nil},
		{content1024 + "\r", "", 0, nil},
		{content1024 + "x", "", 0, ErrTooLong},
		{content1024 + "\rx", "", 0, ErrTooLong},
		{content1024 + "\r\r", "", 0, ErrTooLong},
		{strings.Repeat("y", 100_000), "", 0, ErrTooLong},
	}
	for _, tt := range tests {
		line, n, err := SplitLine([]byte(tt.buf))
		if string(line) != tt.line || n != tt.n || err != tt.err {
			t.Errorf("SplitLine(%.20q... len %d) = %.20q, %d, %v; want %.20q, %d, %v",
				tt.buf, len(tt.buf), line, n, err, tt.line, tt.n, tt.err)
		}
	}
}

func TestAppendRequest(t *testing.T) {
	tests := []struct {
		r    Request
		want string
	}{
		{Request{Op: 'A', Key: []byte("orders/42"), LeaseMs: 10000, WaitMs: 500}, "A orders/42 10000 500\n"},
		{Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitNone}, "A k 1 -1\n"},
		{Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitForever}, "A k 1 0\n"},
		{Request{Op: 'R', Key: []byte("k")}, "R k\n"},
		{Request{Op: 'R', Key: []byte("k"), Token: 1<<64 - 1}, "R k 18446744073709551615\n"},
		{Request{Op: 'K', Key: []byte("k"), Token: 7, LeaseMs: 86400000}, "K k 7 86400000\n"},
		{Request{Op: 'Q', Key: []byte("k"), Token: 7, LeaseMs: 1}, "Q k\n"},
		// Owners: written for A when set, and only for A.
		{Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: 0, Owner: []byte("client-7")}, "A k 1 0 client-7\n"},
		{Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: WaitNone, Owner: []byte(owner64)}, "A k 1 -1 " + owner64 + "\n"},
		{Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: 5, Owner: []byte(ownerUTF64)}, "A k 1 5 " + ownerUTF64 + "\n"},
		{Request{Op: 'A', Key: []byte("k"), LeaseMs: 1, WaitMs: 5, Owner: []byte{}}, "A k 1 5\n"},
		{Request{Op: 'R', Key: []byte("k"), Token: 3, Owner: []byte("o")}, "R k 3\n"},
		{Request{Op: 'K', Key: []byte("k"), Token: 3, LeaseMs: 1, Owner: []byte("o")}, "K k 3 1\n"},
		{Request{Op: 'Q', Key: []byte("k"), Owner: []byte("o")}, "Q k\n"},
		// S: permits, then as A; W and U: the key alone.
		{Request{Op: 'S', Key: []byte("jobs"), Permits: 16, LeaseMs: 1000, WaitMs: WaitNone, Owner: []byte("r1")}, "S jobs 16 1000 -1 r1\n"},
		{Request{Op: 'S', Key: []byte("jobs"), Permits: 1, LeaseMs: 1, WaitMs: 0}, "S jobs 1 1 0\n"},
		{Request{Op: 'W', Key: []byte("k"), Token: 3, LeaseMs: 1}, "W k\n"},
		{Request{Op: 'U', Key: []byte("k")}, "U k\n"},
		// H: its secret, never a key.
		{Request{Op: 'H', Secret: []byte("s3cret")}, "H s3cret\n"},
		{Request{Op: 'H', Key: []byte("k"), Secret: []byte(secretMax)}, "H " + secretMax + "\n"},
		// C and M: the key, and M's arguments as given.
		{Request{Op: 'C', Key: []byte("-")}, "C -\n"},
		{Request{Op: 'M', Key: []byte("-"), Args: []byte("PRIORITY 3,1,2")}, "M - PRIORITY 3,1,2\n"},
	}
	for _, tt := range tests {
		got := AppendRequest([]byte("prefix|"), &tt.r)
		if string(got) != "prefix|"+tt.want {
			t.Errorf("AppendRequest(%+v) = %q, want %q", tt.r, got, tt.want)
			continue
		}
		var back Request
		line, _, _ := SplitLine(got[len("prefix|"):])
		want := onWire(tt.r)
		if err := ParseRequest(line, &back); err != nil || !equalRequest(&back, &want) || want.Owner == nil && back.Owner != nil {
			t.Errorf("round trip of %+v = %+v, %v", tt.r, back, err)
		}
	}
}

func TestAppendParseError(t *testing.T) {
	tests := []struct {
		line string
		want string
	}{
		{"", "? - ERR badrequest empty line\n"},
		{"x k", "? - ERR badrequest op must be A, R, K, Q, H, C, M, S, W or U\n"},
		{"H", "H - ERR badrequest missing secret\n"},
		{"H a b", "H - ERR badrequest too many fields\n"},
		{"H a\x01", "H - ERR badrequest secret must not contain control bytes or DEL\n"},
		{"A " + key251 + " 1 0", "? - ERR badrequest key longer than 250 bytes\n"},
		{"A a\x01 1 0", "? - ERR badrequest key must not contain control bytes or DEL\n"},
		{"A", "? - ERR badrequest missing key\n"},
		{"A orders/42 0 0", "A orders/42 ERR badrequest lease_ms must be 1..86400000\n"},
		{"K k 0 1", "K k ERR badrequest token must be 1..18446744073709551615\n"},
		{"Q k x", "Q k ERR badrequest too many fields\n"},
		{"A orders/42 1 0 " + owner65, "A orders/42 ERR badrequest owner longer than 64 bytes\n"},
		{"A orders/42 1 0 o\x7f", "A orders/42 ERR badrequest owner must not contain control bytes or DEL\n"},
		{"A orders/42 1 0 o\tp", "A orders/42 ERR badrequest owner must not contain control bytes or DEL\n"},
		{"A orders/42 1 0 o x", "A orders/42 ERR badrequest too many fields\n"},
		{"R orders/42 1 o", "R orders/42 ERR badrequest too many fields\n"},
	}
	for _, tt := range tests {
		var r Request
		err := ParseRequest([]byte(tt.line), &r)
		pe, ok := err.(*ParseError)
		if !ok {
			t.Errorf("ParseRequest(%q) error = %v, want a *ParseError", tt.line, err)
			continue
		}
		if got := AppendParseError(nil, &r, pe); string(got) != tt.want {
			t.Errorf("AppendParseError for %q = %q, want %q", tt.line, got, tt.want)
		}
	}
	// An overlong line never echoes a key, whatever r still holds.
	stale := Request{Op: 'Q', Key: []byte("old")}
	if got := AppendParseError(nil, &stale, ErrTooLong); string(got) != "? - ERR toolong line longer than 1024 bytes\n" {
		t.Errorf("AppendParseError(ErrTooLong) = %q", got)
	}
	if got := AppendParseError(nil, nil, ErrTooLong); string(got) != "? - ERR toolong line longer than 1024 bytes\n" {
		t.Errorf("AppendParseError(nil, ErrTooLong) = %q", got)
	}
}
