//go:build !linux

package engine

import (
	"errors"
	"net"

	"github.com/panjf2000/gnet/v2"
)

// halfCloseSupported: without POLLRDHUP and SIOCOUTQ a client's FIN cannot
// be told from its leaving, nor a grant it read from one it never got; the
// end of a client's input is a disconnect here (halfclose.go).
const halfCloseSupported = false

// socketPeer cannot ask the kernel without POLLRDHUP; such systems rely on
// OnClose alone.
func socketPeer(int) peerState { return peerOpen }

// socketDelivery is not known here; nothing calls it (halfCloseSupported).
func socketDelivery(int) delivery { return deliveryFailed }

// writeSocket does not write directly here: answers go through the event
// loop.
func writeSocket(int, []byte) (int, bool) { return 0, false }

// takeSocket is not done here; nothing calls it (halfCloseSupported).
func takeSocket(gnet.Conn) (net.Conn, []byte, error) {
	return nil, nil, errors.New("half-close is not supported on this system")
}
