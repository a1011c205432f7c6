//go:build stagetrace

package statemachine

import sm "github.com/lni/dragonboat/v4/statemachine"

// The probe build's hook (engine/stagetrace, -tags stagetrace): the time
// dragonboat's apply worker hands entries to Update, before any is
// decoded. This package imports nothing of the project, so the engine
// sets the function that records it (SetUpdateHook). A normal build
// compiles stagehook_off.go instead, where it is nothing.

const stageOn = true

var updateHook func(shard uint64, ents []sm.Entry)

// SetUpdateHook makes f be called at the start of every Update, with the
// shard and the entries.
func SetUpdateHook(f func(shard uint64, ents []sm.Entry)) { updateHook = f }

func stageUpdate(shard uint64, ents []sm.Entry) {
	if updateHook != nil {
		updateHook(shard, ents)
	}
}
