//go:build !linux

package engine

// socketClosedByPeer cannot ask the kernel without POLLRDHUP; such systems
// rely on OnClose alone.
func socketClosedByPeer(int) bool { return false }
