//go:build chaosmutation

package engine

import "os"

// The planted bug of the engine for the chaos run's mutation check
// (tools/chaos, TestChaosCatchesPlantedBugs): a batond built with
// -tags chaosmutation and run with BATON_MUTATION=early-expiry expires
// leases early, so that the test can show that the chaos run catches it.
// A normal build compiles mutation_off.go instead.

// mutationEarlyExpiry names the bug, as BATON_MUTATION selects it.
const mutationEarlyExpiry = "early-expiry"

// earlyExpiry is whether this process plants the bug, read once.
var earlyExpiry = os.Getenv("BATON_MUTATION") == mutationEarlyExpiry

// plantedDeadline is called by setDeadline once it has set ks.deadline
// from now: with the bug planted, the lease is cut to half.
func plantedDeadline(ks *keyState, now int64) {
	if earlyExpiry {
		ks.deadline = now + msToNanos(ks.leaseMs)/2
	}
}
