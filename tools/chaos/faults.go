package chaos

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// FaultKind names a kind of fault the chaos run injects.
type FaultKind string

// The kinds of fault. "Leader" is the node that leads the most of the
// run's keys when the fault starts (node 1 in steady state, by priority);
// a follower is another node.
const (
	// KillLeader: kill -9 the leader, and restart it after Hold.
	KillLeader FaultKind = "kill-leader"
	// KillFollower: kill -9 a follower, and restart it after Hold.
	KillFollower FaultKind = "kill-follower"
	// PauseLeader: SIGSTOP the leader for Hold, longer than an election
	// timeout (10 to 20 ticks of 20 ms), then SIGCONT.
	PauseLeader FaultKind = "pause-leader"
	// IsolateLeader: cut every Raft link of the leader, both ways, for Hold.
	IsolateLeader FaultKind = "isolate-leader"
	// IsolateFollower: the same for a follower.
	IsolateFollower FaultKind = "isolate-follower"
	// CutFromLeader: the leader's messages to one follower are lost for
	// Hold; the follower's to the leader still flow.
	CutFromLeader FaultKind = "cut-from-leader"
	// CutToLeader: one follower's messages to the leader are lost for Hold.
	CutToLeader FaultKind = "cut-to-leader"
	// RestartAll: kill -9 every node, and restart them all at once after
	// Hold.
	RestartAll FaultKind = "restart-all"
	// StopLeader: stop the leader gracefully (SIGTERM: it hands its shards
	// over and exits 0), and start it again after Hold.
	StopLeader FaultKind = "stop-leader"
	// ReplaceMember: replace a member, the leader or not (Pick), by a new
	// node under a new id (membership.go). Either the machine is rebuilt
	// in place: the member is removed (M - REMOVE), killed and its data
	// dir wiped, and after Hold its addresses are added again (M - ADD,
	// a new id) and a node joins there with an empty data dir; or a new
	// machine takes over: a node at new addresses is added and joins,
	// the old member is removed once the new one is a voter, and killed
	// Hold later if it has not exited by itself. Over when the new member
	// is a voter and the old one is gone.
	ReplaceMember FaultKind = "replace-member"
	// AddRemoveMember: add a member at new addresses (a fourth to three,
	// a sixth to five), which joins and is promoted, keep it a voter for
	// Hold, then remove it. Over when it is gone.
	AddRemoveMember FaultKind = "add-remove-member"
)

// faultMix is how often each kind is drawn, and how long it lasts. The
// membership kinds come last and are drawn only in a run that has them
// (Config.NoMembership), so that without them a seed draws the schedule it
// drew before they existed.
var faultMix = []faultSpec{
	{KillLeader, 3, 1 * time.Second, 3 * time.Second, false},
	{KillFollower, 2, 1 * time.Second, 3 * time.Second, false},
	{PauseLeader, 3, 1500 * time.Millisecond, 3 * time.Second, false},
	{IsolateLeader, 2, 1 * time.Second, 3 * time.Second, false},
	{IsolateFollower, 1, 1 * time.Second, 3 * time.Second, false},
	{CutFromLeader, 1, 1 * time.Second, 3 * time.Second, false},
	{CutToLeader, 1, 1 * time.Second, 3 * time.Second, false},
	{RestartAll, 1, 500 * time.Millisecond, 2 * time.Second, false},
	{StopLeader, 2, 1 * time.Second, 3 * time.Second, false},
	{ReplaceMember, 3, 1 * time.Second, 3 * time.Second, true},
	{AddRemoveMember, 2, 1 * time.Second, 3 * time.Second, true},
}

// faultSpec is one kind of faultMix.
type faultSpec struct {
	kind     FaultKind
	weight   int
	min, max time.Duration // Hold
	member   bool          // a membership fault
}

// isMembership reports whether k is a membership fault.
func isMembership(k FaultKind) bool {
	for _, m := range faultMix {
		if m.kind == k {
			return m.member
		}
	}
	return false
}

// faultCost is what a fault of kind k is guessed to add to its pause and
// hold: a restart, or a membership change's requests, a join and a
// promotion. The run injects a fault only while that much time is left.
func faultCost(k FaultKind) time.Duration {
	if isMembership(k) {
		return memberCost
	}
	return restartCost
}

// Pauses between two faults: the cluster gets to recover, so that a quorum
// is there most of the time.
const (
	minGap = 1 * time.Second
	maxGap = 3 * time.Second
	// restartCost is what a restart is guessed to add to a fault (see
	// faultCost).
	restartCost = 3 * time.Second
	// maxFaults bounds a schedule whatever the duration.
	maxFaults = 10_000
)

// Fault is one step of a schedule: a pause, then a fault of Kind lasting
// Hold. Pick chooses among the nodes the fault could hit (which follower),
// once the run knows who leads.
type Fault struct {
	Kind   FaultKind
	Before time.Duration // the pause before it
	Hold   time.Duration
	Pick   int
}

// String renders f for the run's log.
func (f Fault) String() string {
	return fmt.Sprintf("after %v: %s for %v (pick %d)", f.Before, f.Kind, f.Hold, f.Pick)
}

// DrawSchedule draws, from rng alone, the faults of a run of duration d:
// one fault at a time, each after a pause of minGap to maxGap. membership
// says whether the membership kinds are drawn too. It draws until the
// pauses and holds alone fill d: more faults than a run of d has time for
// (restarts, joins and the search for the leader take time too), so that
// the schedule never runs out before the run's end; the run injects those
// that fit.
func DrawSchedule(rng *rand.Rand, d time.Duration, membership bool) []Fault {
	mix := faultMix
	if !membership {
		mix = slices.DeleteFunc(slices.Clone(faultMix), func(m faultSpec) bool { return m.member })
	}
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	var s []Fault
	var planned time.Duration
	for len(s) < maxFaults && planned < d {
		n := rng.IntN(total)
		i := 0
		for n >= mix[i].weight {
			n -= mix[i].weight
			i++
		}
		m := mix[i]
		f := Fault{
			Kind:   m.kind,
			Before: randDuration(rng, minGap, maxGap),
			Hold:   randDuration(rng, m.min, m.max),
			Pick:   rng.IntN(1 << 16),
		}
		s = append(s, f)
		planned += f.Before + f.Hold
	}
	return s
}

// FaultRecord is a fault as it was injected, on the recorder's clock: it
// started at Start and was over at End (the node restarted serves, the
// links are healed, the node resumed).
type FaultRecord struct {
	Fault
	Target string // the node(s) it hit, e.g. "node 1" or "node 1 -> node 2"
	Start  time.Duration
	End    time.Duration
}

// String renders r for the run's log and summary.
func (r FaultRecord) String() string {
	return fmt.Sprintf("%s on %s, %v .. %v", r.Kind, r.Target, r.Start.Round(time.Millisecond), r.End.Round(time.Millisecond))
}

// injector injects faults into a cluster. It calls harness.Node methods,
// which fail the test through t, so it runs on the test's goroutine only.
type injector struct {
	t     *testing.T
	nodes []*harness.Node
	links *harness.Links
	keys  []string
	clock func() time.Duration

	// exits are nodes that stopped by themselves, or did not stop as they
	// should: one line each, for the node-exit checker.
	exits []string

	// For the membership faults (membership.go): how a node that joins
	// is started; every node the run started, removed ones included;
	// which node had which client address from when on; the Links label
	// of each node that is not its id, and the next free one; and the
	// faults that could not be carried out, for the membership checker.
	join           joinSpec
	all            []*harness.Node
	owners         []addrOwner
	label          map[*harness.Node]int
	nextLabel      int
	memberFailures []string
}

// newInjector returns an injector of the cluster nodes, whose nodes that
// join are started as join says.
func newInjector(t *testing.T, nodes []*harness.Node, links *harness.Links, keys []string, clock func() time.Duration, join joinSpec) *injector {
	in := &injector{t: t, nodes: slices.Clone(nodes), links: links, keys: keys, clock: clock,
		join: join, all: slices.Clone(nodes), label: make(map[*harness.Node]int), nextLabel: firstJoinLabel}
	for _, n := range nodes {
		in.owners = append(in.owners, addrOwner{addr: n.ClientAddr, id: n.ID})
	}
	return in
}

// inject runs one fault to its end and returns what it did.
func (in *injector) inject(f Fault) FaultRecord {
	in.t.Helper()
	r := FaultRecord{Fault: f}
	leader := in.leader()
	follower := in.follower(leader, f.Pick)
	switch f.Kind {
	case KillLeader, KillFollower:
		n := leader
		if f.Kind == KillFollower {
			n = follower
		}
		r.Target = nodeName(n)
		r.Start = in.clock()
		n.Kill()
		time.Sleep(f.Hold)
		n.Restart()
	case PauseLeader:
		r.Target = nodeName(leader)
		r.Start = in.clock()
		leader.Pause()
		time.Sleep(f.Hold)
		leader.Resume()
	case IsolateLeader, IsolateFollower:
		n := leader
		if f.Kind == IsolateFollower {
			n = follower
		}
		r.Target = nodeName(n)
		r.Start = in.clock()
		in.links.Isolate(in.linkOf(n))
		time.Sleep(f.Hold)
		in.links.Heal()
	case CutFromLeader, CutToLeader:
		from, to := leader, follower
		if f.Kind == CutToLeader {
			from, to = follower, leader
		}
		r.Target = nodeName(from) + " -> " + nodeName(to)
		r.Start = in.clock()
		in.links.Cut(in.linkOf(from), in.linkOf(to))
		time.Sleep(f.Hold)
		in.links.Heal()
	case RestartAll:
		r.Target = "every node"
		r.Start = in.clock()
		for _, n := range in.nodes {
			n.Kill()
		}
		time.Sleep(f.Hold)
		harness.RestartAll(in.t, in.nodes...)
	case StopLeader:
		r.Target = nodeName(leader)
		r.Start = in.clock()
		if code, err := leader.Stop(); err != nil || code != 0 {
			in.exits = append(in.exits, fmt.Sprintf("%s did not stop gracefully on SIGTERM: exit code %d, %v; want exit 0", nodeName(leader), code, err))
		}
		time.Sleep(f.Hold)
		leader.Start()
	case ReplaceMember:
		in.replaceMember(&r)
	case AddRemoveMember:
		in.addRemoveMember(&r)
	default:
		in.t.Fatalf("chaos: unknown fault kind %q", f.Kind)
	}
	r.End = in.clock()
	return r
}

// checkRunning finds the nodes that exited although no fault of the
// schedule stopped them, records each for the node-exit checker, and starts
// them again so that the run can go on.
func (in *injector) checkRunning(when string) {
	in.t.Helper()
	for _, n := range in.nodes {
		if n.Running() {
			continue
		}
		code, _ := n.Wait(time.Second)
		in.exits = append(in.exits, fmt.Sprintf("%s exited by itself (exit code %d), found %s; the end of its log:\n%s",
			nodeName(n), code, when, logTail(n.Log(), 10)))
		n.Start()
	}
}

// logTail returns the last n lines of log.
func logTail(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// leaderWait bounds the search for a leader before a fault: after the
// previous fault the cluster may still be electing one.
const leaderWait = 10 * time.Second

// leader returns the node that leads the most keys, as the nodes say when
// asked. When none answers as a leader within leaderWait it returns node 1,
// the leader by priority.
func (in *injector) leader() *harness.Node {
	deadline := time.Now().Add(leaderWait)
	for {
		var best *harness.Node
		most := 0
		for _, n := range in.nodes {
			if led := leads(n.ClientAddr, in.keys); led > most {
				best, most = n, led
			}
		}
		if best != nil {
			return best
		}
		if time.Now().After(deadline) {
			in.t.Logf("chaos: no node leads any key after %v; taking node 1 as the leader", leaderWait)
			return in.nodes[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// follower returns one of the nodes other than leader, chosen by pick.
func (in *injector) follower(leader *harness.Node, pick int) *harness.Node {
	others := make([]*harness.Node, 0, len(in.nodes)-1)
	for _, n := range in.nodes {
		if n != leader {
			others = append(others, n)
		}
	}
	return others[pick%len(others)]
}

// leads counts the keys that the node at addr answers as their leader
// (FREE or HELD). A node that does not answer within a second, paused or
// down, leads nothing.
func leads(addr string, keys []string) int {
	answers, _ := queryAll(addr, keys, time.Second)
	n := 0
	for i, a := range answers {
		if a == "Q "+keys[i]+" FREE" || strings.HasPrefix(a, "Q "+keys[i]+" HELD ") {
			n++
		}
	}
	return n
}

// queryAll sends "Q <key>" for every key on a fresh connection and returns
// the answers in key order, as far as they came within timeout. It does not
// fail the test: a node may rightly be down or paused when asked.
func queryAll(addr string, keys []string, timeout time.Duration) ([]string, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var req strings.Builder
	for _, k := range keys {
		req.WriteString("Q " + k + "\n")
	}
	if _, err := nc.Write([]byte(req.String())); err != nil {
		return nil, err
	}
	// Answers to queries of different keys may come in any order: file each
	// under its key.
	byKey := make(map[string]string, len(keys))
	r := bufio.NewReader(nc)
	for range keys {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimSuffix(line, "\n")
		if f := strings.Fields(line); len(f) >= 2 {
			byKey[f[1]] = line
		}
	}
	answers := make([]string, len(keys))
	for i, k := range keys {
		answers[i] = byKey[k]
	}
	if len(byKey) < len(keys) {
		return answers, fmt.Errorf("%s answered %d of %d queries within %v", addr, len(byKey), len(keys), timeout)
	}
	return answers, nil
}

// nodeName names a node in logs.
func nodeName(n *harness.Node) string {
	return fmt.Sprintf("node %d", n.ID)
}
