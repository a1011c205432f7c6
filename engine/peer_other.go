//go:build !linux

package engine

// socketClosedByPeer cannot ask the kernel without POLLRDHUP; such systems
// rely on OnClose alone.
func socketClosedByPeer(int) bool { return false }

// writeSocket does not write directly here: answers go through the event
// loop.
func writeSocket(int, []byte) (int, bool) { return 0, false }
