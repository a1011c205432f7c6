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
