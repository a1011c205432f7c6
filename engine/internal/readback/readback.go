// Package readback builds what IterateEntries returns in baton's Raft log
// store (engine/seglog reads entries back from its segment files): each
// entry read back is decoded, checked to be the one expected, and counted
// against maxSize by dragonboat's rules. Those rules are what dragonboat's
// LogReader relies on, so a store must keep them to the letter; they are
// kept here, apart from the file format, with tests of their own.
//
// Dragonboat's rules: entries are consecutive from low; each adds its
// SizeUpperLimit to the size (not its encoded size); the entry that takes
// the size past maxSize is included and is the last, so that the result
// holds at least entry low even when that one entry alone exceeds maxSize
// (the LogReader drops the last entry when there is more than one).
package readback

import (
	"fmt"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Result is what IterateEntries returns, built one entry at a time.
type Result struct {
	// Entries are the caller's entries with those read back appended.
	Entries []pb.Entry
	// Size is the caller's size plus the SizeUpperLimit of each entry
	// read back.
	Size uint64

	next, maxSize uint64
}

// Start starts the result of IterateEntries(ents, size, ..., low, high,
// maxSize): ents and size as the caller gave them, and no entry read back
// yet, the first to come being low's.
func Start(ents []pb.Entry, size, low, maxSize uint64) Result {
	return Result{Entries: ents, Size: size, next: low, maxSize: maxSize}
}

// Next is the index of the entry to read back next: the store stops at the
// first index it does not hold.
func (r *Result) Next() uint64 { return r.next }

// Budget is how many more bytes of entries may be read back before Size
// passes maxSize (0 once it has); a store that reads several entries at a
// time can bound its reads with it.
func (r *Result) Budget() uint64 {
	if r.Size >= r.maxSize {
		return 0
	}
	return r.maxSize - r.Size
}

// Add decodes data, the encoding of the entry at Next, appends it and adds
// its size. full says Size is now past maxSize: that entry is the last. The
// entry does not keep data (Entry.Unmarshal copies Cmd), so the store may
// reuse it.
//
// An error (data does not decode, or holds another index) means the store
// holds something other than what it wrote; it names the index expected,
// and the store adds which replica's entries it read.
func (r *Result) Add(data []byte) (full bool, err error) {
	var e pb.Entry
	if err := e.Unmarshal(data); err != nil {
		return false, fmt.Errorf("entry %d: %w", r.next, err)
	}
	if e.Index != r.next {
		return false, fmt.Errorf("entry %d read back with index %d", r.next, e.Index)
	}
	r.Entries = append(r.Entries, e)
	r.Size += uint64(e.SizeUpperLimit())
	r.next++
	return r.Size > r.maxSize, nil
}
