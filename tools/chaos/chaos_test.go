package chaos

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// chaosDuration is the workload time of TestChaos in `make test`: long
// enough for ten faults or so, short enough that the package stays within a
// few minutes with start-up, checks and the other chaos tests.
const chaosDuration = 60 * time.Second

// TestChaos is one randomized round: CHAOS_SEED picks the seed (else a new
// one, logged), CHAOS_DURATION the workload time (a Go duration) and
// CHAOS_NODES the cluster's size (3 or 5). CHAOS_BATOND runs another batond
// binary than the one TestMain built, e.g. an older commit's, to see
// whether a seed finds a bug that was fixed since; CHAOS_MEMBERSHIP=off
// leaves the membership faults out, as before they existed (and as a
// batond from before protocol 1.3 needs).
func TestChaos(t *testing.T) {
	cfg := Config{
		Seed:         envSeed(t),
		Duration:     envDuration(t, chaosDuration),
		Nodes:        envNodes(t),
		Bin:          os.Getenv("CHAOS_BATOND"),
		NoMembership: envNoMembership(t),
	}
	Run(t, cfg).Verify(t)
}

// envNoMembership reads CHAOS_MEMBERSHIP: "off" leaves the membership
// faults out; unset or "on" keeps them.
func envNoMembership(t *testing.T) bool {
	switch s := os.Getenv("CHAOS_MEMBERSHIP"); s {
	case "", "on":
		return false
	case "off":
		return true
	default:
		t.Fatalf("CHAOS_MEMBERSHIP=%q: want on or off", s)
		return false
	}
}

// envNodes reads CHAOS_NODES; 0 (the default, 3) when unset.
func envNodes(t *testing.T) int {
	switch s := os.Getenv("CHAOS_NODES"); s {
	case "":
		return 0
	case "3", "5":
		n, _ := strconv.Atoi(s)
		return n
	default:
		t.Fatalf("CHAOS_NODES=%q: want 3 or 5", s)
		return 0
	}
}

// envSeed reads CHAOS_SEED; 0 (a seed from the clock) when unset.
func envSeed(t *testing.T) uint64 {
	s := os.Getenv("CHAOS_SEED")
	if s == "" {
		return 0
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seed == 0 {
		t.Fatalf("CHAOS_SEED=%q: want a decimal number above 0", s)
	}
	return seed
}

// envDuration reads CHAOS_DURATION, or returns def.
func envDuration(t *testing.T, def time.Duration) time.Duration {
	s := os.Getenv("CHAOS_DURATION")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("CHAOS_DURATION=%q: want a positive Go duration such as 90s or 30m", s)
	}
	return d
}

// regressionSeeds are seeds that once found a bug, each run again for
// long enough to replay the faults that found it (a shorter run of a seed
// injects a prefix of the same schedule, against the same workload
// choices). A seed fixes the schedule and the choices, not their timing, so
// a seed that found a race finds it again sometimes rather than always:
// keep it here anyway, with what it found. noMembership marks a seed
// found before the membership faults existed: its schedule is drawn
// without them (Config.NoMembership), as it was then.
var regressionSeeds = []struct {
	seed         uint64
	duration     time.Duration
	noMembership bool
	found        string
}{
	// Found a bug fixed by a52f67a ("every request gets exactly one
	// answer"), against the batond of ab6b1e6: the protocol checker saw
	// stray second answers "<op> <key> ERR unavailable not committed in
	// time, retry" about 5 s after the leader lost its quorum: a request
	// answered once when its proposal was dropped, then again when
	// dragonboat's proposal timeout fired. Against that binary this seed
	// replayed it 3 times in 4; against the fix it passes. Seed
	// 1796118740051964773 found the same bug after a pause-leader (fault 10,
	// at 55.6 s; replayed once in 2 with CHAOS_DURATION=66s): left out here,
	// as it costs a minute of `make test` for a bug this seed covers.
	{1796119039556610740, 20 * time.Second, true, "stray second answers at 14.2 s, after isolate-leader (fault 3, at 9.1 s)"},
}

// TestChaosRegression runs the seeds that once found a bug (against
// CHAOS_BATOND when set, as TestChaos).
func TestChaosRegression(t *testing.T) {
	if len(regressionSeeds) == 0 {
		t.Skip("no regression seeds yet: a seed that finds a bug goes into regressionSeeds")
	}
	for _, rs := range regressionSeeds {
		t.Run(strconv.FormatUint(rs.seed, 10), func(t *testing.T) {
			t.Logf("seed %d once found: %s", rs.seed, rs.found)
			Run(t, Config{Seed: rs.seed, Duration: rs.duration, NoMembership: rs.noMembership, Bin: os.Getenv("CHAOS_BATOND")}).Verify(t)
		})
	}
}

// plantedBugs are the bugs a batond built with -tags chaosmutation plants
// when BATON_MUTATION names them (statemachine/mutation_on.go,
// engine/mutation_on.go), and the checker that must catch each.
var plantedBugs = []struct {
	mutation string
	checker  string
	why      string
}{
	{"token-reuse", CheckerTokens, "every few grants the state machine does not advance its token counter"},
	{"grant-held", CheckerLinearizability, "the state machine grants a key that is held, with a new token"},
	{"early-expiry", CheckerLinearizability, "the engine expires leases after half their time"},
	{"shared-overcommit", CheckerShared, "the engine and the state machine grant one shared hold more than a key's permits"},
}

// mutationDuration is how long each planted-bug run lasts. Each bug has
// shown within the first two seconds of workload, and dozens of times in
// 15 s, so this is ample and still short.
const mutationDuration = 10 * time.Second

// mutationSeed fixes the planted-bug runs' workload, so that a failure to
// catch a bug can be replayed.
const mutationSeed = 20240601

// TestChaosCatchesPlantedBugs is the chaos run's own test: against a batond
// with a planted bug, a short run without faults must fail, and the checker
// meant for that bug must be among those that caught it.
func TestChaosCatchesPlantedBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	start := time.Now()
	bin, err := harness.BuildTags(t.TempDir(), "chaosmutation")
	if err != nil {
		t.Fatalf("build batond with -tags chaosmutation: %v", err)
	}
	t.Logf("built the mutation batond in %v", time.Since(start).Round(time.Millisecond))
	for _, bug := range plantedBugs {
		t.Run(bug.mutation, func(t *testing.T) {
			res := Run(t, Config{
				Seed: mutationSeed, Duration: mutationDuration, NoFaults: true,
				Bin: bin, Env: []string{"BATON_MUTATION=" + bug.mutation},
			})
			if !res.Failed() {
				t.Fatalf("planted bug %q (%s) was not caught", bug.mutation, bug.why)
			}
			if !res.CaughtBy(bug.checker) {
				t.Errorf("planted bug %q (%s) was caught by %v, but not by %s", bug.mutation, bug.why, res.Checkers(), bug.checker)
			}
			t.Logf("planted bug %q caught by %v, e.g. %s: %s", bug.mutation, res.Checkers(), res.Violations[0].Checker, res.Violations[0].Text)
		})
	}
}
