// Package codec is baton's wire protocol (version 1.1): it parses request lines
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
)

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
	// MaxLeaseMs is the longest lease a client may ask for.
	MaxLeaseMs = 86_400_000
	// MaxWaitMs is the longest finite wait a client may ask for.
	MaxWaitMs = 86_400_000
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
	Op      byte   // OpAcquire, OpRelease, OpExtend or OpQuery
	Key     []byte // 1..MaxKey bytes, each > 0x20 and != 0x7f
	LeaseMs uint32 // A and K: 1..MaxLeaseMs
	WaitMs  int64  // A: WaitForever, WaitNone or 1..MaxWaitMs
	Token   uint64 // R: 0 when absent; K: never 0
	Owner   []byte // A: nil when absent, else 1..MaxOwner bytes with a key's byte rules
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
