//go:build !chaosmutation

package statemachine

// plantedGrant is the hook of the chaos run's planted bugs (see
// mutation_on.go, built only with -tags chaosmutation). In a normal build
// there is no bug to plant: it returns held as it is, and the compiler
// inlines it to nothing.
func (*table) plantedGrant(_ []byte, held bool, _ uint32) bool { return held }

// plantedFull is the hook of the chaos run's planted shared-overcommit
// bug: in a normal build it returns full as it is.
func plantedFull(full bool) bool { return full }
