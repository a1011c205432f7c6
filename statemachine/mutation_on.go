//go:build chaosmutation

package statemachine

import "os"

// The planted bugs of the chaos run's mutation check (tools/chaos,
// TestChaosCatchesPlantedBugs): a batond built with -tags chaosmutation
// breaks the lock table in the way the environment variable
// BATON_MUTATION names, so that the test can show that the chaos run's
// checkers catch it. A normal build compiles mutation_off.go instead, and
// none of this exists there.

// Names of the planted bugs, as BATON_MUTATION selects them.
const (
	// mutationTokenReuse: every few grants the token counter is not
	// advanced, so a grant reissues the shard's previous token.
	mutationTokenReuse = "token-reuse"
	// mutationGrantHeld: a Grant of a key that is held succeeds, with a new
	// token, instead of being rejected.
	mutationGrantHeld = "grant-held"
	// mutationSharedOvercommit: a shared Grant of a key whose permits are
	// all taken succeeds (with the engine's half: engine/mutation_on.go).
	mutationSharedOvercommit = "shared-overcommit"
)

// plantedFull is called by grantShared with whether every permit of the
// key is taken, and returns what it should take that to be.
func plantedFull(full bool) bool {
	return full && mutation != mutationSharedOvercommit
}

// mutation is the planted bug selected for this process, read once.
var mutation = os.Getenv("BATON_MUTATION")

// plantedGrant is called by apply on every Grant before it looks at held,
// and returns what apply should take held to be. It may change the table as
// the selected bug does.
func (t *table) plantedGrant(key []byte, held bool, i uint32) bool {
	switch {
	case mutation == mutationGrantHeld && held:
		// Throw the holder out, so that the Grant goes through as over a
		// free key; the table stays consistent, only the rule is broken.
		t.release(i)
		return false
	case mutation == mutationTokenReuse && !held && t.seq > 0 && reuseNow(key, t.seq):
		// apply advances the counter next: this makes it issue the
		// previous token again.
		t.seq--
	}
	return held
}

// reuseNow picks about one grant in four, deterministically (every
// replica must plant the same bug): from the key's FNV-1a hash and the
// counter.
func reuseNow(key []byte, seq uint64) bool {
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return (h+seq)%4 == 0
}
