package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// threeVoters is a directory of voters 1, 2 and 3 (priority 1, 2, 3) and
// learner 4, as shard 1 would hold it.
func threeVoters() *directory {
	d := bootstrapDirectory([]Peer{{"h1:1", "h1:2"}, {"h2:1", "h2:2"}, {"h3:1", "h3:2"}}, []string{"h1:3", "", "h3:3"}, 2)
	d.Members = append(d.Members, member{ID: 4, Raft: "h4:1", Client: "h4:2", Role: roleLearner})
	d.NextID, d.Removed, d.version = 5, []uint64{7}, 9
	d.count()
	return d
}

// TestDirectoryViews: what C -, M - LIST and WHOIS answer from a
// directory, and the priority order.
func TestDirectoryViews(t *testing.T) {
	d := threeVoters()
	if got := d.clientAddrs(false); got != "h1:2,h2:2,h3:2" {
		t.Errorf("C - = %q", got)
	}
	if got := d.clientAddrs(true); got != "h1:3,h2:2,h3:3" {
		t.Errorf("C - on TLS = %q (a voter without a TLS address gives its plain one)", got)
	}
	if got, want := d.list(), "1/voter/h1:1/h1:2/h1:3 2/voter/h2:1/h2:2/- 3/voter/h3:1/h3:2/h3:3 4/learner/h4:1/h4:2/-"; got != want {
		t.Errorf("LIST = %q, want %q", got, want)
	}
	for id, want := range map[uint64]string{1: whoisMember, 4: whoisMember, 7: whoisRemoved, 5: whoisFree} {
		if got := d.whois(id); got != want {
			t.Errorf("WHOIS %d = %q, want %q", id, got, want)
		}
	}
	if got := bootstrapDirectory(nil, nil, 1).whois(1); got != whoisBootstrap {
		t.Errorf("WHOIS on a bootstrap view = %q", got)
	}
	if !(d.rank(1) < d.rank(3) && d.rank(3) < d.rank(4) && d.rank(4) < d.rank(99)) {
		t.Errorf("ranks 1:%d 3:%d 4:%d 99:%d: want voters in order, then learners, then strangers", d.rank(1), d.rank(3), d.rank(4), d.rank(99))
	}
	back, err := decodeDirectory(d.encode(), 10)
	if err != nil || back.list() != d.list() || back.NextID != 5 || back.voters != 3 || back.version != 10 {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

// TestDirectoryChanges: the directories an ADD and a PRIORITY make, and
// what they refuse (badArgs: ERR badrequest; other errors: ERR refused).
func TestDirectoryChanges(t *testing.T) {
	tests := []struct {
		verb, arg string
		list      string // the new LIST; "" when refused
		bad       bool   // a badrequest rather than a refusal
	}{
		{verbAdd, "h5:1/h5:2", "1/voter/h1:1/h1:2/h1:3 2/voter/h2:1/h2:2/- 3/voter/h3:1/h3:2/h3:3 4/learner/h4:1/h4:2/- 5/learner/h5:1/h5:2/-", false},
		{verbAdd, "h5:1/h5:2/h5:3", "1/voter/h1:1/h1:2/h1:3 2/voter/h2:1/h2:2/- 3/voter/h3:1/h3:2/h3:3 4/learner/h4:1/h4:2/- 5/learner/h5:1/h5:2/h5:3", false},
		{verbAdd, "h5:1/h2:2", "", false},
		{verbAdd, "h5:1/h5:1", "", true},
		{verbAdd, "h5:1", "", true},
		{verbAdd, "h5:1/h5:2/h5:3/h5:4", "", true},
		{verbAdd, "h5/h5:2", "", true},
		{verbPriority, "3,1,2", "3/voter/h3:1/h3:2/h3:3 1/voter/h1:1/h1:2/h1:3 2/voter/h2:1/h2:2/- 4/learner/h4:1/h4:2/-", false},
		{verbPriority, "3,1", "", false},
		{verbPriority, "3,1,4", "", false},
		{verbPriority, "3,1,9", "", false},
		{verbPriority, "3,1,1", "", true},
		{verbPriority, "3,x,1", "", true},
	}
	for _, tc := range tests {
		d := threeVoters()
		before := d.list()
		var nd *directory
		var err error
		if tc.verb == verbAdd {
			nd, err = addMember(d, []string{tc.arg})
		} else {
			nd, err = reorder(d, []string{tc.arg})
		}
		if d.list() != before {
			t.Errorf("%s %s changed the directory it was given", tc.verb, tc.arg)
		}
		if tc.list == "" {
			_, bad := err.(badArgs)
			if err == nil || bad != tc.bad {
				t.Errorf("%s %s: %v (badrequest %v), want a refusal (badrequest %v)", tc.verb, tc.arg, err, bad, tc.bad)
			}
			continue
		}
		if err != nil || nd.list() != tc.list {
			t.Errorf("%s %s: %v, %q; want %q", tc.verb, tc.arg, err, nd.list(), tc.list)
			continue
		}
		if tc.verb == verbAdd && (nd.Change == nil || nd.Change.Kind != changeAdd || nd.Change.ID != 5 || nd.NextID != 6) {
			t.Errorf("ADD %s: change %+v, next id %d; want the add of 5 under way, next id 6", tc.arg, nd.Change, nd.NextID)
		}
	}
}

// TestMembershipChangeUnderWay, on a real node: a change meets another
// under way and is refused, saying so, whether the other runs on this
// coordinator or was left in the directory by one that died after writing
// it (step 1); the coordinator then finishes the left one by itself in
// every shard (a learner added) and clears it; and the same ADD sent
// again once it is done is refused (the address is the new member's).
func TestMembershipChangeUnderWay(t *testing.T) {
	n := startTestNode(t, nil)
	waitFor(t, "the first directory", func() bool { return n.view().version > 0 })
	cs := &connState{}
	answer := func(args ...string) string {
		return string(codec.AppendResponse(nil, n.member(cs, args)))
	}

	if !n.lockChange(changeTimeout) {
		t.Fatal("the coordinator kept the change slot")
	}
	if got := answer("ADD", "127.0.0.1:1/127.0.0.1:2"); !strings.HasPrefix(got, "M - ERR refused a membership change is under way") {
		t.Errorf("ADD while the coordinator makes a change: %q", got)
	}
	n.unlockChange()

	// A coordinator that wrote the add of member 2 and died.
	if !n.lockChange(changeTimeout) {
		t.Fatal("the coordinator kept the change slot")
	}
	d := n.view()
	nd, err := addMember(d, []string{"127.0.0.1:1/127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), changeTimeout)
	defer cancel()
	if err := n.writeDirectory(ctx, d, nd); err != nil {
		t.Fatal(err)
	}
	if got := answer("ADD", "127.0.0.1:3/127.0.0.1:4"); !strings.HasPrefix(got, "M - ERR refused a membership change is under way (add of member 2)") {
		t.Errorf("ADD while another add is written: %q", got)
	}
	n.unlockChange()

	waitFor(t, "the coordinator to finish the add it found", func() bool { return n.view().Change == nil })
	for _, s := range n.shards {
		m, err := n.nh.SyncGetShardMembership(ctx, s.id)
		if _, learner := m.NonVotings[2]; err != nil || !learner {
			t.Errorf("shard %d: membership %+v, %v; want member 2 a learner", s.id, m, err)
		}
	}
	if got := answer("ADD", "127.0.0.1:1/127.0.0.1:2"); got != "M - ERR refused address 127.0.0.1:1 is member 2's\n" {
		t.Errorf("the same ADD once done: %q", got)
	}
	if v := n.shards[0].stats.clusterVersion.Load(); v != sm.FeatureLevel {
		t.Errorf("cluster version %d", v)
	}
}

// TestCutOffWatch: a node asks about its fate once it has known no
// leader of shard 1 for cutOffAsk, then every cutOffAsk while that lasts,
// and starts counting again after it knew one.
func TestCutOffWatch(t *testing.T) {
	var w cutOffWatch
	t0 := time.Unix(1000, 0)
	steps := []struct {
		leaderless bool
		at         time.Duration
		want       bool
	}{
		{false, 0, false},
		{true, time.Second, false}, // counting from here
		{true, time.Second + cutOffAsk - 1, false},
		{true, time.Second + cutOffAsk, true}, // asks
		{true, time.Second + cutOffAsk + 1, false},
		{true, time.Second + 2*cutOffAsk, true}, // asks again
		{false, 20 * time.Second, false},        // a leader: starts over
		{true, 21 * time.Second, false},
		{true, 21*time.Second + cutOffAsk, true},
	}
	for i, st := range steps {
		if got := w.due(st.leaderless, t0.Add(st.at)); got != st.want {
			t.Errorf("step %d (leaderless %v at %v): due %v, want %v", i, st.leaderless, st.at, got, st.want)
		}
	}
}

// TestAskFate: a node asks the members it knows, then its data dir's
// peers, each once, and fails with ErrRemoved when one says it was
// removed; "member" or no answer keeps it running.
func TestAskFate(t *testing.T) {
	for _, answer := range []string{whoisMember, whoisRemoved, ""} {
		t.Run("answer "+answer, func(t *testing.T) {
			addr := fakeWhois(t, answer)
			n := &Node{cfg: Config{ID: 2, Peers: []Peer{{"r1", addr}, {"r2", "127.0.0.1:1"}}}, failed: make(chan error, 1), log: slog.New(slog.DiscardHandler)}
			d := &directory{Members: []member{{ID: 1, Client: addr}, {ID: 2, Client: "127.0.0.1:1"}}}
			if got := n.fateAddrs(d); !slices.Equal(got, []string{addr, addr}) {
				t.Errorf("fateAddrs: %v, want %v twice", got, addr)
			}
			done := n.askFate(d)
			if want := answer == whoisRemoved; done != want {
				t.Fatalf("askFate with %q: %v, want %v", answer, done, want)
			}
			select {
			case err := <-n.failed:
				if !done || !errors.Is(err, ErrRemoved) {
					t.Errorf("failed with %v", err)
				}
			default:
				if done {
					t.Error("askFate said done but the node did not fail")
				}
			}
		})
	}
}

// fakeWhois serves one answer to M - WHOIS on a local port (no answer at
// all for ""), for each connection, and returns its address.
func fakeWhois(t *testing.T, answer string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "M - WHOIS 2") || answer == "" {
					return
				}
				fmt.Fprintf(c, "M - OK %s\n", answer)
			}()
		}
	}()
	return l.Addr().String()
}

// TestLockChange: the change slot is taken at once when free; taken, it is
// refused at once without a wait, had once its holder gives it back within
// the wait, and refused when the wait runs out or the node stops.
func TestLockChange(t *testing.T) {
	n := &Node{changing: make(chan struct{}, 1), stopC: make(chan struct{})}
	if !n.lockChange(0) {
		t.Fatal("a free slot refused")
	}
	if n.lockChange(0) {
		t.Fatal("a taken slot taken again without a wait")
	}
	if n.lockChange(10 * time.Millisecond) {
		t.Fatal("a taken slot taken again after the wait ran out")
	}
	go n.unlockChange()
	if !n.lockChange(time.Minute) {
		t.Fatal("the slot not had once its holder gave it back")
	}
	close(n.stopC)
	start := time.Now()
	if n.lockChange(time.Minute) {
		t.Fatal("a taken slot taken on a stopping node")
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the stop ended a wait only after %v", waited)
	}
}

// TestClearChangeAfterReadyReport: a learner's report that it caught up,
// written between a change's shard steps and its last step, does not fail
// the change, and the report is kept.
func TestClearChangeAfterReadyReport(t *testing.T) {
	n := startTestNode(t, nil)
	waitFor(t, "the first directory", func() bool { return n.view().version > 0 })
	// The coordinator's loop stays out: the slot is the test's to the end.
	if !n.lockChange(changeTimeout) {
		t.Fatal("the coordinator kept the change slot")
	}
	ctx, cancel := context.WithTimeout(context.Background(), changeTimeout)
	defer cancel()

	// Member 2 added as a learner and the add under way: written, then made
	// in every shard.
	d := n.view()
	added, err := addMember(d, []string{"127.0.0.1:1/127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.writeDirectory(ctx, d, added); err != nil {
		t.Fatal(err)
	}
	underWay := n.view()
	m2, _ := underWay.member(2)
	for _, s := range n.shards {
		if err := n.changeShard(ctx, s.id, underWay.Change, m2); err != nil {
			t.Fatal(err)
		}
	}
	// Member 2 reports itself caught up on the directory it knows.
	ready := underWay.clone()
	ready.Members[slices.IndexFunc(ready.Members, func(m member) bool { return m.ID == 2 })].Ready = true
	if err := n.writeDirectory(ctx, underWay, ready); err != nil {
		t.Fatal(err)
	}

	if err := n.clearChange(ctx, underWay); err != nil {
		t.Fatalf("the last step after the report: %v", err)
	}
	got := n.view()
	if m, _ := got.member(2); got.Change != nil || m.Role != roleLearner || !m.Ready {
		t.Errorf("after the change: change %+v, member 2 %+v; want no change, member 2 a ready learner", got.Change, m)
	}
	// A change that is no longer the one under way is not cleared again.
	if err := n.clearChange(ctx, underWay); !errors.Is(err, errConflict) {
		t.Errorf("the last step of a change already cleared: %v, want errConflict", err)
	}
	if v := n.view().version; v != got.version {
		t.Errorf("directory version %d after a refused clear, want %d", v, got.version)
	}
}
