package codec

import (
	"bytes"
	"math"
)

// SplitLine finds the first complete line in buf. It returns the line
// without its LF and without a CR right before the LF, and n, the number of
// bytes the line took including the terminator. n == 0 with a nil error means
// buf holds no complete line yet. A line longer than MaxLine returns
// ErrTooLong, as soon as that is certain (even before its LF arrives); n is
// then 0, because after an overlong line the stream cannot be trusted to
// resynchronise and the connection is to be closed.
func SplitLine(buf []byte) (line []byte, n int, err error) {
	// Longest acceptable line: MaxLine bytes of content, CR, LF. Looking no
	// further keeps a flood of bytes without LF from being rescanned.
	window := buf[:min(len(buf), MaxLine+2)]
	i := bytes.IndexByte(window, '\n')
	if i < 0 {
		// Every byte seen is content except a last CR, which an LF may
		// still follow.
		if len(buf) > MaxLine+1 || len(buf) == MaxLine+1 && buf[MaxLine] != '\r' {
			return nil, 0, ErrTooLong
		}
		return nil, 0, nil
	}
	line = buf[:i]
	if i > 0 && line[i-1] == '\r' {
		line = line[:i-1]
	}
	if len(line) > MaxLine {
		return nil, 0, ErrTooLong
	}
	return line, i + 1, nil
}

// maxFields is one more than any request or response takes before free
// text, so that an extra field is seen without scanning the whole line. The
// longest are an acquire with its owner (5 fields) and a HELD answer with
// its owner (6: "Q k HELD token remaining_ms owner").
const maxFields = 7

// fields is a line cut at its spaces: f[:n] are its first n fields, and
// end[i] is the index just past f[i] in the line.
type fields struct {
	f   [maxFields][]byte
	end [maxFields]int
	n   int
}

// split cuts line into at most maxFields fields. Runs of spaces separate
// fields, and spaces at either end are ignored; only 0x20 is a separator,
// so any other blank byte stays in a field and fails its validation.
func (fs *fields) split(line []byte) {
	fs.n = 0
	i := 0
	for fs.n < maxFields {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		if i == len(line) {
			return
		}
		j := i
		for j < len(line) && line[j] != ' ' {
			j++
		}
		// Capping the capacity keeps a caller that appends to a parsed
		// key from overwriting the rest of its input buffer.
		fs.f[fs.n], fs.end[fs.n] = line[i:j:j], j
		fs.n++
		i = j
	}
}

// isOp reports whether c is a request op letter.
func isOp(c byte) bool {
	return isKeyOp(c) || c == OpHello || c == OpCluster || c == OpMember
}

// isKeyOp reports whether c is the op letter of a request about a key:
// every op but H, C and M.
func isKeyOp(c byte) bool {
	switch c {
	case OpAcquire, OpRelease, OpExtend, OpQuery, OpShared, OpWatch, OpUnwatch:
		return true
	}
	return false
}

// isWord reports whether b is a non-empty run of bytes that a key, an owner,
// an ERR code or an address may hold: anything but space, control bytes and
// DEL.
func isWord(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return len(b) > 0
}

// isText reports whether b may be the free text of an ERR response: spaces
// are allowed, control bytes and DEL are not (a CR or LF would break the
// line framing).
func isText(b []byte) bool {
	for _, c := range b {
		if c < ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// parseUint parses a non-empty run of ASCII decimal digits. Leading zeros
// are accepted; a sign, any other byte or a value above 2^64-1 is not.
func parseUint(b []byte) (v uint64, ok bool) {
	if len(b) == 0 {
		return 0, false
	}
	for _, c := range b {
		d := uint64(c - '0')
		if d > 9 {
			return 0, false
		}
		if v > math.MaxUint64/10 || v == math.MaxUint64/10 && d > math.MaxUint64%10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseToken parses a fencing token: a decimal u64 other than 0.
func parseToken(b []byte) (uint64, bool) {
	v, ok := parseUint(b)
	return v, ok && v != 0
}
