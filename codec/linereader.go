package codec

// LineReader is the input side of a connection that reads protocol lines
// with blocking reads (a client, the load generator, a test server): a fixed
// buffer the caller fills from the network and drains line by line, in
// place. It keeps the bookkeeping every such reader needs (where the unread
// bytes are, moving them to the front when the buffer runs out) in one
// place; it does no I/O itself, so the caller keeps its own deadlines and
// error handling.
//
//	n, err := nc.Read(lr.Free())
//	lr.Filled(n)
//	for {
//		line, lerr := lr.Next()
//		if lerr != nil || line == nil { ... }
//		...
//	}
//
// A line returned by Next aliases the buffer: it is valid until the next
// call to Free.
type LineReader struct {
	buf  []byte
	r, w int // the unread bytes are buf[r:w]
}

// minLineReaderSize is the smallest buffer a LineReader uses: one longest
// line and its CR LF always fit, so a full buffer without a complete line
// is a line too long, which Next reports, and never a deadlock.
const minLineReaderSize = MaxLine + 2

// NewLineReader returns a LineReader with a buffer of size bytes (at least
// MaxLine+2). A buffer that holds many lines lets a busy connection read a
// whole batch of answers per system call.
func NewLineReader(size int) *LineReader {
	return &LineReader{buf: make([]byte, max(size, minLineReaderSize))}
}

// Free returns the space to read into: everything after the unread bytes.
// When nothing is unread the buffer starts over; when the unread bytes
// reach the end, they move to the front first.
func (lr *LineReader) Free() []byte {
	if lr.r == lr.w {
		lr.r, lr.w = 0, 0
	} else if lr.w == len(lr.buf) {
		lr.w = copy(lr.buf, lr.buf[lr.r:lr.w])
		lr.r = 0
	}
	return lr.buf[lr.w:]
}

// Filled records that n bytes were read into the slice Free returned.
func (lr *LineReader) Filled(n int) {
	lr.w += n
}

// Next returns the next complete line, without its LF or CR LF (as
// SplitLine), or nil when no complete line is buffered. An error
// (ErrTooLong) means the stream cannot be trusted any more.
func (lr *LineReader) Next() ([]byte, error) {
	line, n, err := SplitLine(lr.buf[lr.r:lr.w])
	if err != nil || n == 0 {
		return nil, err
	}
	lr.r += n
	return line, nil
}

// Reset forgets whatever is buffered, for a new connection.
func (lr *LineReader) Reset() {
	lr.r, lr.w = 0, 0
}

// Buffered is the number of bytes read and not yet returned as lines.
func (lr *LineReader) Buffered() int {
	return lr.w - lr.r
}
