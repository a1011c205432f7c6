package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/tools/harness"
)

// DefaultKeys are the keys of the workload: six keys that FNV-1a, baton's
// routing hash, spreads over all four shards (two shards get one key each,
// so their token counters serve a single key).
var DefaultKeys = []string{"chaos/a", "chaos/b", "chaos/c", "chaos/d", "chaos/e", "chaos/f"}

// ProbeKeys are the availability prober's keys (see Workload): one on each
// of the four shards, so that a fault that stops one shard only shows too.
var ProbeKeys = []string{"chaos/probe-0", "chaos/probe-1", "chaos/probe-2", "chaos/probe-3"}

// Defaults of Config.
const (
	DefaultNodes   = 3
	DefaultWorkers = 12
	// DefaultSharedWorkers is how many shared workers (shared.go) run
	// beside the workers: three for each of the two SharedKeys, whose
	// permits are 2, so that they queue.
	DefaultSharedWorkers = 6
	DefaultClients       = 3
	DefaultDuration      = 60 * time.Second
	// AnswerBound is the slack Check gives every request beyond its own
	// wait: a failover, a restart and a few retries fit in it.
	AnswerBound = 15 * time.Second
)

// Bounds of the end of a run.
const (
	// workloadStop bounds the wait for the workers to stop: a holder may
	// be in an extend and then a release, each bounded by callSlack.
	workloadStop = 2*callSlack + maxLease + CallGrace
	// freeWithin bounds the wait for every lease to run out once the
	// workload stopped: the longest lease, restarted by a change of leader
	// or two as node 1 takes its shards back, with time to spare.
	freeWithin = 30 * time.Second
	// leadersWithin bounds the wait for every key to have a leader before
	// the workload starts.
	leadersWithin = 20 * time.Second
	// watchedKeys is how many of the workload's keys are watched.
	watchedKeys = 4
	// availabilityTail is how long after a fault's end its availability
	// window reaches.
	availabilityTail = 5 * time.Second
)

// Names of the checkers, as Result.Violations name them. Check's own
// (history) checkers are "protocol" (exactly one answer per request),
// "hang", "tokens" and "linearizability".
const (
	CheckerProtocol        = "protocol"
	CheckerHang            = "hang"
	CheckerTokens          = "tokens"
	CheckerLinearizability = "linearizability"
	// CheckerFence: the fenced resource turned a holder away inside its
	// sure interval.
	CheckerFence = "fence"
	// CheckerFreeAtEnd: once every lease ran out, a key was not FREE on
	// the node leading it, or the other nodes did not send clients there.
	CheckerFreeAtEnd = "free-at-end"
	// CheckerNodeExit: a node exited that the schedule did not kill or stop,
	// or a graceful stop did not exit 0.
	CheckerNodeExit = "node-exit"
	// CheckerCallBound: a client call returned later than its context's
	// deadline allows, or the workload did not stop in time.
	CheckerCallBound = "call-bound"
)

// Config is what a chaos run does. The zero value, but for Seed, is a
// normal run: 3 nodes, 12 workers over DefaultKeys, faults, 60 s.
type Config struct {
	// Seed draws the schedule and every worker's choices; 0 draws a seed
	// from the clock.
	Seed uint64
	// Duration of the workload, faults included; 0 means DefaultDuration.
	Duration time.Duration
	// Nodes in the cluster, 3 or 5; 0 means DefaultNodes.
	Nodes int
	// NoFaults runs the workload against a healthy cluster.
	NoFaults bool
	// NoMembership leaves the membership faults (ReplaceMember,
	// AddRemoveMember) out of the schedule: a seed then draws the schedule
	// it drew before they existed.
	NoMembership bool
	// Bin is the batond to run; "" means the one harness.Main built.
	Bin string
	// Env are more environment variables for every batond (KEY=VALUE).
	Env []string
	// Workers, Clients and Keys shape the workload; 0 or nil means the
	// defaults.
	Workers int
	Clients int
	Keys    []string
	// OutDir receives the summary, any visualization and, when the run
	// fails, the files to analyse it (Result.Files); "" means a
	// directory of the run's own under $CHAOS_OUT when that is set, else a
	// temporary directory kept only if the test fails.
	OutDir string
	// CheckTimeout is porcupine's budget; 0 means DefaultCheckTimeout, or
	// a tenth of Duration when that is more (a long run has more keys).
	CheckTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Clients == 0 {
		c.Clients = DefaultClients
	}
	if len(c.Keys) == 0 {
		c.Keys = DefaultKeys
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = max(DefaultCheckTimeout, c.Duration/10)
	}
	return c
}

// reproduce is the command that runs c again. A planted-bug run (Env) is
// not one TestChaos can run; its test names it.
func (c Config) reproduce() string {
	cmd := fmt.Sprintf("make chaos SEED=%d DURATION=%v", c.Seed, c.Duration)
	if c.Nodes != DefaultNodes {
		cmd = fmt.Sprintf("CHAOS_NODES=%d ", c.Nodes) + cmd
	}
	if c.NoMembership && !c.NoFaults {
		cmd = "CHAOS_MEMBERSHIP=off " + cmd
	}
	if c.Bin != "" && len(c.Env) == 0 {
		cmd = "CHAOS_BATOND=" + c.Bin + " " + cmd
	}
	return cmd
}

// Violation is one finding of one checker.
type Violation struct {
	Checker string
	Text    string
}

// Result is what a chaos run found.
type Result struct {
	Config       Config  // as run, defaults filled in
	Schedule     []Fault // as drawn; the run injects those that fit in its time
	Faults       []FaultRecord
	Gaps         []time.Duration // per fault: the longest time without a grant it caused
	Report       Report          // Check's
	Workload     WorkloadStats
	Fence        FenceStats
	Availability []KindAvailability
	// WatchSessions counts the watch sessions the watch checker looked at.
	WatchSessions int
	Violations    []Violation
	OutDir        string
	// Files are what a failed run wrote into OutDir to be analysed:
	// history-<key>.txt for every key a violation names, and faults.txt
	// (see writeFailureFiles). None when the run passed.
	Files   []string
	Summary string
}

// Failed reports whether any checker found anything.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Checkers returns the names of the checkers that found something, sorted.
func (r Result) Checkers() []string {
	var names []string
	for _, v := range r.Violations {
		if !slices.Contains(names, v.Checker) {
			names = append(names, v.Checker)
		}
	}
	slices.Sort(names)
	return names
}

// CaughtBy reports whether checker found something.
func (r Result) CaughtBy(checker string) bool {
	return slices.Contains(r.Checkers(), checker)
}

// Verify fails t with one line per violation, then the seed and the
// visualization, if the run found anything.
func (r Result) Verify(t testing.TB) {
	t.Helper()
	if !r.Failed() {
		return
	}
	for _, v := range r.Violations {
		t.Errorf("chaos: %s: %s", v.Checker, v.Text)
	}
	msg := fmt.Sprintf("chaos: FAILED with seed %d (%d violations by %s); reproduce with: %s",
		r.Config.Seed, len(r.Violations), strings.Join(r.Checkers(), ", "), r.Config.reproduce())
	if r.Report.Visualization != "" {
		msg += "; visualization: " + r.Report.Visualization
	}
	if len(r.Files) > 0 {
		msg += "; histories and faults: " + strings.Join(r.Files, ", ")
	}
	t.Error(msg)
}

// Run runs one chaos round on t: it starts a cluster, runs the workload
// while it injects the faults of the seed's schedule, then heals the
// cluster, stops the workload, waits until every lease ran out and runs
// every checker. It logs the seed, the schedule and each fault as it goes,
// and a summary at the end. It does not fail t for what the checkers find
// (call Result.Verify), only when the harness cannot do its part, e.g. a
// node that cannot be started again.
func Run(t *testing.T, cfg Config) Result {
	t.Helper()
	cfg = cfg.withDefaults()
	res := Result{Config: cfg}
	t.Logf("chaos: seed %d, %d nodes, %v of workload (reproduce with: %s)", cfg.Seed, cfg.Nodes, cfg.Duration, cfg.reproduce())
	var schedule []Fault
	if !cfg.NoFaults {
		schedule = DrawSchedule(rand.New(rand.NewPCG(cfg.Seed, 0)), cfg.Duration, !cfg.NoMembership)
	}
	t.Logf("chaos: schedule of %d faults (the run injects those that fit in its time):\n%s", len(schedule), scheduleText(schedule))
	res.Schedule = schedule
	res.OutDir = outDir(t, cfg)

	bin := cfg.Bin
	if bin == "" {
		bin = harness.Bin(t)
	}
	links := harness.NewLinks()
	// Debug logs trace the nodes' lease decisions (engine/trace.go): the
	// node-N.log a failing run keeps is where they are read.
	nodeArgs := []string{"--log-level", "debug"}
	nodes := harness.StartCluster(t, bin, cfg.Nodes, harness.Options{Shards: 4, Links: links, Env: cfg.Env, Args: nodeArgs})
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.ClientAddr
	}
	allKeys := append(append(slices.Clone(cfg.Keys), ProbeKeys...), SharedKeys...)
	if err := waitLeaders(addrs, allKeys, leadersWithin); err != nil {
		t.Logf("chaos: starting the workload anyway: %v", err)
	}

	rec := NewRecorder()
	resource := NewResource(rec.Since)
	clients := startClients(t, cfg.Clients, addrs, rec)
	wl := StartWorkload(WorkloadConfig{
		Keys: cfg.Keys, ProbeKeys: ProbeKeys, Workers: cfg.Workers, Clients: clients,
		Resource: resource, Clock: rec.Since, Seed: cfg.Seed, Generation: KeyGeneration,
		SharedKeys: SharedKeys, SharedWorkers: DefaultSharedWorkers,
	})
	// A watcher on each of the workload's first keys and on the first
	// shared key (protocol 1.4).
	watchers := StartWatchers(addrs, append(slices.Clone(cfg.Keys[:min(watchedKeys, len(cfg.Keys))]), SharedKeys[0]))
	var watchOnce sync.Once
	var sessions []WatchSession
	stopWatchers := func() { watchOnce.Do(func() { sessions = watchers.Stop() }) }
	t.Cleanup(stopWatchers)
	// Should the harness fail the test half way, the workers must still
	// stop before the cluster goes (cleanups run last-registered first).
	var stopOnce sync.Once
	stopWorkload := func() (stopped bool) {
		stopOnce.Do(func() { stopped = wl.Stop(workloadStop) })
		return stopped
	}
	t.Cleanup(func() { stopWorkload() })

	in := newInjector(t, nodes, links, allKeys, rec.Since, joinSpec{bin: bin, env: cfg.Env, args: nodeArgs})
	end := time.Now().Add(cfg.Duration)
	for i, f := range schedule {
		if time.Until(end) < f.Before+f.Hold+faultCost(f.Kind) {
			break
		}
		time.Sleep(f.Before) // the schedule's pause between faults
		in.checkRunning("before fault " + fmt.Sprint(i+1))
		r := in.inject(f)
		t.Logf("chaos: fault %d: %s", i+1, r)
		res.Faults = append(res.Faults, r)
	}
	time.Sleep(time.Until(end)) // the rest of the workload's time, without faults

	// The end: a whole cluster, then no more requests, then the checks.
	links.Heal()
	in.checkRunning("at the end of the run")
	nodes = in.nodes // the members now, after the membership faults
	stopped := stopWorkload()
	for _, cl := range clients {
		cl.Close() // ends whatever a worker that did not stop is waiting for
	}
	if !stopped && !wl.Wait(callSlack) {
		res.add(CheckerCallBound, fmt.Sprintf("the workload did not stop within %v, nor %v after its clients were closed", workloadStop, callSlack))
	}
	stopWatchers()
	rec.Finish()
	res.Workload = wl.Stats()
	res.Fence = resource.Stats()
	for _, u := range res.Workload.Unexpected {
		t.Logf("chaos: unexpected error: %s", u)
	}

	if problems := waitFree(nodes, wl.KeysUsed(), freeWithin); len(problems) > 0 {
		for _, p := range problems {
			res.add(CheckerFreeAtEnd, p)
		}
	}
	history := rec.History()
	// The client-level side of the run, kept for a failure's files and to
	// explain a fence violation.
	d := &failureData{history: history, schedule: schedule, start: rec.Start(), connNode: connNodes(rec.ConnAddrs(), history, in.owners), nodeLogs: make(map[int]string)}
	for _, n := range in.all {
		d.nodeLogs[n.ID] = n.LogPath
	}
	d.events, d.eventsDropped = wl.Events()
	d.writes, d.writesDropped = resource.Writes()
	res.Report = Check(history, rec.Problems(), CheckConfig{AnswerBound: AnswerBound, OutDir: res.OutDir, Timeout: cfg.CheckTimeout})
	for _, v := range res.Report.Violations {
		checker, text, ok := strings.Cut(v, ": ")
		if !ok {
			checker, text = "history", v
		}
		res.add(checker, text)
	}
	for i, w := range resource.RejectedInside() {
		text := fenceText(w)
		if i < maxLinesPerChecker { // the first few say it all, and each explanation scans the history
			text += fenceDetail(w, d.events, history)
		}
		res.add(CheckerFence, text)
	}
	for _, v := range CheckWatches(sessions, history) {
		_, text, _ := strings.Cut(v, ": ")
		res.add(CheckerWatch, text)
	}
	res.WatchSessions = len(sessions)
	for _, e := range in.exits {
		res.add(CheckerNodeExit, e)
	}
	for _, m := range in.memberFailures {
		res.add(CheckerMembership, m)
	}
	if !cfg.NoFaults && !cfg.NoMembership {
		for _, m := range in.checkMembers() {
			res.add(CheckerMembership, m)
		}
	}
	for _, l := range res.Workload.LateCalls {
		res.add(CheckerCallBound, l)
	}

	res.Gaps = faultGaps(res.Faults, grantTimes(history), rec.Since())
	res.Availability = availabilityByKind(res.Faults, res.Gaps)
	if res.Failed() {
		files, err := writeFailureFiles(&res, d)
		res.Files = files
		if err != nil {
			t.Logf("chaos: %v", err)
		}
	}
	res.Summary = summary(res)
	t.Logf("chaos: summary\n%s", res.Summary)
	path := filepath.Join(res.OutDir, "summary.txt")
	if err := os.WriteFile(path, []byte(res.Summary), 0o644); err != nil {
		t.Logf("chaos: writing the summary: %v", err)
	} else {
		t.Logf("chaos: summary written to %s", path)
	}
	return res
}

func (r *Result) add(checker, text string) {
	r.Violations = append(r.Violations, Violation{Checker: checker, Text: text})
}

// scheduleText renders a schedule, one fault a line.
func scheduleText(s []Fault) string {
	var b strings.Builder
	for i, f := range s {
		fmt.Fprintf(&b, "  %3d. %s\n", i+1, f)
	}
	return b.String()
}

// outDir is where the run's files go (see Config.OutDir): under
// $CHAOS_OUT, a directory of its own named after the test and the seed, so
// that several runs can share CHAOS_OUT.
func outDir(t *testing.T, cfg Config) string {
	dir := cfg.OutDir
	if dir == "" && os.Getenv("CHAOS_OUT") != "" {
		dir = filepath.Join(os.Getenv("CHAOS_OUT"), fmt.Sprintf("%s-%d", fileSafe(t.Name()), cfg.Seed))
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("chaos: %v", err)
		}
		return dir
	}
	// Not t.TempDir: the visualization of a failed run must outlive it.
	dir, err := os.MkdirTemp("", fmt.Sprintf("baton-chaos-%d-", cfg.Seed))
	if err != nil {
		t.Fatalf("chaos: %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	return dir
}

// connNodes maps each recorded connection to the node whose client address
// it went to: the node that held the address (owners, in the order they
// took it) at the connection's first request, or the address's last owner
// for a connection that sent none.
func connNodes(addrs map[int]string, history []Op, owners []addrOwner) map[int]int {
	first := make(map[int]time.Duration)
	for i := range history {
		if c, ok := first[history[i].Conn]; !ok || history[i].Call < c {
			first[history[i].Conn] = history[i].Call
		}
	}
	m := make(map[int]int, len(addrs))
	for conn, a := range addrs {
		at, sent := first[conn]
		for _, o := range owners {
			if o.addr == a && (!sent || o.from <= at || m[conn] == 0) {
				m[conn] = o.id
			}
		}
	}
	return m
}

// startClients starts n clients of the cluster whose every connection the
// recorder wraps. They are closed when the test ends, if not before.
func startClients(t *testing.T, n int, addrs []string, rec *Recorder) []*client.Client {
	t.Helper()
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return rec.Wrap(nc), nil
	}
	clients := make([]*client.Client, n)
	for i := range clients {
		cl, err := client.New(addrs, client.WithDialer(dial))
		if err != nil {
			t.Fatalf("chaos: client: %v", err)
		}
		t.Cleanup(func() { cl.Close() })
		clients[i] = cl
	}
	return clients
}

// waitLeaders waits until some node answers every key as its leader.
func waitLeaders(addrs []string, keys []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		led := 0
		for _, a := range addrs {
			led += leads(a, keys)
		}
		if led >= len(keys) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d keys have a leader after %v", led, len(keys), within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFree waits until every key is FREE on the node that leads it and
// every other node answers MOVED to that node, and returns what was still
// wrong at the deadline (nothing when it came to pass).
func waitFree(nodes []*harness.Node, keys []string, within time.Duration) []string {
	deadline := time.Now().Add(within)
	for {
		wrong := freeEverywhere(nodes, keys)
		if len(wrong) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for i := range wrong {
				wrong[i] += fmt.Sprintf(" (still so %v after the workload stopped)", within)
			}
			return wrong
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeEverywhere asks every node about every key on fresh connections and
// returns a line per key whose answers are not "one node FREE, the others
// MOVED to it".
func freeEverywhere(nodes []*harness.Node, keys []string) []string {
	answers := make([][]string, len(nodes))
	for i, n := range nodes {
		answers[i], _ = queryAll(n.ClientAddr, keys, 3*time.Second)
	}
	var wrong []string
	for k, key := range keys {
		var leader *harness.Node
		for i, n := range nodes {
			if answers[i] != nil && answers[i][k] == "Q "+key+" FREE" {
				if leader != nil {
					leader = nil // two nodes answer as leaders: wrong below
					break
				}
				leader = n
			}
		}
		ok := leader != nil
		for i, n := range nodes {
			if ok && n != leader && (answers[i] == nil || answers[i][k] != "Q "+key+" MOVED "+leader.ClientAddr) {
				ok = false
			}
		}
		if ok {
			continue
		}
		parts := make([]string, len(nodes))
		for i, n := range nodes {
			a := "no answer"
			if answers[i] != nil && answers[i][k] != "" {
				a = fmt.Sprintf("%q", answers[i][k])
			}
			parts[i] = fmt.Sprintf("%s %s", nodeName(n), a)
		}
		wrong = append(wrong, fmt.Sprintf("key %s is not FREE on its leader with the others sending clients there: %s", key, strings.Join(parts, ", ")))
	}
	return wrong
}

// grantTimes returns when each acknowledged grant (A answered OK) was read,
// in order.
func grantTimes(h []Op) []time.Duration {
	var g []time.Duration
	for i := range h {
		if h[i].isGrant() {
			g = append(g, h[i].Return)
		}
	}
	slices.Sort(g)
	return g
}

// KindAvailability sums up, for one kind of fault, the longest time
// without a grant that each fault of that kind caused (see
// longestWithoutGrant).
type KindAvailability struct {
	Kind   FaultKind
	Count  int
	Median time.Duration
	Max    time.Duration
}

// longestWithoutGrant is the longest time without any acknowledged grant,
// on any key, from the fault's start until the first grant after until,
// where until is availabilityTail after the fault's end. The gap the
// fault's start cuts into counts from that start, and nothing counts past
// limit: the next fault's start, so that one gap is not counted for two
// faults, or the end of the run.
func longestWithoutGrant(f FaultRecord, until, limit time.Duration, grants []time.Duration) time.Duration {
	prev, longest := f.Start, time.Duration(0)
	i := sort.Search(len(grants), func(i int) bool { return grants[i] > f.Start })
	for ; i < len(grants) && prev < limit; i++ {
		longest = max(longest, min(grants[i], limit)-prev)
		prev = grants[i]
		if grants[i] > until {
			return longest
		}
	}
	return max(longest, limit-prev)
}

// faultGaps computes longestWithoutGrant for every fault, in order.
func faultGaps(faults []FaultRecord, grants []time.Duration, runEnd time.Duration) []time.Duration {
	gaps := make([]time.Duration, len(faults))
	for i, f := range faults {
		limit := runEnd
		if i+1 < len(faults) {
			limit = faults[i+1].Start
		}
		gaps[i] = longestWithoutGrant(f, f.End+availabilityTail, limit, grants)
	}
	return gaps
}

// availabilityByKind sums up the faults' gaps (faultGaps) per kind, in the
// order of faultMix.
func availabilityByKind(faults []FaultRecord, gaps []time.Duration) []KindAvailability {
	byKind := make(map[FaultKind][]time.Duration)
	for i, f := range faults {
		byKind[f.Kind] = append(byKind[f.Kind], gaps[i])
	}
	var out []KindAvailability
	for _, m := range faultMix {
		gaps := byKind[m.kind]
		if len(gaps) == 0 {
			continue
		}
		slices.Sort(gaps)
		out = append(out, KindAvailability{Kind: m.kind, Count: len(gaps), Median: median(gaps), Max: gaps[len(gaps)-1]})
	}
	return out
}

// median of sorted values.
func median(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// summary renders the run's outcome for the log and CHAOS_OUT.
func summary(r Result) string {
	var b strings.Builder
	verdict := "PASS"
	if r.Failed() {
		verdict = "FAIL (" + strings.Join(r.Checkers(), ", ") + ")"
	}
	c := r.Config
	fmt.Fprintf(&b, "seed %d: %s\n", c.Seed, verdict)
	fmt.Fprintf(&b, "cluster: %d nodes, 4 shards; workload: %v, %d workers over %d keys, %d shared workers over %d keys of permits %d, %d clients\n",
		c.Nodes, c.Duration, c.Workers, len(c.Keys), DefaultSharedWorkers, len(SharedKeys), SharedPermits, c.Clients)
	counts := make(map[FaultKind]int)
	for _, f := range r.Faults {
		counts[f.Kind]++
	}
	var kinds []string
	for _, m := range faultMix {
		if counts[m.kind] > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", m.kind, counts[m.kind]))
		}
	}
	fmt.Fprintf(&b, "faults injected: %d (%s)\n", len(r.Faults), strings.Join(kinds, ", "))
	var perKey []string
	for _, k := range sortedKeys(r.Report.ByKey) {
		perKey = append(perKey, fmt.Sprintf("%s %d", k, r.Report.ByKey[k]))
	}
	fmt.Fprintf(&b, "ops checked for linearizability: %d (%s)\n", r.Report.Ops, strings.Join(perKey, ", "))
	fmt.Fprintf(&b, "client calls: %s\n", r.Workload)
	fmt.Fprintf(&b, "watch sessions checked: %d\n", r.WatchSessions)
	fmt.Fprintf(&b, "fenced resource: %d writes accepted, %d turned away after their lease may have run out, %d turned away inside it\n",
		r.Fence.Accepted, r.Fence.RejectedLate, r.Fence.Violations)
	fmt.Fprintf(&b, "availability: longest time without any grant, from a fault's start to the first grant more than %v after its end (or after the next fault's start):\n", availabilityTail)
	if len(r.Availability) == 0 {
		b.WriteString("  (no faults)\n")
	}
	for _, a := range r.Availability {
		fmt.Fprintf(&b, "  %-17s n=%-3d median %-8v max %v\n", a.Kind, a.Count, a.Median.Round(time.Millisecond), a.Max.Round(time.Millisecond))
	}
	if len(r.Faults) > 0 {
		b.WriteString("faults, with the longest time without a grant each caused:\n")
	}
	for i, f := range r.Faults {
		fmt.Fprintf(&b, "  %3d. %s: %v\n", i+1, f, r.Gaps[i].Round(time.Millisecond))
	}
	if r.Failed() {
		fmt.Fprintf(&b, "violations (%d):\n", len(r.Violations))
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  %s: %s\n", v.Checker, v.Text)
		}
	}
	if r.Report.Visualization != "" {
		fmt.Fprintf(&b, "visualization: %s\n", r.Report.Visualization)
	}
	for _, f := range r.Files {
		fmt.Fprintf(&b, "for analysis: %s\n", f)
	}
	return b.String()
}
