package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"

	sm "github.com/baton-dev/baton/statemachine"
)

// fakeRaft accepts every proposal; each one's RequestState reports what the
// test puts in its channel.
type fakeRaft struct{ states chan *dragonboat.RequestState }

func (f *fakeRaft) Propose(*client.Session, []byte, time.Duration) (*dragonboat.RequestState, error) {
	// A RequestState made outside dragonboat has only its CompletedC field
	// to report through (ResultC, which the watcher reads, returns it).
	//lint:ignore SA1019 see above
	rs := &dragonboat.RequestState{CompletedC: make(chan dragonboat.RequestResult, 1)}
	f.states <- rs
	return rs, nil
}

// proposingShard is testShard with a node that proposes to a fakeRaft and
// one proposal in flight at most.
func proposingShard(t *testing.T) (*shard, *fakeRaft) {
	t.Helper()
	s := limitedShard(t, withLimits(func(l *Limits) { l.MaxProposalsInFlight = 1 }))
	n := s.node
	f := &fakeRaft{states: make(chan *dragonboat.RequestState, 16)}
	n.raft, n.sessions, n.metrics = f, []*client.Session{nil}, newNodeMetrics()
	return s, f
}

// within fails the test if fn does not return within d: an event loop must
// never wait for a commit.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s blocked for %v", what, d)
	}
}

// With the watcher's queue full (commits stall), an event loop's proposal
// returns at once and leaves the batch pending; when the watcher takes an
// outcome off the queue, the proposer is kicked and proposes the rest.
func TestEventLoopNeverBlocksOnStalledCommits(t *testing.T) {
	s, f := proposingShard(t)
	n := s.node
	request(t, s, newConn(), "A a 10000 0")
	within(t, time.Second, "first proposal", func() { n.proposeFromLoop(s) })
	first := <-f.states

	stalled := newConn()
	request(t, s, stalled, "A b 10000 0")
	within(t, time.Second, "proposal with a full results queue", func() { n.proposeFromLoop(s) })
	if s.pending.Len() != 1 || !s.resultsFull.Load() {
		t.Fatalf("pending %d, resultsFull %v: want the batch kept and the stall noted", s.pending.Len(), s.resultsFull.Load())
	}
	select {
	case <-s.kick:
		t.Fatal("proposer kicked while the queue is still full")
	default:
	}

	// The watcher takes the first outcome (its wait timed out here) and so
	// frees the slot: it kicks the proposer, which proposes again.
	watched := make(chan struct{})
	go func() { defer close(watched); n.watchResults(s) }()
	first.CompletedC <- dragonboat.RequestResult{} //lint:ignore SA1019 the fake's channel (fakeRaft)
	select {
	case <-s.kick:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher freed a slot but did not kick the proposer")
	}
	within(t, time.Second, "proposer", func() { n.proposePending(s) })
	if len(f.states) == 0 {
		t.Fatal("nothing proposed after the kick")
	}
	// Let the watcher finish: every proposal made gets an outcome.
	for len(f.states) > 0 {
		(<-f.states).CompletedC <- dragonboat.RequestResult{} //lint:ignore SA1019 the fake's channel (fakeRaft)
	}
	close(s.results)
	select {
	case <-watched:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not finish")
	}
}

// While another goroutine proposes for the shard, an event loop does not
// wait for it: it kicks the proposer, which takes its batch along.
func TestEventLoopDoesNotWaitForBusyProposer(t *testing.T) {
	s, _ := proposingShard(t)
	request(t, s, newConn(), "A a 10000 0")
	s.proposeMu.Lock()
	within(t, time.Second, "proposal while the proposer is busy", func() { s.node.proposeFromLoop(s) })
	s.proposeMu.Unlock()
	select {
	case <-s.kick:
	default:
		t.Fatal("busy proposer not kicked")
	}
	if s.pending.Len() != 1 {
		t.Fatalf("pending %d, want the command kept for the proposer", s.pending.Len())
	}
}

// Past the bound of commands batched and not committed, requests that would
// add a command are answered ERR overloaded; an acquire that only queues
// behind a holder is not.
func TestFullBatchAnswersOverloaded(t *testing.T) {
	s := testShard(t)
	s.maxPending = 1
	holder, other, queued := newConn(), newConn(), newConn()
	request(t, s, holder, "A a 10000 0") // the one command the batch takes
	request(t, s, other, "A b 10000 0")
	request(t, s, other, "R a 1025")
	request(t, s, other, "K a 1025 10000")
	request(t, s, queued, "A a 10000 0") // queues behind a's Grant: no command
	got := answers(other)
	want := []string{"A b ERR overloaded ", "R a ERR overloaded ", "K a ERR overloaded "}
	if len(got) != len(want) {
		t.Fatalf("answers %q, want %d ERR overloaded", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("answer %d: %q, want %q...", i, got[i], want[i])
		}
	}
	if got := answers(queued); got != nil {
		t.Fatalf("queued acquire answered %q", got)
	}
	p, cmds := take(t, s)
	request(t, s, other, "A b 10000 0")
	if got := answers(other); len(got) != 1 || !strings.HasPrefix(got[0], "A b ERR overloaded ") {
		t.Fatalf("a's Grant proposed, not committed: %q, want b's ERR overloaded", got)
	}
	apply(s, p, cmds, sm.Result{Code: sm.Granted, Token: 1025})
	request(t, s, other, "A b 10000 0")
	if got := answers(other); got != nil || s.pending.Len() != 1 {
		t.Fatalf("after a's Grant committed: answers %q, pending %d; want b's Grant batched", got, s.pending.Len())
	}
}

// Past MaxProposalsInFlight, commands wait in the batch; past
// MaxPendingCommands as well, a request that would add one is answered ERR
// overloaded, while one that adds none (an acquire queueing behind a
// holder) is still served. Once a proposal settles, the batch goes out.
func TestProposalsInFlightBounded(t *testing.T) {
	s, f := proposingShard(t)
	s.maxPending = 2
	n := s.node
	cs := newConn()
	request(t, s, cs, "A a 10000 0")
	n.proposeFromLoop(s) // in flight
	request(t, s, cs, "A b 10000 0")
	n.proposeFromLoop(s) // waits in the batch
	request(t, s, cs, "A c 10000 0")
	request(t, s, cs, "A a 10000 0") // queues behind a's Grant
	if got := answers(cs); len(got) != 1 || got[0] != "A c ERR overloaded "+tooManyCommands {
		t.Fatalf("answers %q, want only c's ERR overloaded", got)
	}
	if len(f.states) != 1 || s.pending.Len() != 1 {
		t.Fatalf("%d proposed, %d batched: want 1 and 1", len(f.states), s.pending.Len())
	}
	hits := &n.adm.hits.counts
	if hits[limitProposalsInFlight].Load() == 0 || hits[limitPendingCommands].Load() != 1 {
		t.Fatalf("hits counted: proposals %d, commands %d", hits[limitProposalsInFlight].Load(), hits[limitPendingCommands].Load())
	}

	watched := make(chan struct{})
	go func() { defer close(watched); n.watchResults(s) }()
	(<-f.states).CompletedC <- dragonboat.RequestResult{} //lint:ignore SA1019 the fake's channel (fakeRaft)
	select {
	case <-s.kick:
	case <-time.After(5 * time.Second):
		t.Fatal("a proposal settled but the proposer was not kicked")
	}
	n.proposePending(s)
	select {
	case rs := <-f.states:
		//lint:ignore SA1019 the fake's channel (fakeRaft)
		rs.CompletedC <- dragonboat.RequestResult{}
	default:
		t.Fatal("the batch was not proposed once a proposal settled")
	}
	close(s.results)
	<-watched
}

// Queries waiting for a ReadIndex are bounded too.
func TestReadQueueBounded(t *testing.T) {
	s := testShard(t)
	s.node.cfg.Peers = append(s.node.cfg.Peers, Peer{RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"})
	s.maxReads = 2
	cs := newConn()
	for _, k := range []string{"a", "b", "c"} {
		request(t, s, cs, "Q "+k)
	}
	if got := answers(cs); len(got) != 1 || !strings.HasPrefix(got[0], "Q c ERR overloaded ") {
		t.Fatalf("answers %q, want only Q c ERR overloaded", got)
	}
	if len(s.reads) != 2 {
		t.Fatalf("%d reads queued, want 2", len(s.reads))
	}
}
