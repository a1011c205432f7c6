package engine

import (
	"errors"
	"net"
	"os"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// halfCloseSupported: the kernel tells a client's FIN from its reset
// (POLLRDHUP) and says what the client's kernel acknowledged (SIOCOUTQ), so
// a half-closed connection is answered to the end (halfclose.go).
const halfCloseSupported = true

// socketPeer polls fd without waiting. POLLRDHUP alone means the peer sent
// its FIN; POLLHUP or POLLERR that the connection is over (a reset);
// POLLNVAL that the descriptor is already closed, so the connection it
// belonged to is gone either way.
func socketPeer(fd int) peerState {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds[:], 0)
	if err != nil || n == 0 {
		return peerOpen
	}
	switch r := fds[0].Revents; {
	case r&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0:
		return peerGone
	case r&unix.POLLRDHUP != 0:
		return peerFinished
	}
	return peerOpen
}

// socketDelivery asks the kernel, without waiting, whether the peer's
// kernel has acknowledged everything written to fd: a peer that closed its
// end answers data with a reset instead.
func socketDelivery(fd int) delivery {
	if socketPeer(fd) == peerGone {
		return deliveryFailed
	}
	unacked, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	switch {
	case err != nil:
		return deliveryFailed
	case unacked == 0:
		return deliveryAcked
	}
	return deliveryPending
}

// writeSocket writes b to the non-blocking socket fd at once and returns
// how much of it the socket took: 0 when it took nothing or the write
// failed (the connection's event loop meets the error on its own write).
func writeSocket(fd int, b []byte) (int, bool) {
	n, err := unix.Write(fd, b)
	if err != nil || n < 0 {
		return 0, true
	}
	return n, true
}

// takeSocket takes c's socket away from gnet, in OnClose: it returns a
// connection of its own over a duplicate of the socket, which outlives
// gnet's close, and what gnet had not sent yet of the answers
// (takeOutbound).
func takeSocket(c gnet.Conn) (net.Conn, []byte, error) {
	sock, err := c.Dup()
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(sock), "")
	defer f.Close()
	leftover, err := takeOutbound(c, sock)
	if err != nil {
		// Part of the answers may be taken already: a reset at gnet's
		// close tells the client, rather than a stream with a hole.
		_ = unix.SetsockoptLinger(sock, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		return nil, nil, err
	}
	raw, err := net.FileConn(f) // a duplicate again, in the runtime's poller
	if err != nil {
		return nil, nil, err
	}
	return raw, leftover, nil
}

// takeOutbound takes out of gnet's outbound buffer of c the answers the
// socket had not taken, and returns them; sock is a duplicate of c's
// socket. It runs in OnClose, on c's loop, with nothing else writing to
// c's descriptor (connState.endOfInput).
//
// gnet writes what is left in that buffer after OnClose returns, without
// waiting (what the socket does not take then is lost), and has no call to
// read it. Its Flush writes the buffer to c's descriptor, whatever that is:
// so for the time of the flushes the descriptor is a pipe (dup3), whose
// other end is read here, and then the socket again, as gnet's epoll
// registration and close expect.
func takeOutbound(c gnet.Conn, sock int) ([]byte, error) {
	if c.OutboundBuffered() == 0 {
		return nil, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	fd := c.Fd()
	if err := unix.Dup3(p[1], fd, unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	out := make([]byte, 0, c.OutboundBuffered())
	buf := make([]byte, 64<<10)
	var err error
	for left := c.OutboundBuffered(); left > 0 && err == nil; {
		_ = c.Flush() // its error is the pipe's absent epoll registration, once the buffer is empty
		for {
			n, rerr := unix.Read(p[0], buf)
			if n <= 0 || rerr != nil {
				break
			}
			out = append(out, buf[:n]...)
		}
		now := c.OutboundBuffered()
		if now == left {
			err = errors.New("gnet's outbound buffer did not move into the pipe")
		}
		left = now
	}
	if rerr := unix.Dup3(sock, fd, unix.O_CLOEXEC); rerr != nil {
		// The descriptor gnet deletes from epoll and closes is the pipe's
		// now: the socket's registration would outlive it. Not seen:
		// dup3 fails only on bad descriptors.
		return nil, errors.Join(err, rerr)
	}
	return out, err
}
