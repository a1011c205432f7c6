//go:build !stagetrace

package stagetrace

import (
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	dsm "github.com/lni/dragonboat/v4/statemachine"
)

// On is false in a normal build: nothing is traced, and call sites
// guarded by it compile to nothing. The functions below are the probe
// build's (on.go), empty.
const On = false

// Now is 0: the clock is the probe build's.
func Now() int64 { return 0 }

// ClockError is 0.
func ClockError() int64 { return 0 }

// Since is 0.
func Since(time.Time, int64) int64 { return 0 }

// Mark is empty: it takes no room where it is a field (not the last).
type Mark struct{}

// Set does nothing.
func (*Mark) Set(int64) {}

// Take is 0.
func (*Mark) Take() int64 { return 0 }

// Sampled is false.
func Sampled(uint64) bool { return false }

// Flush does nothing.
func Flush() {}

// SetNode does nothing.
func SetNode(uint64) {}

// Proposed does nothing.
func Proposed(_, _, _ uint64, _, _ int64) {}

// Applied does nothing.
func Applied(_, _, _, _ uint64, _, _ int64) {}

// Committed does nothing.
func Committed([]pb.Update, int64) {}

// Saved does nothing.
func Saved([]pb.Update, int64, int64, int64) {}

// Updating does nothing.
func Updating(uint64, []dsm.Entry) {}

// BatchSent does nothing.
func BatchSent(*pb.MessageBatch, int64) {}

// BatchReceived does nothing.
func BatchReceived(*pb.MessageBatch, int64) {}
