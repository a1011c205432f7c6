//go:build !chaosmutation

package engine

// plantedDeadline is the hook of the chaos run's planted bug (see
// mutation_on.go, built only with -tags chaosmutation). In a normal build
// there is no bug to plant: it returns the deadline as it is, and the
// compiler inlines it to nothing.
func plantedDeadline(d int64, _ uint32, _ int64) int64 { return d }

// plantedPermits is the hook of the chaos run's planted shared-overcommit
// bug: in a normal build it returns permits as they are.
func plantedPermits(permits int32) int32 { return permits }
