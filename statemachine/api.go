// Package statemachine is baton's replicated lock table: the commands, their
// compact binary encoding (many commands to one Raft entry), the
// deterministic apply that assigns fencing tokens, and the dragonboat
// on-disk state machine that keeps the table in pebble.
//
// It knows nothing of connections or time: leases are stored as a duration
// (lease_ms), and the engine turns them into deadlines on every replica when
// the Observer tells it a grant or extend was applied.
package statemachine

// SKELETON: signatures agreed between packages; bodies are being written.

import (
	"github.com/cockroachdb/pebble"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// MaxShards is the largest shard id: a token carries its shard id in its low
// ShardBits bits, so tokens of different shards never collide.
const (
	ShardBits = 10
	MaxShards = 1<<ShardBits - 1
)

// Op is a replicated command's kind.
type Op uint8

// Commands.
const (
	OpGrant   Op = 1 // Grant{Key, LeaseMs}: take a free key, assign a new token
	OpRelease Op = 2 // Release{Key, Token}: Token 0 releases whoever holds Key
	OpExtend  Op = 3 // Extend{Key, Token, LeaseMs}
	OpExpire  Op = 4 // Expire{Key, Token}: the leader saw the lease run out
)

// Command is one replicated command. Key aliases the encoded entry when
// decoded; Batch.Append copies it.
type Command struct {
	Op      Op
	Key     []byte
	Token   uint64
	LeaseMs uint32
}

// Code is the outcome of one command.
type Code uint8

// Outcomes.
const (
	Granted       Code = 1 // Grant took the key; Result.Token is the new token
	GrantRejected Code = 2 // Grant found the key held; nothing changed
	Released      Code = 3 // Release freed the key
	NotHeld       Code = 4 // Release/Extend found no matching holder; nothing changed
	Extended      Code = 5 // Extend set the lease
	Expired       Code = 6 // Expire freed the key (token matched)
	Noop          Code = 7 // Expire found no matching holder, or an unknown op
)

// Result is the outcome of one command, in the order of the batch.
type Result struct {
	Code  Code
	Token uint64 // Granted: the new token; Released/Expired: the freed token
}

// Header identifies a batch's proposer, so that the proposing node can pair
// an applied entry with the requests waiting for it. Proposer is random per
// process start; Seq grows per proposal.
type Header struct {
	Proposer uint64
	Seq      uint64
}

// Batch builds one Raft entry from many commands. The zero value is ready.
type Batch struct{}

// Append adds c to the batch, copying its key.
func (b *Batch) Append(c Command) { panic("unimplemented") }

// Len is the number of commands in the batch.
func (b *Batch) Len() int { panic("unimplemented") }

// Seal writes h into the batch and returns the encoded entry. The bytes stay
// valid until the next Reset.
func (b *Batch) Seal(h Header) []byte { panic("unimplemented") }

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() { panic("unimplemented") }

// DecodeBatch decodes an entry into its header and commands, appending the
// commands to cmds (keys alias data). A malformed entry is an error.
func DecodeBatch(data []byte, cmds []Command) (Header, []Command, error) {
	panic("unimplemented")
}

// Lock is one held lock as the table stores it.
type Lock struct {
	Key     []byte
	Token   uint64
	LeaseMs uint32
}

// Observer learns, on every replica and in log order, what the table did.
// Calls for one shard never overlap; calls for different shards may.
// Byte slices are valid only during the call.
type Observer interface {
	// Reset says the shard's table was (re)loaded wholesale, by Open or by
	// RecoverFromSnapshot: forget what you knew of the shard and call each
	// to learn every lock it holds now.
	Reset(shardID uint64, each func(fn func(Lock)))
	// Applied reports one applied entry: its header, commands and results
	// (results[i] belongs to cmds[i]). It is called after the entry's
	// changes are in the table.
	Applied(shardID uint64, index uint64, h Header, cmds []Command, results []Result)
}

// Factory returns the dragonboat constructor for baton's on-disk state
// machine. All shards of a node share db (keys are prefixed by shard id);
// obs is told of every change.
func Factory(db *pebble.DB, obs Observer) sm.CreateOnDiskStateMachineFunc {
	panic("unimplemented")
}

// LookupKey is the query type the state machine's Lookup accepts: it answers
// a LookupResult for that key from the committed table.
type LookupKey []byte

// LookupResult answers a LookupKey.
type LookupResult struct {
	Held    bool
	Token   uint64
	LeaseMs uint32
}
