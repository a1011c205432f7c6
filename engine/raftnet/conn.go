package raftnet

import (
	"bufio"
	"net"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/baton-dev/baton/engine/stagetrace"
)

const (
	// writeTimeout bounds one frame's write: a peer that stops reading
	// ends the connection instead of blocking its sender for ever.
	writeTimeout = 5 * time.Second
	// endTimeout bounds the wait for frameEndAck when a snapshot
	// connection closes.
	endTimeout = 2 * time.Second
	// keepBuffer is the largest send buffer a connection keeps between
	// frames; a larger one (a big catch-up batch) is dropped after use
	// rather than pinned for the connection's life.
	keepBuffer = 1 << 20
)

// sender writes frames on one connection. dragonboat uses a connection from
// one goroutine at a time, so a sender needs no lock.
type sender struct {
	conn net.Conn
	buf  []byte
}

// frame returns a buffer for a frame whose payload takes at most size bytes:
// the payload goes at [headerSize:].
func (s *sender) frame(size int) []byte {
	if n := headerSize + size; cap(s.buf) < n {
		s.buf = make([]byte, n)
	}
	return s.buf[:headerSize+size]
}

// send marshals m, whose marshalled size is at most size, into a frame of
// kind and writes it.
func (s *sender) send(kind byte, m pb.Marshaler, size int) error {
	buf := s.frame(size)
	payload := pb.MustMarshalTo(m, buf[headerSize:])
	return s.write(buf, kind, len(payload))
}

// write sends the frame of kind whose payload was marshalled into
// buf[headerSize:headerSize+n], header and payload in one write.
func (s *sender) write(buf []byte, kind byte, n int) error {
	putHeader(buf[:headerSize], kind, buf[headerSize:headerSize+n])
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := s.conn.Write(buf[:headerSize+n])
	if cap(s.buf) > keepBuffer {
		s.buf = nil
	}
	return err
}

// messageConn carries Raft message batches to one peer (raftio.IConnection).
//
// The peer never writes on it, so a read returns only when the peer is gone
// (its process ended, and its kernel closed the socket) or the connection is
// closed: a goroutine waits for that (use), and the next batch goes on a new
// connection, dialled then (the peer may be back), or fails at once if the
// peer cannot be reached. Before, the first batch after the peer died was
// written into the void (the write succeeds; the peer's reset comes back
// after it) and only the second failed, whenever dragonboat next had
// something for that peer on that connection: often after the peer had
// restarted. Each such failure trips dragonboat's circuit breaker for the
// peer, which then drops every message to it for half a second or more, and
// dragonboat keeps several connections to a peer (one per shard partition),
// each failing in its turn: a restarted node heard from no leader for
// seconds, and kept campaigning instead of catching up.
type messageConn struct {
	sender
	redial func() (net.Conn, error) // a new connection to the same peer
	gone   chan struct{}            // closed once a read on conn returned: the peer is gone
}

// newMessageConn carries batches on c, and on a new connection from redial
// once the peer of the last one is gone.
func newMessageConn(c net.Conn, redial func() (net.Conn, error)) *messageConn {
	mc := &messageConn{redial: redial}
	mc.use(c)
	return mc
}

// use makes c the connection batches go on, watched for its peer going
// away. Bytes the peer should not have sent count as going away too.
func (c *messageConn) use(conn net.Conn) {
	gone := make(chan struct{})
	c.conn, c.gone = conn, gone
	go func() {
		var b [1]byte
		_, _ = conn.Read(b[:]) // until the peer closes or resets it, or Close
		close(gone)
	}()
}

// SendMessageBatch sends batch in one frame, on a new connection if the
// peer of the last one is gone.
func (c *messageConn) SendMessageBatch(batch pb.MessageBatch) error {
	select {
	case <-c.gone:
		_ = c.conn.Close()
		conn, err := c.redial()
		if err != nil {
			return err
		}
		c.use(conn)
	default:
	}
	var sendAt int64
	if stagetrace.On {
		sendAt = stagetrace.Now()
	}
	err := c.send(frameBatch, &batch, batch.SizeUpperLimit())
	if stagetrace.On && err == nil {
		stagetrace.BatchSent(&batch, sendAt)
	}
	return err
}

// Close closes the connection.
func (c *messageConn) Close() { _ = c.conn.Close() }

// snapshotConn carries the chunks of snapshots to one peer
// (raftio.ISnapshotConnection).
type snapshotConn struct {
	sender
}

// SendChunk sends chunk in one frame.
func (c *snapshotConn) SendChunk(chunk pb.Chunk) error {
	return c.send(frameChunk, &chunk, chunk.Size())
}

// Close ends the stream with frameEnd and waits, up to endTimeout, for the
// receiver's frameEndAck before it closes the connection, so that the last
// chunks are handled, not lost to a reset.
func (c *snapshotConn) Close() {
	defer func() { _ = c.conn.Close() }()
	if err := c.write(c.frame(0), frameEnd, 0); err != nil {
		return
	}
	if err := c.conn.SetReadDeadline(time.Now().Add(endTimeout)); err != nil {
		return
	}
	var hdr [headerSize]byte
	_, _, _, _ = readFrame(bufio.NewReaderSize(c.conn, headerSize), hdr[:], nil)
}
