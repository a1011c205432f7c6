package main_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/tools/chaos"
	"github.com/baton-dev/baton/tools/harness"
)

// Bounds of the membership tests (protocol 1.3), on a noisy 2-core machine
// with the race detector.
const (
	membershipShards = 2
	// promotedWithin: the protocol promises a promotion within 30 s of
	// the learner having caught up; catching up an idle-ish cluster takes
	// a second or two.
	promotedWithin = 45 * time.Second
	// removedExitWithin: a removed node exits within 30 s (PROTOCOL.md).
	removedExitWithin = 30 * time.Second
	// seededWithin bounds the first directory of a new cluster: the
	// cluster version is raised about a second after the election, and
	// the directory written half a second later.
	seededWithin = 20 * time.Second
	// changeAnswerWithin bounds the wait for the answer to a change.
	changeAnswerWithin = 30 * time.Second
	// liveWindow is how recently the coordinator must have heard from a
	// voter for it to count as live (engine's liveWithin), and a little
	// more.
	liveWindow = 5500 * time.Millisecond
)

// member runs "M - <args>" on a connection to addr, following MOVED
// (back to addr when the node named is down: a leader just killed) and
// retrying ERR unavailable, and a refusal while another change is under
// way, for 15 s, and returns the answer's fields after "M -".
func member(t *testing.T, addr, args string) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	to := addr
	for time.Now().Before(deadline) {
		if nc, err := net.DialTimeout("tcp", to, time.Second); err != nil {
			to = addr
			time.Sleep(100 * time.Millisecond)
			continue
		} else {
			nc.Close()
		}
		c := harness.Dial(t, to)
		line := c.Do(t, "M - "+args)
		c.Close()
		f := strings.Fields(line)
		switch {
		case len(f) < 3 || f[0] != "M" || f[1] != "-":
			t.Fatalf("M - %s: answered %q", args, line)
		case f[2] == "MOVED":
			to = f[3]
		case f[2] == "ERR" && f[3] == "unavailable",
			f[2] == "ERR" && f[3] == "refused" && strings.Contains(line, "a membership change is under way"):
			// The refusal says to retry once the change is done (the
			// coordinator finishing an add, a moment after the new member
			// shows as a voter).
			time.Sleep(100 * time.Millisecond)
		default:
			return f[2:]
		}
	}
	t.Fatalf("M - %s: no answer but MOVED, ERR unavailable or a change under way in 15 s", args)
	return nil
}

// listMembers is M - LIST on addr: id -> role.
func listMembers(t *testing.T, addr string) map[uint64]string {
	t.Helper()
	f := member(t, addr, "LIST")
	if f[0] != "OK" {
		t.Fatalf("M - LIST: %v", f)
	}
	roles := map[uint64]string{}
	for _, m := range f[1:] {
		p := strings.Split(m, "/")
		if len(p) != 5 {
			t.Fatalf("M - LIST: member %q", m)
		}
		roles[parseU64(t, p[0])] = p[1]
	}
	return roles
}

// waitFor polls cond every 50 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// joiner describes a new node at fresh addresses, not started; with
// links, its Raft traffic goes through a proxy of links.
func joiner(t *testing.T, bin string, id uint64, links *harness.Links) *harness.Node {
	addrs := harness.FreeAddrs(t, 2)
	dir := t.TempDir()
	raft, listen := addrs[0], []string{}
	if links != nil {
		raft, listen = links.Listen(t, int(id), addrs[0]), []string{"--raft-listen", addrs[0]}
	}
	n := harness.NewNode(t, bin, dir, addrs[1], append([]string{"--id", strconv.FormatUint(id, 10), "--join", raft + "/" + addrs[1],
		"--data", filepath.Join(dir, "data")}, listen...)...)
	n.ID, n.RaftAddr, n.DataDir = int(id), raft, filepath.Join(dir, "data")
	n.AllowMoved()
	return n
}

// startMembershipCluster starts 3 nodes with opts (their shards set
// here), and returns once node 1 leads and the cluster's first
// membership directory is written (the cluster version raised to 3
// first): membership changes are taken from then on.
func startMembershipCluster(t *testing.T, bin string, opts harness.Options) []*harness.Node {
	opts.Shards = membershipShards
	nodes := harness.StartCluster(t, bin, 3, opts)
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	waitFor(t, seededWithin, "the first membership directory", func() bool {
		return member(t, nodes[0].ClientAddr, "WHOIS 1")[1] == "member"
	})
	return nodes
}

// TestMembershipReplaceEveryNode replaces each of a 3-node cluster's
// members in turn (add a new node, which joins as a learner and is
// promoted; remove the old one), under a load whose wire history goes
// through the checkers, and checks on the way what is refused: an unsafe
// or malformed change, a node started with an empty data dir under the
// id of a current member or of a removed one, --join on a used data dir.
// A Go client made with the three first addresses only still works at
// the end, when none of them is a member any more (its address refresh).
func TestMembershipReplaceEveryNode(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	nodes := startMembershipCluster(t, bin, harness.Options{})

	first := []string{nodes[0].ClientAddr, nodes[1].ClientAddr, nodes[2].ClientAddr}
	cl, err := client.New(first)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Refused, changing nothing.
	for _, tc := range []struct{ args, want string }{
		{"REMOVE 9", "ERR refused there is no member 9"},
		{"PRIORITY 1,2", "ERR refused PRIORITY names 2 voters and the cluster has 3"},
		{"PRIORITY 1,2,2", "ERR badrequest"},
		{"ADD " + nodes[1].RaftAddr + "/127.0.0.1:1", "ERR refused address " + nodes[1].RaftAddr + " is member 2's"},
		{"ADD nonsense", "ERR badrequest"},
		{"JUMP", "ERR badrequest unknown member verb"},
	} {
		if got := strings.Join(member(t, nodes[0].ClientAddr, tc.args), " "); !strings.HasPrefix(got, tc.want) {
			t.Errorf("M - %s: %q, want %q...", tc.args, got, tc.want)
		}
	}

	var replacements []*harness.Node
	addrs := slices.Clone(first)
	for range 3 {
		n := joiner(t, bin, 0, nil)
		replacements = append(replacements, n)
		addrs = append(addrs, n.ClientAddr)
	}
	rec := chaos.NewRecorder()
	load := startLoad(t, addrs, rec, 6, workerKeys(t, "mem", membershipShards, membershipShards))
	load.progress(t, "3 voters")

	// A remove that would leave the voters without a live majority: node 3
	// is down (and the leader has not heard from it for 5 s), so removing
	// node 2 would leave 1 and 3, one of them live. Refused, nothing
	// changed; the cluster serves on.
	nodes[2].Kill()
	time.Sleep(liveWindow) // the leader's liveness window, which the check counts in
	if f := member(t, nodes[0].ClientAddr, "REMOVE 2"); f[0] != "ERR" || f[1] != "refused" || !strings.Contains(strings.Join(f, " "), "live majority") {
		t.Errorf("remove of node 2 while node 3 is down: %v; want refused for want of a live majority", f)
	}
	nodes[2].Start()
	load.progress(t, "node 3 back")

	live := func() *harness.Node {
		for _, n := range append(slices.Clone(nodes), replacements...) {
			if n.Running() {
				return n
			}
		}
		t.Fatal("no node runs")
		return nil
	}
	for i, old := range nodes {
		nw := replacements[i]
		f := member(t, live().ClientAddr, "ADD "+nw.RaftAddr+"/"+nw.ClientAddr)
		if f[0] != "OK" || len(f) != 2 {
			t.Fatalf("add a member at %s: %v", nw.ClientAddr, f)
		}
		id := parseU64(t, f[1])
		if want := uint64(4 + i); id != want {
			t.Errorf("the new member got id %d, want %d (ids are never reused)", id, want)
		}
		nw.ID = int(id)
		nw.Args[1] = strconv.FormatUint(id, 10)
		start := time.Now()
		nw.Start()
		waitFor(t, promotedWithin, fmt.Sprintf("member %d promoted", id), func() bool {
			return listMembers(t, nw.ClientAddr)[id] == "voter"
		})
		t.Logf("member %d joined and was promoted in %v", id, time.Since(start).Round(time.Millisecond))
		load.progress(t, fmt.Sprintf("member %d a voter", id))
		if i == 1 {
			// A member that joined restarts with --id and --data alone,
			// after its promotion: as a voter again (it must not start as
			// the learner it joined as: lni/dragonboat#373).
			nw.Kill()
			nw.Args = []string{"--id", strconv.FormatUint(id, 10), "--data", nw.DataDir}
			nw.Start()
			load.progress(t, fmt.Sprintf("member %d restarted", id))
			if role := listMembers(t, nw.ClientAddr)[id]; role != "voter" {
				t.Errorf("member %d after its restart: %q, want voter", id, role)
			}
		}

		if i == 0 {
			// A node whose data dir was lost comes back under its id, with
			// its first command line (whose other members run): refused,
			// in one line that says what to do, and the cluster serves on.
			old.Kill()
			res := harness.Run(t, bin, "", 30*time.Second, wipedArgs(t, old)...)
			if res.Code == 0 || !strings.Contains(lastLine(res.Stderr), "its data is lost") {
				t.Errorf("a wiped member restarted under its id: exit %d, last line %q; want a refusal saying its data is lost", res.Code, lastLine(res.Stderr))
			}
		}
		if f := member(t, nw.ClientAddr, fmt.Sprintf("REMOVE %d", old.ID)); f[0] != "OK" {
			t.Fatalf("remove member %d: %v", old.ID, f)
		}
		if old.Running() {
			code, err := old.Wait(removedExitWithin)
			if err != nil || code == 0 {
				t.Errorf("member %d, removed, still runs or exited 0 (%d, %v); want it to exit non-zero within %v", old.ID, code, err, removedExitWithin)
			}
		}
		// LIST answers from the node's applied view: the removal shows
		// there as soon as it applies (C - and LIST within 5 s).
		waitFor(t, 5*time.Second, fmt.Sprintf("member %d gone from M - LIST on member %d", old.ID, nw.ID), func() bool {
			_, listed := listMembers(t, nw.ClientAddr)[uint64(old.ID)]
			return !listed
		})
		if i == 0 {
			// A removed id never comes back, not with an empty data dir
			// either (asked, its first --peers still run).
			res := harness.Run(t, bin, "", 30*time.Second, wipedArgs(t, old)...)
			if res.Code == 0 || !strings.Contains(lastLine(res.Stderr), "was removed") {
				t.Errorf("a removed member restarted with an empty data dir: exit %d, last line %q; want a refusal saying it was removed", res.Code, lastLine(res.Stderr))
			}
		}
		load.progress(t, fmt.Sprintf("member %d removed", old.ID))
	}

	// --join on a data dir that has a cluster's data.
	res := harness.Run(t, bin, "", 30*time.Second, "--id", "9", "--join", "127.0.0.1:1/127.0.0.1:2", "--data", nodes[1].DataDir)
	if res.Code == 0 || !strings.Contains(lastLine(res.Stderr), "--join") {
		t.Errorf("--join on a used data dir: exit %d, last line %q; want a refusal", res.Code, lastLine(res.Stderr))
	}

	// The priority, reordered: its first voter leads within 10 s.
	if f := member(t, replacements[0].ClientAddr, "PRIORITY 6,4,5"); f[0] != "OK" {
		t.Fatalf("reorder: %v", f)
	}
	waitLeads(t, replacements, replacements[2], 15*time.Second)
	load.progress(t, "after the reorder")

	// The client made with the first three addresses follows.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock, err := cl.Acquire(ctx, "mem/client", 10*time.Second, 5*time.Second)
	if err != nil {
		t.Fatalf("a client of the first three members, all replaced: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
	load.check(t)
}

// wipedArgs is the command line of node n's first start, with an empty
// data dir.
func wipedArgs(t *testing.T, n *harness.Node) []string {
	args := slices.Clone(n.Args)
	i := slices.Index(args, "--data")
	args[i+1] = filepath.Join(t.TempDir(), "wiped")
	return args
}

// TestMembershipGrowShrink grows a 3-node cluster to 5 under a checked
// load, kills two of the five (the other three carry on), brings them
// back with their first command line (whose --peers is ignored now), then
// shrinks to the first three again: each removed node answers ERR
// unavailable, never MOVED, and exits non-zero within 30 s, member 5 too,
// which is cut off while it is removed and so never applies the change.
func TestMembershipGrowShrink(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	// The voters keep a few entries of log only, so that a new member,
	// which joins under load, catches up from a snapshot.
	links := harness.NewLinks()
	nodes := startMembershipCluster(t, bin, harness.Options{Links: links, Args: []string{"--snapshot-entries", "20"}})
	grown := []*harness.Node{joiner(t, bin, 4, links), joiner(t, bin, 5, links)}
	addrs := []string{nodes[0].ClientAddr, nodes[1].ClientAddr, nodes[2].ClientAddr, grown[0].ClientAddr, grown[1].ClientAddr}
	load := startLoad(t, addrs, chaos.NewRecorder(), 6, workerKeys(t, "grow", membershipShards, membershipShards))
	load.progress(t, "3 voters")

	for _, n := range grown {
		if f := member(t, nodes[0].ClientAddr, "ADD "+n.RaftAddr+"/"+n.ClientAddr); len(f) != 2 || f[1] != strconv.Itoa(n.ID) {
			t.Fatalf("add member %d: %v", n.ID, f)
		}
		n.Start()
	}
	// Member 4 crashes as soon as it serves (MOVED), about when it is
	// promoted, before or after, and restarts with --id and --data alone:
	// as whichever it is then, a learner or a voter.
	grown[0].Kill()
	grown[0].Args = slices.Concat([]string{"--id", "4", "--data", grown[0].DataDir}, grown[0].Args[len(grown[0].Args)-2:]) // its --raft-listen
	grown[0].Start()
	waitFor(t, promotedWithin, "members 4 and 5 promoted", func() bool {
		roles := listMembers(t, nodes[0].ClientAddr)
		return len(roles) == 5 && roles[4] == "voter" && roles[5] == "voter"
	})
	c := harness.Dial(t, nodes[2].ClientAddr)
	// Node 3 answers C - from the directory it has applied, which may be
	// a moment behind node 1's; it shows a committed change within 5 s
	// (PROTOCOL.md). Nodes 1-3 first; 4 and 5 in the order they were
	// promoted.
	var got string
	var voters []string
	waitFor(t, 5*time.Second, "node 3's C - lists five voters", func() bool {
		got = c.Do(t, "C -")
		voters = strings.Split(strings.TrimPrefix(got, "C - OK "), ",")
		return len(voters) == 5
	})
	if !slices.Equal(voters[:3], addrs[:3]) || !slices.Contains(voters, addrs[3]) || !slices.Contains(voters, addrs[4]) {
		t.Errorf("C - with five voters: %q; want %v in priority order", got, addrs)
	}
	c.Close()
	load.progress(t, "5 voters")

	// Two of five down: the three others are a majority.
	nodes[0].Kill()
	nodes[1].Kill()
	load.progress(t, "nodes 1 and 2 down")
	harness.RestartAll(t, nodes[0], nodes[1])
	load.progress(t, "nodes 1 and 2 back")

	for i, n := range grown {
		// Member 5 is cut off while it is removed: it never applies the
		// change, and must find out for itself once the links heal.
		cutOff := i == 1 && n.Running()
		if cutOff {
			links.Isolate(n.ID)
		}
		if f := member(t, nodes[0].ClientAddr, fmt.Sprintf("REMOVE %d", n.ID)); f[0] != "OK" {
			t.Fatalf("remove member %d: %v", n.ID, f)
		}
		if cutOff {
			links.Heal()
		}
		if n.Running() && !cutOff { // one cut off answers as a member until it finds out
			c := harness.Dial(t, n.ClientAddr)
			c.Send("Q grow/removed")
			if line, err := c.ReadLine(5 * time.Second); err == nil && !strings.HasPrefix(line, "Q grow/removed ERR unavailable") {
				t.Errorf("member %d, removed, answers %q; want ERR unavailable (or a closed connection)", n.ID, line)
			}
			c.Close()
		}
		if n.Running() {
			if code, err := n.Wait(removedExitWithin); err != nil || code == 0 {
				t.Errorf("member %d, removed: exit %d, %v; want non-zero within %v", n.ID, code, err, removedExitWithin)
			}
			if cutOff && !strings.Contains(n.Log(), "says it was removed while this node was cut off") {
				t.Errorf("member %d, removed while cut off: its log does not say that it asked and learned so", n.ID)
			}
		}
		load.progress(t, fmt.Sprintf("member %d removed", n.ID))
	}
	if roles := listMembers(t, nodes[0].ClientAddr); len(roles) != 3 {
		t.Errorf("members after the shrink: %v; want 1, 2 and 3", roles)
	}
	load.check(t)
}

// TestMembershipCoordinatorCrash: the coordinator (node 1, the leader of
// shard 1) crashes in the middle of an add, the new member in shard 1's
// Raft membership and not yet in shard 2's (a failpoint: no signal can
// hit that moment reliably). The next leader of shard 1 finishes the
// change; the new member, which crashes once it has caught up but before
// it says so (a failpoint too), restarts as the learner it still is, and
// is promoted then. All under a checked load, which carries on through
// both crashes.
func TestMembershipCoordinatorCrash(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	nodes := startMembershipCluster(t, bin, harness.Options{})
	y := joiner(t, bin, 4, nil)
	addrs := []string{nodes[0].ClientAddr, nodes[1].ClientAddr, nodes[2].ClientAddr, y.ClientAddr}
	load := startLoad(t, addrs, chaos.NewRecorder(), 4, workerKeys(t, "crash", membershipShards, membershipShards))
	nodes[0].Env = []string{"BATON_FAILPOINTS=membership-between-shards"}
	nodes[0].Restart()
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	load.progress(t, "node 1 armed")

	c := harness.Dial(t, nodes[0].ClientAddr)
	c.Send("M - ADD " + y.RaftAddr + "/" + y.ClientAddr)
	if line, err := c.ReadLine(changeAnswerWithin); err == nil {
		t.Fatalf("the coordinator answered the add it should have crashed in: %q", line)
	}
	c.Close()
	if code, err := nodes[0].Wait(10 * time.Second); err != nil || code != 3 {
		t.Fatalf("node 1: exit %d, %v; want the failpoint's 3", code, err)
	}
	load.progress(t, "node 1 crashed in the middle of the add")

	// The next leader of shard 1 finds the change and finishes it, by
	// itself (nobody sends the add again). Member 4 is then a learner of
	// both shards (it catches up on each below), and the change is over
	// (its promotion, a change too, is taken below).
	waitFor(t, promotedWithin, "the add finished by node 2 or 3", func() bool {
		return strings.Contains(nodes[1].Log()+nodes[2].Log(), "finishing a membership change")
	})
	if role := listMembers(t, nodes[1].ClientAddr)[4]; role != "learner" {
		t.Fatalf("member 4 after the add: %q; want learner", role)
	}

	y.Env = []string{"BATON_FAILPOINTS=learner-before-ready"}
	y.Start()
	if code, err := y.Wait(promotedWithin); err != nil || code != 3 {
		t.Fatalf("member 4: exit %d, %v; want the failpoint's 3 once it caught up", code, err)
	}
	if role := listMembers(t, nodes[1].ClientAddr)[4]; role != "learner" {
		t.Fatalf("member 4 crashed before it said it caught up, and is a %s; want learner", role)
	}
	y.Env = nil
	y.Args = []string{"--id", "4", "--data", y.DataDir}
	y.Start()
	waitFor(t, promotedWithin, "member 4 promoted after its restart", func() bool {
		return listMembers(t, nodes[1].ClientAddr)[4] == "voter"
	})
	// Member 4 learns of its promotion as it applies the directory, a
	// moment after the coordinator wrote it.
	waitFor(t, 10*time.Second, "member 4's log saying it was promoted", func() bool {
		return strings.Contains(y.Log(), "promoted to voter")
	})
	load.progress(t, "member 4 a voter")

	nodes[0].Env = nil
	nodes[0].Start()
	waitLeads(t, nodes, nodes[0], 20*time.Second)
	load.progress(t, "node 1 back")
	load.check(t)
}
