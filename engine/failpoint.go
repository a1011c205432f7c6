package engine

import (
	"os"
	"strings"
)

// Failpoints are crashes on purpose at named points of the engine, for the
// tests that need a crash at one exact moment (a coordinator that dies
// between two shards of a membership change), which no signal sent from
// outside can hit reliably. etcd's robustness tests use gofail so. They
// are off unless the environment variable BATON_FAILPOINTS names them,
// comma-separated; a name that is not one of the constants below does
// nothing.
const (
	// failBetweenShards: the coordinator of a membership change crashes
	// once the change is made in the first shard, before the next.
	failBetweenShards = "membership-between-shards"
	// failBeforeReady: a learner that has caught up crashes instead of
	// saying so in the directory.
	failBeforeReady = "learner-before-ready"
)

// failpointExit is the exit status of a crash at a failpoint.
const failpointExit = 3

// failpoints are the failpoints BATON_FAILPOINTS turns on.
var failpoints = parseFailpoints(os.Getenv("BATON_FAILPOINTS"))

// parseFailpoints reads BATON_FAILPOINTS.
func parseFailpoints(env string) map[string]bool {
	on := map[string]bool{}
	for name := range strings.SplitSeq(env, ",") {
		if name = strings.TrimSpace(name); name != "" {
			on[name] = true
		}
	}
	return on
}

// failpoint crashes the process, as kill -9 would (nothing flushed, no
// hand-off), when the failpoint name is on.
func (n *Node) failpoint(name string) {
	if !failpoints[name] {
		return
	}
	n.log.Error("crashing on purpose at a failpoint (BATON_FAILPOINTS)", "failpoint", name)
	os.Exit(failpointExit)
}
