//go:build chaosmutation

package engine

import "os"

// The planted bugs of the engine for the chaos run's mutation check
// (tools/chaos, TestChaosCatchesPlantedBugs): a batond built with
// -tags chaosmutation and run with BATON_MUTATION=early-expiry expires
// leases early, and with BATON_MUTATION=shared-overcommit grants one
// shared hold more than a key's permits (with the state machine's half of
// that bug: statemachine/mutation_on.go), so that the test can show that
// the chaos run catches them. A normal build compiles mutation_off.go
// instead.

// Names of the bugs, as BATON_MUTATION selects them.
const (
	mutationEarlyExpiry      = "early-expiry"
	mutationSharedOvercommit = "shared-overcommit"
)

// earlyExpiry and sharedOvercommit say whether this process plants the
// bug, read once.
var (
	earlyExpiry      = os.Getenv("BATON_MUTATION") == mutationEarlyExpiry
	sharedOvercommit = os.Getenv("BATON_MUTATION") == mutationSharedOvercommit
)

// plantedPermits is called by grantFitting with the permits of a shared
// waiter, and returns the permits it lets in: one more with the bug.
func plantedPermits(permits int32) int32 {
	if sharedOvercommit {
		return permits + 1
	}
	return permits
}

// plantedDeadline is called by setDeadline with the deadline d of a lease
// of leaseMs from now, and returns the deadline to keep: with the bug
// planted, the lease is cut to half.
func plantedDeadline(d int64, leaseMs uint32, now int64) int64 {
	if earlyExpiry {
		return now + msToNanos(leaseMs)/2
	}
	return d
}
