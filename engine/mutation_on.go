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

// plantedDeadline is called by setDeadline with the deadline d of a lease
// of leaseMs from now, and returns the deadline to keep: with the bug
// planted, the lease is cut to half.
func plantedDeadline(d int64, leaseMs uint32, now int64) int64 {
	if earlyExpiry {
		return now + msToNanos(leaseMs)/2
	}
	return d
}
