package chaos

// The membership faults (protocol 1.3, docs/protocol.md "Membership"):
// ReplaceMember and AddRemoveMember change the cluster's members while the
// workload runs. Their requests (M - ADD, REMOVE, LIST) go on plain
// connections of their own, not through the recorder: the checkers ignore
// M and C ops anyway, and the workload's clients find the new members by
// themselves (C -, and MOVED to them).
//
// A node that joins gets fresh ports, or its predecessor's when a member is
// rebuilt in place, with its Raft port behind a proxy of the run's Links
// like every other node, so that the other faults can isolate and cut it.
// It starts with `batond --id N --join RAFT/CLIENT --data EMPTY_DIR`, N
// being the id M - ADD answered (the cluster's, never reused), and every
// later start (a kill, a restart-all) is `--id N --data DIR` alone.

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// Bounds of the membership faults.
const (
	// memberWithin bounds one membership request, retried while the
	// cluster answers MOVED, ERR unavailable or ERR refused (another change
	// under way, a learner being promoted, the cluster version not yet 3,
	// a voter not heard from lately) or its connection fails.
	memberWithin = 90 * time.Second
	// memberAnswerWithin bounds the wait for one answer: the cluster takes
	// up to a minute over a change before it gives up (engine's
	// changeTimeout).
	memberAnswerWithin = 65 * time.Second
	// promotedWithin bounds a new member's promotion to voter, from its
	// start: it catches up, says so, and the coordinator promotes it
	// (within 30 s of its catching up, the protocol says).
	promotedWithin = 60 * time.Second
	// joinReadyTimeout bounds a joining node's start, until it answers
	// (MOVED, as a learner): it first learns the cluster's shards.
	joinReadyTimeout = 60 * time.Second
	// memberCost is what a membership fault is guessed to add to its
	// pause and hold (see faultCost): two changes, a join and a
	// promotion, about 3 to 5 s under -race, sometimes 10.
	memberCost = 8 * time.Second
	// firstJoinLabel is the Links label of the first node that joins at
	// new addresses (the next get the next numbers): above every id of
	// the nodes the run starts with.
	firstJoinLabel = 100
)

// CheckerMembership: a membership fault could not be carried out within
// its bounds (a change refused or unanswered for memberWithin, a new
// member not a voter within promotedWithin), a removed member exited 0, or
// at the end the cluster's members (M - LIST) were not the run's nodes,
// every one a voter.
const CheckerMembership = "membership"

// joinSpec is how a node that joins is started.
type joinSpec struct {
	bin  string
	env  []string
	args []string // more flags for every start, after the node's own
}

// addrOwner says that the node id holds a client address from a time on
// (the recorder's clock): a member rebuilt in place hands its addresses
// on to its successor.
type addrOwner struct {
	addr string
	id   int
	from time.Duration
}

// replaceMember injects a ReplaceMember fault into r.
func (in *injector) replaceMember(r *FaultRecord) {
	in.t.Helper()
	f := r.Fault
	old := in.nodes[f.Pick%len(in.nodes)]
	inPlace := f.Pick&(1<<15) != 0
	r.Start = in.clock()
	if inPlace {
		r.Target = nodeName(old) + ", rebuilt in place"
		if err := in.remove(old); err != nil {
			in.memberFailure(r, err)
			return
		}
		in.retire(old, 0)
		time.Sleep(f.Hold) // the machine being rebuilt
		nw, err := in.add(old.RaftAddr, old.ClientAddr, old.RaftListen, in.linkOf(old))
		if nw != nil {
			r.Target = fmt.Sprintf("%s by node %d at its addresses", nodeName(old), nw.ID)
		}
		if err != nil {
			in.memberFailure(r, err)
		}
		return
	}
	r.Target = nodeName(old) + ", by a node at new addresses"
	nw, err := in.addNew()
	if nw != nil {
		r.Target = fmt.Sprintf("%s by node %d at new addresses", nodeName(old), nw.ID)
	}
	if err != nil {
		in.memberFailure(r, err)
		return
	}
	if err := in.remove(old); err != nil {
		in.memberFailure(r, err)
		return
	}
	in.retire(old, f.Hold)
}

// addRemoveMember injects an AddRemoveMember fault into r.
func (in *injector) addRemoveMember(r *FaultRecord) {
	in.t.Helper()
	r.Start = in.clock()
	r.Target = "a node at new addresses"
	nw, err := in.addNew()
	if nw != nil {
		r.Target = nodeName(nw)
	}
	if err != nil {
		in.memberFailure(r, err)
		return
	}
	time.Sleep(r.Hold) // a voter among the others
	if err := in.remove(nw); err != nil {
		in.memberFailure(r, err)
		return
	}
	in.retire(nw, r.Hold)
}

// memberFailure records a membership fault that could not be carried out.
func (in *injector) memberFailure(r *FaultRecord, err error) {
	r.Target += " (failed)"
	in.memberFailures = append(in.memberFailures, fmt.Sprintf("%s, from %v: %v", r.Kind, r.Start.Round(time.Millisecond), err))
	in.t.Logf("chaos: %s on %s: %v", r.Kind, r.Target, err)
}

// addNew adds a node at new addresses (see add).
func (in *injector) addNew() (*harness.Node, error) {
	in.t.Helper()
	addrs := harness.FreeAddrs(in.t, 2)
	listen, client := addrs[0], addrs[1]
	label := in.nextLabel
	in.nextLabel++
	raft := in.links.Listen(in.t, label, listen)
	return in.add(raft, client, listen, label)
}

// add adds a member at the addresses raft (advertised, the proxy's) and
// client (M - ADD), starts a node there that joins, the proxy labelled
// label in front of its Raft port listen, and waits until the node is a
// voter. It returns the node once started, with an error if something
// went wrong on the way, and nil when the cluster would not add it.
func (in *injector) add(raft, client, listen string, label int) (*harness.Node, error) {
	in.t.Helper()
	f, err := in.member("ADD "+raft+"/"+client, func(f []string) bool {
		// A repeat of an add whose answer was lost: "address A is member
		// N's", A being one of ours.
		return ownedBy(f, raft, client) > 0
	})
	if err != nil {
		return nil, fmt.Errorf("adding %s/%s (M - ADD): %w", raft, client, err)
	}
	id := 0
	if len(f) == 2 && f[0] == "OK" {
		id, _ = strconv.Atoi(f[1])
	} else if id = ownedBy(f, raft, client); id > 0 {
		in.t.Logf("chaos: M - ADD %s/%s: %s (taken as done: an earlier attempt's answer was lost)", raft, client, strings.Join(f, " "))
	}
	if id <= 0 {
		return nil, fmt.Errorf("adding %s/%s (M - ADD): answered %s, want OK <id>", raft, client, strings.Join(f, " "))
	}
	for _, n := range in.all {
		if n.ID == id {
			return nil, fmt.Errorf("adding %s/%s (M - ADD): answered id %d, which %s had (ids are never reused)", raft, client, id, nodeName(n))
		}
	}
	dir := in.t.TempDir()
	data := filepath.Join(dir, "data")
	own := []string{"--id", strconv.Itoa(id), "--data", data, "--raft-listen", listen}
	n := harness.NewNode(in.t, in.join.bin, dir, client,
		append([]string{"--id", strconv.Itoa(id), "--join", raft + "/" + client, "--data", data, "--raft-listen", listen}, in.join.args...)...)
	n.ID, n.RaftAddr, n.RaftListen, n.DataDir, n.Env = id, raft, listen, data, in.join.env
	n.ReadyTimeout = joinReadyTimeout
	n.AllowMoved()
	in.label[n] = label
	in.nodes = append(in.nodes, n)
	in.all = append(in.all, n)
	in.owners = append(in.owners, addrOwner{addr: client, id: id, from: in.clock()})
	start := time.Now()
	n.Start()
	n.Args = append(own, in.join.args...) // --join only once
	if err := waitVoter(n, promotedWithin); err != nil {
		return n, err
	}
	in.t.Logf("chaos: node %d joined and was promoted in %v", id, time.Since(start).Round(time.Millisecond))
	return n, nil
}

// ownedBy reads the member's id from a refusal "ERR refused address A is
// member N's" of an ADD, when A is raft or client; 0 for any other answer.
func ownedBy(f []string, raft, client string) int {
	// ERR refused address A is member N's
	if len(f) < 7 || f[0] != "ERR" || f[1] != "refused" || f[2] != "address" || (f[3] != raft && f[3] != client) || f[4] != "is" || f[5] != "member" {
		return 0
	}
	id, err := strconv.Atoi(strings.TrimSuffix(f[6], "'s"))
	if err != nil {
		return 0
	}
	return id
}

// waitVoter waits until node n says it is a voter (M - LIST, its applied
// view).
func waitVoter(n *harness.Node, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := "no answer"
	for {
		f, err := memberOnce(n.ClientAddr, "LIST", 5*time.Second)
		switch {
		case err != nil:
			last = err.Error()
		case f[0] != "OK":
			last = "M - " + strings.Join(f, " ")
		default:
			role := roleOf(f[1:], n.ID)
			if role == "voter" {
				return nil
			}
			last = fmt.Sprintf("role %q in M - LIST: %s", role, strings.Join(f[1:], " "))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d is not a voter %v after its start (last: %s)", n.ID, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// roleOf finds member id's role in the members of an M - LIST answer
// (id/role/raft/client/tls each); "" when it is not listed.
func roleOf(members []string, id int) string {
	for _, m := range members {
		p := strings.Split(m, "/")
		if len(p) == 5 && p[0] == strconv.Itoa(id) {
			return p[1]
		}
	}
	return ""
}

// remove removes member n (M - REMOVE) and takes it off the run's nodes.
// The process is left as it is: see retire.
func (in *injector) remove(n *harness.Node) error {
	in.t.Helper()
	noMember := fmt.Sprintf("there is no member %d", n.ID)
	f, err := in.member(fmt.Sprintf("REMOVE %d", n.ID), func(f []string) bool {
		// A repeat of a removal whose answer was lost.
		return strings.Contains(strings.Join(f, " "), noMember)
	})
	if err != nil {
		return fmt.Errorf("removing member %d (M - REMOVE): %w", n.ID, err)
	}
	if f[0] != "OK" {
		in.t.Logf("chaos: M - REMOVE %d: %s (taken as done: an earlier attempt's answer was lost)", n.ID, strings.Join(f, " "))
	}
	in.nodes = slices.DeleteFunc(in.nodes, func(m *harness.Node) bool { return m == n })
	return nil
}

// retire is the end of a removed member's machine: it may exit by itself
// (non-zero, within 30 s, the protocol says), which retire waits for up
// to within; then it is killed, and its data dir wiped.
func (in *injector) retire(n *harness.Node, within time.Duration) {
	in.t.Helper()
	if n.Running() && within > 0 {
		_, _ = n.Wait(within)
	}
	if !n.Running() {
		code, _ := n.Wait(time.Second)
		in.t.Logf("chaos: %s, removed, exited by itself with code %d", nodeName(n), code)
		if code == 0 {
			in.memberFailures = append(in.memberFailures, fmt.Sprintf("%s, removed, exited 0; want non-zero (removed from the cluster)", nodeName(n)))
		}
	}
	n.Kill()
	if err := os.RemoveAll(n.DataDir); err != nil {
		in.t.Logf("chaos: wiping %s's data dir: %v", nodeName(n), err)
	}
}

// member sends "M - <args>" until it is answered OK or with a refusal that
// final accepts (nil: none), within memberWithin, to the running nodes,
// following MOVED. It returns the answer's fields after "M -".
func (in *injector) member(args string, final func(f []string) bool) ([]string, error) {
	var addrs []string
	for _, n := range in.nodes {
		if n.Running() {
			addrs = append(addrs, n.ClientAddr)
		}
	}
	if len(addrs) == 0 {
		return nil, errors.New("no node runs")
	}
	return memberRequest(addrs, args, memberWithin, final)
}

// memberRequest sends "M - <args>" to addrs in turn, following MOVED,
// retrying ERR unavailable, ERR refused (but what final accepts) and
// failed connections, until an answer OK or within passes. It returns the
// answer's fields after "M -". ERR badrequest ends it at once.
func memberRequest(addrs []string, args string, within time.Duration, final func(f []string) bool) ([]string, error) {
	deadline := time.Now().Add(within)
	last := "no answer"
	next, to := 0, ""
	for tries := 0; tries < 10_000 && time.Now().Before(deadline); tries++ {
		if to == "" {
			to = addrs[next%len(addrs)]
			next++
		}
		f, err := memberOnce(to, args, min(memberAnswerWithin, time.Until(deadline)))
		pause := 100 * time.Millisecond
		switch {
		case err != nil:
			last, to = err.Error(), ""
		case f[0] == "OK":
			return f, nil
		case f[0] == "MOVED" && len(f) == 2:
			last, to, pause = "MOVED "+f[1], f[1], 10*time.Millisecond
		case f[0] == "ERR" && len(f) > 1 && f[1] == "refused":
			if final != nil && final(f) {
				return f, nil
			}
			last, pause = strings.Join(f, " "), 250*time.Millisecond // to the same node: it coordinates
		case f[0] == "ERR" && len(f) > 1 && f[1] == "unavailable":
			last, to = strings.Join(f, " "), ""
		default:
			return f, fmt.Errorf("answered %q", strings.Join(f, " "))
		}
		time.Sleep(pause)
	}
	return nil, fmt.Errorf("not done within %v (last: %s)", within, last)
}

// memberOnce sends "M - <args>" on a fresh connection to addr and returns
// the answer's fields after "M -".
func memberOnce(addr, args string, timeout time.Duration) ([]string, error) {
	line, err := askLine(addr, "M - "+args, timeout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "M" || f[1] != "-" {
		return nil, fmt.Errorf("%s answered %q", addr, strings.TrimSpace(line))
	}
	return f[2:], nil
}

// checkMembers asks the cluster for its members at the end of the run and
// returns what is wrong: a member that is no node of the run, a node that
// is not a member, or one that is not a voter.
func (in *injector) checkMembers() []string {
	f, err := in.member("LIST", nil)
	if err != nil {
		return []string{fmt.Sprintf("M - LIST at the end of the run: %v", err)}
	}
	want := make(map[int]bool)
	for _, n := range in.nodes {
		want[n.ID] = true
	}
	var wrong []string
	for _, m := range f[1:] {
		p := strings.Split(m, "/")
		id, err := strconv.Atoi(p[0])
		switch {
		case len(p) != 5 || err != nil:
			wrong = append(wrong, fmt.Sprintf("M - LIST at the end of the run: member %q", m))
		case !want[id]:
			wrong = append(wrong, fmt.Sprintf("at the end of the run, member %s is none of the run's nodes (M - LIST: %s)", m, strings.Join(f[1:], " ")))
		case p[1] != "voter":
			wrong = append(wrong, fmt.Sprintf("at the end of the run, member %s is not a voter (M - LIST: %s)", m, strings.Join(f[1:], " ")))
		}
		delete(want, id)
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		wrong = append(wrong, fmt.Sprintf("at the end of the run, node %d is not a member (M - LIST: %s)", id, strings.Join(f[1:], " ")))
	}
	return wrong
}

// linkOf is the label of node n's proxy in the run's Links.
func (in *injector) linkOf(n *harness.Node) int {
	if l, ok := in.label[n]; ok {
		return l
	}
	return n.ID
}
