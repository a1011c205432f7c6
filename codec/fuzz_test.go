package codec

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"A orders/42 10000 500", "A k 1 -1", "A k 86400000 0", "R k", "R k 18446744073709551615",
		"K k 17 3000", "Q k", "  Q   k  ", "A k 1 -01", "A k 1 -0", "R k 18446744073709551616",
		"Q \x7f", "Q ключ", "", "X", "A", "A k 0 0", "Q k extra", "A k 1 0\r",
		"Q " + strings.Repeat("k", MaxKey), "Q " + strings.Repeat("k", MaxKey+1),
		// Owners (protocol 1.1).
		"A k 1 0 o", "A orders/42 10000 500 9f86d081884c7d659a2feaa0c55ad015", "A  k 1 -1  o  ",
		"A k 1 0 " + strings.Repeat("o", MaxOwner), "A k 1 0 " + strings.Repeat("o", MaxOwner+1),
		"A k 1 0 " + strings.Repeat("é", MaxOwner/2), "A k 1 0 o\x7f", "A k 1 0 o\tp", "A k 1 0 \x00",
		"A k 1 0 o x", "A k 1 0 o\r", "A k x o", "R k 1 o", "K k 1 1 o", "Q k o",
		// H (protocol 1.2).
		"H s3cret", "  H  s3cret  ", "H", "H ", "H a b", "H a\x7f", "H a\tb", "H \x00", "H s\r",
		"H " + strings.Repeat("s", MaxSecret), "H " + strings.Repeat("s", MaxSecret+1), "h s", "HH s",
		// S, W and U (protocol 1.4).
		"S jobs 4 10000 500", "S jobs 1000000 1 -1 o", "S jobs 0 1 0", "S jobs 1000001 1 0", "S k 4", "S k 4 1 0 o x",
		"W k", "W k x", "W", "U k", "U k x",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var r Request
		err := ParseRequest(line, &r)
		if r.Owner != nil && (r.Op != OpAcquire && r.Op != OpShared || !ValidOwner(r.Owner) || cap(r.Owner) != len(r.Owner)) {
			t.Fatalf("ParseRequest(%q) = %+v, %v: bad owner", line, r, err)
		}
		// A secret is set only by a well-formed H, and an H never has a key.
		if r.Secret != nil && (err != nil || r.Op != OpHello || !ValidSecret(r.Secret) || cap(r.Secret) != len(r.Secret)) ||
			r.Op == OpHello && r.Key != nil {
			t.Fatalf("ParseRequest(%q) = %+v, %v: bad secret", line, r, err)
		}
		if err != nil {
			pe, ok := err.(*ParseError)
			if !ok || pe.Code != CodeBadRequest {
				t.Fatalf("ParseRequest(%q) error %v is not a badrequest ParseError", line, err)
			}
			if r.Key != nil && !ValidKey(r.Key) {
				t.Fatalf("ParseRequest(%q) failed with %v but left invalid key %q", line, err, r.Key)
			}
			if (err == ErrOwnerTooLong || err == ErrOwnerByte) && (r.Op != OpAcquire && r.Op != OpShared || r.Key == nil || r.Owner != nil) {
				t.Fatalf("ParseRequest(%q) failed with %v but left %+v", line, err, r)
			}
			// The answer to any bad line must itself be a well-formed response.
			out := AppendParseError(nil, &r, pe)
			var resp Response
			if err := ParseResponse(out[:len(out)-1], &resp); err != nil || resp.Status != StatusErr {
				t.Fatalf("answer %q to %q does not parse: %v", out, line, err)
			}
			return
		}
		if r.Op == OpHello && r.Secret == nil || r.Op != OpHello && (!ValidKey(r.Key) || !isOp(r.Op)) {
			t.Fatalf("ParseRequest(%q) accepted %+v", line, r)
		}
		out := AppendRequest(nil, &r)
		line2, n, err := SplitLine(out)
		if err != nil || n != len(out) {
			t.Fatalf("AppendRequest(%+v) = %q: SplitLine n=%d err=%v", r, out, n, err)
		}
		var r2 Request
		if err := ParseRequest(line2, &r2); err != nil || !equalRequest(&r, &r2) {
			t.Fatalf("%q parsed as %+v, reformatted as %q, reparsed as %+v, %v", line, r, out, r2, err)
		}
		if out2 := AppendRequest(nil, &r2); !bytes.Equal(out, out2) {
			t.Fatalf("reformatting %q gave %q", out, out2)
		}
	})
}

// splitAll splits data into lines as a reader would, given it in chunks.
// It returns the lines (copied), the bytes left waiting for an LF, and
// whether an overlong line stopped it.
func splitAll(chunks ...[]byte) (lines []string, pending int, tooLong bool) {
	var buf []byte
	for _, c := range chunks {
		buf = append(buf, c...)
		for {
			line, n, err := SplitLine(buf)
			if err != nil {
				return lines, 0, true
			}
			if n == 0 {
				break
			}
			if len(line) > MaxLine || bytes.IndexByte(line, '\n') >= 0 || n-len(line) < 1 || n-len(line) > 2 {
				panic("SplitLine returned a bad line")
			}
			lines = append(lines, string(line))
			buf = buf[n:]
		}
	}
	return lines, len(buf), false
}

func FuzzSplitLine(f *testing.F) {
	long := strings.Repeat("x", MaxLine)
	for _, s := range []string{
		"", "\n", "\r\n", "Q k\n", "Q k\r\nQ j\n", "Q k\r", "Q k\r\r\n", "a\nb\nc",
		long + "\n", long + "\r\n", long + "x\n", long, long + "\r", long + "x", long + "\r\r",
		"A b\n" + long + "\nQ z\n",
	} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		k := int(cut) % (len(data) + 1)
		want, wantPending, wantTooLong := splitAll(data)
		got, pending, tooLong := splitAll(data[:k], data[k:])
		if !slices.Equal(got, want) || pending != wantPending || tooLong != wantTooLong {
			t.Fatalf("cut at %d: %q (pending %d, toolong %v); whole: %q (%d, %v)",
				k, got, pending, tooLong, want, wantPending, wantTooLong)
		}
	})
}

func FuzzResponse(f *testing.F) {
	for _, s := range []string{
		"A orders/42 OK 1234567", "R k OK", "K k OK", "A k TIMEOUT", "R k NOTHELD", "K k NOTHELD",
		"Q k HELD 17 9500", "Q k FREE", "A k MOVED 127.0.0.1:7710", "K k ERR unavailable",
		"A k ERR badrequest lease_ms must be 1..86400000", "? - ERR toolong line longer than 1024 bytes",
		"  A  k  ERR  internal  a  b  ", "Q k OK", "A k OK 0", "A k ERR", "Q k HELD 1 2 3",
		// Owners (protocol 1.1).
		"Q k HELD 17 9500 client-7", "Q k HELD 1 0 " + strings.Repeat("o", MaxOwner),
		"Q k HELD 1 0 " + strings.Repeat("o", MaxOwner+1), "Q k HELD 1 2 o x", "Q k HELD 1 2 o\x7f",
		"Q k HELD 1 2 a\tb", "  Q  k  HELD  1  2  o  ", "A k OK 1 o", "Q k FREE o",
		// Answers to H (protocol 1.2).
		"H - OK", "H - ERR auth", "H - ERR badrequest missing secret", "H k OK", "H - OK 1", "H - MOVED h:1",
		// Protocol 1.4.
		"S k OK 3", "S k TIMEOUT", "Q k SHARED 3 4", "W k SHARED 1 1", "W k HELD 1 2 o", "W k FREE", "U k OK",
		"Q k SHARED 5 4", "W k OK", "U k MOVED h:1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var r Response
		err := ParseResponse(line, &r)
		if r.Owner != nil && (r.Status != StatusHeld || !ValidOwner(r.Owner)) {
			t.Fatalf("ParseResponse(%q) = %+v, %v: bad owner", line, r, err)
		}
		if err != nil {
			return
		}
		out := AppendResponse(nil, &r)
		if bytes.IndexByte(out, '\n') != len(out)-1 || bytes.HasSuffix(out, []byte("\r\n")) {
			t.Fatalf("%q parsed as %+v, formatted as %q: not one line", line, r, out)
		}
		if len(out)-1 <= MaxLine {
			if l, n, err := SplitLine(out); err != nil || n != len(out) || len(l) != n-1 {
				t.Fatalf("SplitLine(%q) = %q, %d, %v", out, l, n, err)
			}
		}
		var r2 Response
		if err := ParseResponse(out[:len(out)-1], &r2); err != nil || !equalResponse(&r, &r2) {
			t.Fatalf("%q parsed as %+v, formatted as %q, reparsed as %+v, %v", line, r, out, r2, err)
		}
		if out2 := AppendResponse(nil, &r2); !bytes.Equal(out, out2) {
			t.Fatalf("reformatting %q gave %q", out, out2)
		}
	})
}
