package engine

import (
	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// The protocol's limits are parsed by codec and encoded into Raft commands
// by statemachine, and the engine passes what one accepts to the other: a
// key or owner that codec accepts and statemachine does not would make
// Batch.Append panic on client input. These constants fail to compile
// (a negative value converted to uint) as soon as the two disagree.
const (
	_ = uint(codec.MaxKey-sm.MaxKeyLen) + uint(sm.MaxKeyLen-codec.MaxKey)
	_ = uint(codec.MaxOwner-sm.MaxOwnerLen) + uint(sm.MaxOwnerLen-codec.MaxOwner)
)
