package codec

import (
	"errors"
	"strconv"
)

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
	// CodeAuth answers an H with the wrong secret, or any other first line
	// on a server that requires one (protocol 1.2): "H - ERR auth".
	CodeAuth = "auth"
	// CodeRefused answers a membership request (M, protocol 1.3) that the
	// cluster will not carry out as asked: unsafe, or another change is
	// under way. Its text says why; nothing was changed.
	CodeRefused = "refused"
)

// The errors of SplitLine and ParseRequest. Their Text goes on the wire after
// "ERR <code> ", so it is short, plain ASCII and names the offending field as
// the protocol does.
var (
	// ErrTooLong is a line of more than MaxLine bytes; the server answers it
	// and closes the connection, since it cannot tell where the next line
	// starts.
	ErrTooLong = &ParseError{CodeTooLong, "line longer than 1024 bytes"}

	// ErrEmptyLine is a line with no fields at all.
	ErrEmptyLine = &ParseError{CodeBadRequest, "empty line"}
	// ErrBadOp is a first field that is not one of the letters A R K Q H C
	// M S W U.
	ErrBadOp = &ParseError{CodeBadRequest, "op must be A, R, K, Q, H, C, M, S, W or U"}
	// ErrMissingKey is a line with an op and nothing else.
	ErrMissingKey = &ParseError{CodeBadRequest, "missing key"}
	// ErrKeyTooLong is a key of more than MaxKey bytes.
	ErrKeyTooLong = &ParseError{CodeBadRequest, "key longer than 250 bytes"}
	// ErrKeyByte is a key with a control byte or DEL in it.
	ErrKeyByte = &ParseError{CodeBadRequest, "key must not contain control bytes or DEL"}
	// ErrMissingPermits is an S request without its permits.
	ErrMissingPermits = &ParseError{CodeBadRequest, "missing permits"}
	// ErrBadPermits is a permits that is not a decimal in 1..MaxPermits.
	ErrBadPermits = &ParseError{CodeBadRequest, "permits must be 1..1000000"}
	// ErrMissingLease is an A, S or K request without its lease_ms.
	ErrMissingLease = &ParseError{CodeBadRequest, "missing lease_ms"}
	// ErrBadLease is a lease_ms that is not a decimal in 1..MaxLeaseMs.
	ErrBadLease = &ParseError{CodeBadRequest, "lease_ms must be 1..86400000"}
	// ErrMissingWait is an A or S request without its wait_ms.
	ErrMissingWait = &ParseError{CodeBadRequest, "missing wait_ms"}
	// ErrBadWait is a wait_ms other than -1, 0 or a decimal in 1..MaxWaitMs.
	ErrBadWait = &ParseError{CodeBadRequest, "wait_ms must be -1, 0 or 1..86400000"}
	// ErrMissingToken is a K request without its token.
	ErrMissingToken = &ParseError{CodeBadRequest, "missing token"}
	// ErrBadToken is a token that is not a decimal u64 other than 0.
	ErrBadToken = &ParseError{CodeBadRequest, "token must be 1..18446744073709551615"}
	// ErrOwnerTooLong is an acquire whose owner has more than MaxOwner bytes.
	ErrOwnerTooLong = &ParseError{CodeBadRequest, "owner longer than 64 bytes"}
	// ErrOwnerByte is an acquire whose owner has a control byte or DEL in it.
	ErrOwnerByte = &ParseError{CodeBadRequest, "owner must not contain control bytes or DEL"}
	// ErrMissingSecret is an H request without its secret.
	ErrMissingSecret = &ParseError{CodeBadRequest, "missing secret"}
	// ErrSecretTooLong is an H request whose secret has more than MaxSecret
	// bytes (only a caller that parses lines longer than MaxLine sees it).
	ErrSecretTooLong = &ParseError{CodeBadRequest, "secret longer than 1022 bytes"}
	// ErrSecretByte is an H request whose secret has a control byte or DEL
	// in it.
	ErrSecretByte = &ParseError{CodeBadRequest, "secret must not contain control bytes or DEL"}
	// ErrClusterKey is a C or M whose key field is not "-".
	ErrClusterKey = &ParseError{CodeBadRequest, "C and M take the key -"}
	// ErrMissingVerb is an M with nothing after its key.
	ErrMissingVerb = &ParseError{CodeBadRequest, "missing member verb: LIST, ADD, REMOVE or PRIORITY"}
	// ErrExtraField is a request with more fields than its op takes.
	ErrExtraField = &ParseError{CodeBadRequest, "too many fields"}
)

// The errors of CheckSecret.
var (
	errEmptySecret   = errors.New("the secret is empty")
	errSecretTooLong = errors.New("the secret is longer than " + strconv.Itoa(MaxSecret) + " bytes")
	errSecretByte    = errors.New("the secret must not contain spaces, control characters or DEL")
)

// The errors of ParseResponse. A malformed response means the two ends do
// not speak the same protocol, so a client should drop the connection; these
// are plain errors, not ParseErrors, because nothing is answered to them.
var (
	// ErrRespOp is a response whose first field is not A R K Q H or '?'.
	ErrRespOp = errors.New("codec: bad response: bad op")
	// ErrRespKey is a response whose key is missing or malformed.
	ErrRespKey = errors.New("codec: bad response: bad key")
	// ErrRespStatus is a missing or unknown status word, or one that the op
	// cannot have (such as "Q k OK" or "? - FREE").
	ErrRespStatus = errors.New("codec: bad response: bad status for op")
	// ErrRespValue is a missing or malformed value after the status word,
	// such as a token of 0 or a HELD owner longer than MaxOwner.
	ErrRespValue = errors.New("codec: bad response: bad value")
	// ErrRespExtraField is a response with more fields than its status takes.
	ErrRespExtraField = errors.New("codec: bad response: too many fields")
)
