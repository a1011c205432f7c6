// Package codec is baton's wire protocol (version 1.4): it parses request lines
// in place and appends response lines to a caller's buffer, and does the
// reverse for clients. It allocates nothing per request, starts no
// goroutines and does no I/O, so the server's event loop and the client
// library can both drive it from their own buffers.
//
// A reader feeds its buffered input to SplitLine, hands each complete line to
// ParseRequest (server) or ParseResponse (client), and drops the n bytes the
// line took (LineReader keeps that bookkeeping for a reader that owns its
// buffer and reads with blocking calls). The parsed values alias that input,
// so they are only valid until the buffer is reused.
//
// The full protocol is described in docs/protocol.md.
package codec

// Request op letters.
const (
	OpAcquire byte = 'A'
	OpRelease byte = 'R'
	OpExtend  byte = 'K'
	OpQuery   byte = 'Q'
	// OpHello is "H <secret>" (protocol 1.2): a client's first line on a
	// server that requires the shared secret. It names no key; its answers
	// are "H - OK" and "H - ERR auth".
	OpHello byte = 'H'
	// OpCluster is "C -" (protocol 1.3): which members serve clients. Its
	// answer is "C - OK <client_addr>[,<client_addr>...]", the voters'
	// client addresses in priority order.
	OpCluster byte = 'C'
	// OpMember is "M - <verb> [<arg>...]" (protocol 1.3, docs/protocol.md):
	// an operator's membership request (LIST, ADD, REMOVE, PRIORITY). Its
	// answers are "M - OK [<value>...]", MOVED to the member that
	// coordinates changes, or ERR.
	OpMember byte = 'M'
	// OpShared is "S <key> <permits> <lease_ms> <wait_ms> [<owner>]"
	// (protocol 1.4): one of permits shared holds of the key. Its answers
	// are those of A.
	OpShared byte = 'S'
	// OpWatch is "W <key>" (protocol 1.4): the key's committed state at
	// once, then a line each time its holders change ("W <key> HELD ...",
	// "W <key> SHARED ...", "W <key> FREE"), until U, the connection's
	// end, or "W <key> MOVED <addr>".
	OpWatch byte = 'W'
	// OpUnwatch is "U <key>" (protocol 1.4): the end of this connection's
	// watch of the key, answered "U <key> OK".
	OpUnwatch byte = 'U'
)

// NumOps is the number of request ops (A, R, K, Q, H, C, M, S, W and U).
const NumOps = 10

// OpIndex maps a request op to 0..NumOps-1 (A, R, K, Q, H, C, M, S, W, U
// in that order) and anything else to -1, so that tables kept per op can
// be arrays.
func OpIndex(op byte) int {
	switch op {
	case OpAcquire:
		return 0
	case OpRelease:
		return 1
	case OpExtend:
		return 2
	case OpQuery:
		return 3
	case OpHello:
		return 4
	case OpCluster:
		return 5
	case OpMember:
		return 6
	case OpShared:
		return 7
	case OpWatch:
		return 8
	case OpUnwatch:
		return 9
	}
	return -1
}

// HelloKey is what an answer to H carries in the key field, and the key
// field of C and M, which are about the cluster and name no key.
const HelloKey = "-"

// Protocol limits.
const (
	// MaxLine is the longest request line, not counting its LF (or CR LF).
	MaxLine = 1024
	// MaxKey is the longest key in bytes.
	MaxKey = 250
	// MaxOwner is the longest owner of an acquire in bytes (protocol 1.1):
	// room for a random 128-bit value in any common spelling (hex, UUID,
	// base64) with a prefix, while keeping the lock table's entries small.
	MaxOwner = 64
	// MaxSecret is the longest shared secret of H: the longest line holds
	// "H " and the secret.
	MaxSecret = MaxLine - 2
	// MaxLeaseMs is the longest lease a client may ask for.
	MaxLeaseMs = 86_400_000
	// MaxWaitMs is the longest finite wait a client may ask for.
	MaxWaitMs = 86_400_000
	// MaxPermits is the largest permits of a shared hold (protocol 1.4).
	MaxPermits = 1_000_000
)

// Wait values with a special meaning.
const (
	// WaitForever (wait_ms = 0) waits until the lock is granted.
	WaitForever int64 = 0
	// WaitNone (wait_ms = -1) is a try-lock: grant now or answer TIMEOUT.
	WaitNone int64 = -1
)

// Request is one parsed request line. Key and Owner alias the parsed input
// and are valid only as long as that input is: whoever keeps an owner past
// the line (a waiter, the lock table) must copy it.
type Request struct {
	Op      byte   // one of the Op constants
	Key     []byte // 1..MaxKey bytes, each > 0x20 and != 0x7f; nil for H, "-" for C and M
	LeaseMs uint32 // A, S and K: 1..MaxLeaseMs
	WaitMs  int64  // A and S: WaitForever, WaitNone or 1..MaxWaitMs
	Token   uint64 // R: 0 when absent; K: never 0
	Permits uint32 // S: 1..MaxPermits
	Owner   []byte // A and S: nil when absent, else 1..MaxOwner bytes with a key's byte rules
	Secret  []byte // H: 1..MaxSecret bytes with a key's byte rules
	// Args is, for M, the rest of the line after "M -": the verb and its
	// arguments, spaces at either end dropped (never empty). Membership
	// requests are rare and the server reads them apart (engine), so the
	// codec does not split them further.
	Args []byte
}

// ValidKey reports whether key is a well-formed key: 1..MaxKey bytes, none of
// them a space, a control byte or DEL. Any UTF-8 (or other high) bytes are
// allowed.
func ValidKey(key []byte) bool {
	return len(key) <= MaxKey && isWord(key)
}

// ValidOwner reports whether owner is a well-formed owner of an acquire:
// 1..MaxOwner bytes with the same byte rules as a key. A client checks its
// owner with it before sending, since AppendRequest writes whatever it gets.
func ValidOwner(owner []byte) bool {
	return len(owner) <= MaxOwner && isWord(owner)
}

// ValidSecret reports whether secret can be sent in an H request: 1 to
// MaxSecret bytes, none of them a space, a control byte or DEL (the same
// rules as a key, so that it is one field of the line).
func ValidSecret(secret []byte) bool {
	return len(secret) <= MaxSecret && isWord(secret)
}

// CheckSecret says why secret cannot be sent in an H request, or returns
// nil when it can (ValidSecret).
func CheckSecret(secret []byte) error {
	switch {
	case len(secret) == 0:
		return errEmptySecret
	case len(secret) > MaxSecret:
		return errSecretTooLong
	case !isWord(secret):
		return errSecretByte
	}
	return nil
}

// ParseSecret reads a shared secret from the contents of a secret file: a
// trailing newline (LF or CR LF) is not part of it. It fails (CheckSecret)
// when what is left cannot be sent in an H request, so that a server and
// its clients refuse such a file alike, and at start.
func ParseSecret(data []byte) ([]byte, error) {
	s := data
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
		if n := len(s); n > 0 && s[n-1] == '\r' {
			s = s[:n-1]
		}
	}
	if err := CheckSecret(s); err != nil {
		return nil, err
	}
	return s, nil
}
