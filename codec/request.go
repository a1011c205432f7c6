package codec

import "strconv"

// ParseRequest parses one request line (as returned by SplitLine) into r.
// r.Op and r.Key are set as soon as they are readable, so that on error a
// caller can still echo them; when r.Key is nil the error response is
// "? - ERR ...". r is overwritten completely; nothing is allocated. Every
// error is one of the package's *ParseError values.
//
// Fields are checked left to right and the first fault is reported, so "A k
// x" is ErrBadLease and "A k 1" is ErrMissingWait; ErrExtraField is checked
// last. A key field that is present but malformed leaves r.Key nil: echoing
// it would make a response line the client could not parse. A malformed
// owner likewise leaves r.Owner nil, so that nil always means "no usable
// owner" and a caller never acts on a rejected one. An H (protocol 1.2) sets
// r.Secret and never r.Key; r.Secret is nil unless the line is well-formed.
func ParseRequest(line []byte, r *Request) error {
	*r = Request{}
	var fs fields
	fs.split(line)
	f := &fs.f
	switch {
	case fs.n == 0:
		return ErrEmptyLine
	case len(f[0]) != 1 || !isOp(f[0][0]):
		return ErrBadOp
	}
	r.Op = f[0][0]
	if r.Op == OpHello {
		return parseHello(&fs, r)
	}
	switch {
	case fs.n < 2:
		return ErrMissingKey
	case len(f[1]) > MaxKey:
		return ErrKeyTooLong
	case !isWord(f[1]):
		return ErrKeyByte
	}
	r.Key = f[1]
	switch r.Op {
	case OpCluster, OpMember:
		return parseClusterOp(&fs, line, r)
	}

	var ok bool
	want := 2 // fields the op takes
	switch r.Op {
	case OpAcquire:
		want = 5 // the owner (protocol 1.1) is optional
		if err := parseAcquire(&fs, 2, r); err != nil {
			return err
		}
	case OpShared:
		want = 6 // the owner is optional
		if fs.n < 3 {
			return ErrMissingPermits
		}
		if r.Permits, ok = parsePermits(f[2]); !ok {
			return ErrBadPermits
		}
		if err := parseAcquire(&fs, 3, r); err != nil {
			return err
		}
	case OpRelease:
		want = 3
		if fs.n >= 3 {
			if r.Token, ok = parseToken(f[2]); !ok {
				return ErrBadToken
			}
		}
	case OpExtend:
		want = 4
		if fs.n < 3 {
			return ErrMissingToken
		}
		if r.Token, ok = parseToken(f[2]); !ok {
			return ErrBadToken
		}
		if fs.n < 4 {
			return ErrMissingLease
		}
		if r.LeaseMs, ok = parseLease(f[3]); !ok {
			return ErrBadLease
		}
	}
	if fs.n > want {
		return ErrExtraField
	}
	return nil
}

// parseAcquire parses the fields of an acquire from field i on, A's or
// S's: lease_ms, wait_ms and the optional owner.
func parseAcquire(fs *fields, i int, r *Request) error {
	f := &fs.f
	var ok bool
	if fs.n <= i {
		return ErrMissingLease
	}
	if r.LeaseMs, ok = parseLease(f[i]); !ok {
		return ErrBadLease
	}
	if fs.n <= i+1 {
		return ErrMissingWait
	}
	if r.WaitMs, ok = parseWait(f[i+1]); !ok {
		return ErrBadWait
	}
	if fs.n > i+2 {
		switch owner := f[i+2]; {
		case len(owner) > MaxOwner:
			return ErrOwnerTooLong
		case !isWord(owner):
			return ErrOwnerByte
		default:
			r.Owner = owner
		}
	}
	return nil
}

// parsePermits parses a permits: a decimal in 1..MaxPermits.
func parsePermits(b []byte) (uint32, bool) {
	v, ok := parseUint(b)
	if !ok || v < 1 || v > MaxPermits {
		return 0, false
	}
	return uint32(v), true
}

// parseHello parses the fields of "H <secret>" into r.Secret, which stays
// nil unless the whole line is well-formed.
func parseHello(fs *fields, r *Request) error {
	switch {
	case fs.n < 2:
		return ErrMissingSecret
	case len(fs.f[1]) > MaxSecret:
		return ErrSecretTooLong
	case !isWord(fs.f[1]):
		return ErrSecretByte
	case fs.n > 2:
		return ErrExtraField
	}
	r.Secret = fs.f[1]
	return nil
}

// parseClusterOp checks the fields of "C -" and "M - <verb> [<arg>...]"
// after the key, and sets r.Args of an M.
func parseClusterOp(fs *fields, line []byte, r *Request) error {
	switch {
	case string(r.Key) != HelloKey:
		return ErrClusterKey
	case r.Op == OpCluster && fs.n > 2:
		return ErrExtraField
	case r.Op == OpMember && fs.n < 3:
		return ErrMissingVerb
	}
	if r.Op == OpMember {
		r.Args = trimSpaces(line[fs.end[1]:])
	}
	return nil
}

// trimSpaces drops the spaces at either end of b.
func trimSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// parseLease parses a lease_ms: a decimal in 1..MaxLeaseMs.
func parseLease(b []byte) (uint32, bool) {
	v, ok := parseUint(b)
	if !ok || v < 1 || v > MaxLeaseMs {
		return 0, false
	}
	return uint32(v), true
}

// parseWait parses a wait_ms: a decimal in 0..MaxWaitMs, or -1. The only
// negative is -1, written with as many leading zeros as the client likes
// ("-01"); "-0" is refused rather than read as 0, since a minus sign means
// the client asked for a try-lock and is better told off than made to wait
// forever.
func parseWait(b []byte) (int64, bool) {
	if len(b) > 0 && b[0] == '-' {
		if v, ok := parseUint(b[1:]); ok && v == 1 {
			return WaitNone, true
		}
		return 0, false
	}
	v, ok := parseUint(b)
	if !ok || v > MaxWaitMs {
		return 0, false
	}
	return int64(v), true
}

// AppendRequest appends r as a request line, LF included, to dst. It writes
// the fields r's op takes, in canonical form, and does not validate them:
// that is ParseRequest's job at the other end. A release with Token 0 is
// written without a token, an acquire with an empty Owner without an owner
// (a plain version 1 acquire); an Owner on any other op is not written,
// since only A and S take one. An H is written with its Secret and no key, an M
// with its Args after the key.
func AppendRequest(dst []byte, r *Request) []byte {
	if r.Op == OpHello {
		dst = append(dst, OpHello, ' ')
		dst = append(dst, r.Secret...)
		return append(dst, '\n')
	}
	dst = append(dst, r.Op, ' ')
	dst = append(dst, r.Key...)
	switch r.Op {
	case OpShared:
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(r.Permits), 10)
		fallthrough
	case OpAcquire:
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(r.LeaseMs), 10)
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, r.WaitMs, 10)
		if len(r.Owner) > 0 {
			dst = append(dst, ' ')
			dst = append(dst, r.Owner...)
		}
	case OpRelease:
		if r.Token != 0 {
			dst = append(dst, ' ')
			dst = strconv.AppendUint(dst, r.Token, 10)
		}
	case OpExtend:
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, r.Token, 10)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(r.LeaseMs), 10)
	case OpMember:
		dst = append(dst, ' ')
		dst = append(dst, r.Args...)
	}
	return append(dst, '\n')
}

// AppendParseError appends the ERR response to a request that failed to
// parse with err: "<op> <key> ERR <code> <text>" when r.Key was read,
// "H - ERR <code> <text>" for a malformed H, else "? - ERR <code> <text>".
// ErrTooLong is always answered "? - ...", since SplitLine never got to fill
// a Request and r may still hold the previous line's op and key; r may be
// nil.
func AppendParseError(dst []byte, r *Request, err *ParseError) []byte {
	switch op := ParseErrorOp(r, err); op {
	case '?':
		dst = append(dst, "? -"...)
	case OpHello:
		dst = append(dst, OpHello, ' ')
		dst = append(dst, HelloKey...)
	default:
		dst = append(dst, op, ' ')
		dst = append(dst, r.Key...)
	}
	dst = append(dst, " ERR "...)
	dst = append(dst, err.Code...)
	dst = append(dst, ' ')
	dst = append(dst, err.Text...)
	return append(dst, '\n')
}

// ParseErrorOp is the op AppendParseError answers r and err with: r's op,
// or '?' when the line's op and key are unknown.
func ParseErrorOp(r *Request, err *ParseError) byte {
	switch {
	case r == nil || err.Code == CodeTooLong:
		return '?'
	case r.Op == OpHello:
		return OpHello
	case len(r.Key) == 0:
		return '?'
	}
	return r.Op
}
