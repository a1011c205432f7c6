//go:build !stagetrace

package statemachine

import sm "github.com/lni/dragonboat/v4/statemachine"

// stageOn is false in a normal build: Update's hook for the probe build
// (stagehook_on.go, -tags stagetrace) compiles to nothing.
const stageOn = false

// SetUpdateHook does nothing: only the probe build calls the hook.
func SetUpdateHook(func(shard uint64, ents []sm.Entry)) {}

func stageUpdate(uint64, []sm.Entry) {}
