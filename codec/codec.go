// Package codec is baton's wire protocol (version 1): it parses request lines
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

// Request is one parsed request line. Key aliases the parsed input and is
// valid only as long as that input is.
type Request struct {
	Op      byte   // OpAcquire, OpRelease, OpExtend or OpQuery
	Key     []byte // 1..MaxKey bytes, each > 0x20 and != 0x7f
	LeaseMs uint32 // A and K: 1..MaxLeaseMs
	WaitMs  int64  // A: WaitForever, WaitNone or 1..MaxWaitMs
	Token   uint64 // R: 0 when absent; K: never 0
}

// ValidKey reports whether key is a well-formed key: 1..MaxKey bytes, none of
// them a space, a control byte or DEL. Any UTF-8 (or other high) bytes are
// allowed.
func ValidKey(key []byte) bool {
	return len(key) <= MaxKey && isWord(key)
}
