package codec

import (
	"bytes"
	"strconv"
)

// Status is the status word of a response.
type Status uint8

// Response statuses.
const (
	StatusOK Status = iota + 1
	StatusTimeout
	StatusNotHeld
	StatusHeld
	StatusFree
	StatusMoved
	StatusErr
	// StatusShared is "SHARED <holders> <permits>" (protocol 1.4), Q's and
	// W's answer while shared holds hold the key.
	StatusShared
)

// statusWords holds the wire spelling of each status; both directions use it.
var statusWords = [...]string{
	StatusOK:      "OK",
	StatusTimeout: "TIMEOUT",
	StatusNotHeld: "NOTHELD",
	StatusHeld:    "HELD",
	StatusFree:    "FREE",
	StatusMoved:   "MOVED",
	StatusErr:     "ERR",
	StatusShared:  "SHARED",
}

// String returns the status word as it is written on the wire.
func (s Status) String() string {
	if s >= StatusOK && int(s) < len(statusWords) {
		return statusWords[s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// fits reports whether a response to op may have status s, per the
// protocol's table: OK to A R K H C M S U, TIMEOUT to A S, NOTHELD to R K,
// HELD, SHARED and FREE to Q W, MOVED to A R K Q M S W, ERR to any op and
// to an unreadable line ('?').
func (s Status) fits(op byte) bool {
	switch s {
	case StatusOK:
		return op != OpQuery && op != OpWatch && isOp(op)
	case StatusTimeout:
		return op == OpAcquire || op == OpShared
	case StatusNotHeld:
		return op == OpRelease || op == OpExtend
	case StatusHeld, StatusFree, StatusShared:
		return op == OpQuery || op == OpWatch
	case StatusMoved:
		return isKeyOp(op) && op != OpUnwatch || op == OpMember
	case StatusErr:
		return isOp(op) || op == '?'
	}
	return false
}

// Response is one response line. Byte slices alias the parsed input (or the
// caller's data when formatting).
type Response struct {
	Op          byte   // the request's op letter, or '?' when it was unreadable
	Key         []byte // the request's key, or "-" (HelloKey) for H and an unreadable line
	Status      Status
	Token       uint64 // A OK, S OK, and HELD
	RemainingMs uint64 // HELD
	Owner       []byte // HELD: the grant's owner (protocol 1.1), nil when it has none
	Holders     uint64 // SHARED: how many shared holds hold the key, 1..Permits
	Permits     uint64 // SHARED: the key's permits, 1..MaxPermits
	Addr        []byte // MOVED: host:port of the leader
	Value       []byte // C OK and M OK: the rest of the line after OK, nil when there is none
	Code        []byte // ERR: one-word code
	Text        []byte // ERR: optional text
}

// AppendResponse appends r as a response line, LF included, to dst. Only the
// fields r.Status uses are written: Token for A OK and S OK, Value (when
// not empty) for C OK and M OK, Token, RemainingMs and Owner (when not
// empty) for HELD, Holders and Permits for SHARED, Addr for MOVED, Code
// and Text (when not empty) for ERR. An acquire's OK never carries the owner: the client that
// sent it knows it. r is not validated, except that a Status outside the
// known ones is written as "ERR internal", so that a server bug still yields
// a line the client can parse.
func AppendResponse(dst []byte, r *Response) []byte {
	dst = append(dst, r.Op, ' ')
	dst = append(dst, r.Key...)
	dst = append(dst, ' ')
	switch r.Status {
	case StatusOK:
		dst = append(dst, "OK"...)
		switch {
		case r.Op == OpAcquire || r.Op == OpShared:
			dst = append(dst, ' ')
			dst = strconv.AppendUint(dst, r.Token, 10)
		case (r.Op == OpCluster || r.Op == OpMember) && len(r.Value) > 0:
			dst = append(dst, ' ')
			dst = append(dst, r.Value...)
		}
	case StatusHeld:
		dst = append(dst, "HELD "...)
		dst = strconv.AppendUint(dst, r.Token, 10)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, r.RemainingMs, 10)
		if len(r.Owner) > 0 {
			dst = append(dst, ' ')
			dst = append(dst, r.Owner...)
		}
	case StatusShared:
		dst = append(dst, "SHARED "...)
		dst = strconv.AppendUint(dst, r.Holders, 10)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, r.Permits, 10)
	case StatusMoved:
		dst = append(dst, "MOVED "...)
		dst = append(dst, r.Addr...)
	case StatusErr:
		dst = append(dst, "ERR "...)
		dst = append(dst, r.Code...)
		if len(r.Text) > 0 {
			dst = append(dst, ' ')
			dst = append(dst, r.Text...)
		}
	case StatusTimeout, StatusNotHeld, StatusFree:
		dst = append(dst, statusWords[r.Status]...)
	default:
		dst = append(dst, "ERR "+CodeInternal...)
	}
	return append(dst, '\n')
}

// ParseResponse parses one response line (as returned by SplitLine) into r.
// r is overwritten completely, and r.Op and r.Key are set as soon as they
// are readable, so a client can fail the matching request even when the rest
// is malformed.
//
// Every form of the protocol is accepted, and nothing else: the status must
// fit the op, tokens are never 0, SHARED has 1..permits holders, the MOVED address and the ERR code are one
// word each, the key of an answer to H is "-", and that of C or M too
// unless it is ERR (which echoes a malformed request's key), the value of C OK or
// M OK is the rest of the line (text without control bytes), and the optional owner of
// HELD is a valid owner (ValidOwner;
// anything else there is ErrRespValue, and r.Owner stays nil). The ERR text
// is the rest of the line after the code, with the spaces around it dropped;
// it may be empty and must not hold control bytes. Every error is one of the
// ErrResp values.
func ParseResponse(line []byte, r *Response) error {
	*r = Response{}
	var fs fields
	fs.split(line)
	f := &fs.f
	if fs.n < 1 || len(f[0]) != 1 || !isOp(f[0][0]) && f[0][0] != '?' {
		return ErrRespOp
	}
	r.Op = f[0][0]
	if fs.n < 2 || !ValidKey(f[1]) || r.Op == OpHello && string(f[1]) != HelloKey {
		return ErrRespKey
	}
	r.Key = f[1]
	if fs.n < 3 {
		return ErrRespStatus
	}
	for s := StatusOK; int(s) < len(statusWords); s++ {
		if string(f[2]) == statusWords[s] {
			r.Status = s
			break
		}
	}
	if (r.Op == OpCluster || r.Op == OpMember) && string(r.Key) != HelloKey && r.Status != StatusErr {
		// Only the ERR answer to a C or M with another key echoes it.
		r.Key, r.Status = nil, 0
		return ErrRespKey
	}
	if !r.Status.fits(r.Op) {
		r.Status = 0
		return ErrRespStatus
	}

	var ok bool
	want := 3 // fields the status takes
	switch r.Status {
	case StatusOK:
		switch r.Op {
		case OpAcquire, OpShared:
			want = 4
			if r.Token, ok = parseToken(f[3]); !ok {
				return ErrRespValue
			}
		case OpCluster, OpMember:
			var ok bool
			if r.Value, ok = restOfLine(line, fs.end[2]); !ok {
				return ErrRespValue
			}
			return nil
		}
	case StatusHeld:
		want = 5
		if r.Token, ok = parseToken(f[3]); !ok {
			return ErrRespValue
		}
		if r.RemainingMs, ok = parseUint(f[4]); !ok {
			return ErrRespValue
		}
		if fs.n >= 6 {
			want = 6
			if !ValidOwner(f[5]) {
				return ErrRespValue
			}
			r.Owner = f[5]
		}
	case StatusShared:
		want = 5
		var permits uint32
		if r.Holders, ok = parseUint(f[3]); !ok || r.Holders == 0 {
			return ErrRespValue
		}
		if permits, ok = parsePermits(f[4]); !ok || r.Holders > uint64(permits) {
			return ErrRespValue
		}
		r.Permits = uint64(permits)
	case StatusMoved:
		want = 4
		if !isWord(f[3]) {
			return ErrRespValue
		}
		r.Addr = f[3]
	case StatusErr:
		if !isWord(f[3]) {
			return ErrRespValue
		}
		r.Code = f[3]
		if r.Text, ok = restOfLine(line, fs.end[3]); !ok {
			return ErrRespValue
		}
		return nil
	}
	if fs.n > want {
		return ErrRespExtraField
	}
	return nil
}

// restOfLine is what follows the field ending at end, the spaces around it
// dropped (nil when nothing does), and whether it is text without control
// bytes: ERR's text, and the value of C OK and M OK.
func restOfLine(line []byte, end int) ([]byte, bool) {
	rest := bytes.Trim(line[end:], " ")
	if !isText(rest) {
		return nil, false
	}
	if len(rest) == 0 {
		return nil, true
	}
	return rest, true
}
