package codec

// SKELETON: signatures agreed between packages; bodies are being written.

// ParseError says why a request line cannot be served as written. Code is
// the one-word ERR code ("badrequest" or "toolong"), Text a short reason.
// Every ParseError the package returns is a package-level value, so a bad
// request costs no allocation; compare with errors.Is.
type ParseError struct {
	Code string
	Text string
}

func (e *ParseError) Error() string { return e.Code + ": " + e.Text }

// Error codes of ERR responses.
const (
	CodeBadRequest  = "badrequest"
	CodeTooLong     = "toolong"
	CodeUnavailable = "unavailable"
	CodeOverloaded  = "overloaded"
	CodeInternal    = "internal"
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
)

// Response is one response line. Byte slices alias the parsed input (or the
// caller's data when formatting).
type Response struct {
	Op          byte   // the request's op letter, or '?' when it was unreadable
	Key         []byte // the request's key, or "-" when it was unreadable
	Status      Status
	Token       uint64 // A OK and Q HELD
	RemainingMs uint64 // Q HELD
	Addr        []byte // MOVED: host:port of the leader
	Code        []byte // ERR: one-word code
	Text        []byte // ERR: optional text
}

// SplitLine finds the first complete line in buf. It returns the line
// without its LF and without a CR right before the LF, and n, the number of
// bytes the line took including the terminator. n == 0 with a nil error means
// buf holds no complete line yet. A line longer than MaxLine returns
// ErrTooLong, as soon as that is certain (even before its LF arrives).
func SplitLine(buf []byte) (line []byte, n int, err error) { panic("unimplemented") }

// ParseRequest parses one request line (as returned by SplitLine) into r.
// r.Op and r.Key are set as soon as they are readable, so that on error a
// caller can still echo them; when r.Key is nil the error response is
// "? - ERR ...". r is overwritten completely; nothing is allocated.
func ParseRequest(line []byte, r *Request) error { panic("unimplemented") }

// AppendRequest appends r as a request line, LF included, to dst.
func AppendRequest(dst []byte, r *Request) []byte { panic("unimplemented") }

// AppendResponse appends r as a response line, LF included, to dst.
func AppendResponse(dst []byte, r *Response) []byte { panic("unimplemented") }

// AppendParseError appends the ERR response to a request that failed to
// parse with err: "<op> <key> ERR <code> <text>" when r.Key was read, else
// "? - ERR <code> <text>".
func AppendParseError(dst []byte, r *Request, err *ParseError) []byte {
	panic("unimplemented")
}

// ParseResponse parses one response line (as returned by SplitLine) into r.
func ParseResponse(line []byte, r *Response) error { panic("unimplemented") }
