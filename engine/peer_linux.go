package engine

import "golang.org/x/sys/unix"

// socketClosedByPeer polls fd without waiting. POLLRDHUP means the peer shut
// down its side; POLLNVAL means the descriptor is already closed, so the
// connection it belonged to is gone either way.
func socketClosedByPeer(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds[:], 0)
	if err != nil || n == 0 {
		return false
	}
	return fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
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
