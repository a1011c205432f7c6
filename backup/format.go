// Package backup is the file format of a baton backup: what a node's
// GET /backup serves, `baton backup` writes to a file, and
// `batond --restore FILE` starts a new cluster from. It frames one part per
// shard and checks each with a CRC; what a part holds (the shard's lock
// table, in the state machine's snapshot stream) is package
// statemachine's. So this package knows nothing of locks, and `baton`
// checks a backup with it without linking the state machine.
//
// A file, integers little endian:
//
//	header:  magic "btbk", version u8 (1), shards u32 (at least 1)
//	shards times, for shard 1, 2, ... in order, a frame:
//	  shard  u32   the shard's id
//	  locks  u64   locks held in the part (a figure to show; the part has it too)
//	  length u64   bytes of the part
//	  part   length bytes
//	  crc    u32   CRC-32C (Castagnoli) of the frame's shard, locks, length and part
//
// and nothing after the last frame. Each part is one shard's table at one
// point in time; the shards are taken one after the other, so the parts
// are consistent each on its own, not with each other (nothing in baton
// spans two shards).
package backup

import (
	"errors"
	"fmt"
	"hash/crc32"
)

const (
	// Magic opens every backup file.
	Magic = "btbk"
	// Version is the format version this package writes and reads.
	Version = 1

	headerLen      = 4 + 1 + 4
	frameHeaderLen = 4 + 8 + 8
	crcLen         = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrBad is what the errors of Reader and Check match (errors.Is) when the
// file is not a backup, is truncated, or a frame's checksum does not match.
var ErrBad = errors.New("bad backup")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBad}, args...)...)
}

// Part describes one shard's frame.
type Part struct {
	Shard  uint64 // the shard's id: 1 for the first frame, 2 for the next...
	Locks  uint64 // locks held in the part's table
	Length uint64 // bytes of the part
}
