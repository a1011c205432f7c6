package bench

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
)

// ownerSource makes the owners of Config.Owners: 32 hex digits, like the Go
// client's, a new one for every cycle of every slot, without allocating.
// The first 16 digits are random for the run, so that two runs against one
// server never share an owner; then the slot's number and its cycle count.
type ownerSource struct {
	run [8]byte
}

func newOwnerSource() *ownerSource {
	var o ownerSource
	_, _ = rand.Read(o.run[:])
	return &o
}

// appendOwner appends the owner of cycle n of slot client to dst.
func (o *ownerSource) appendOwner(dst []byte, client, n int) []byte {
	var b [16]byte
	copy(b[:8], o.run[:])
	binary.BigEndian.PutUint32(b[8:], uint32(client))
	binary.BigEndian.PutUint32(b[12:], uint32(n))
	return hex.AppendEncode(dst, b[:])
}
