package chaos

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
)

// TestCheckTokens: the token checker on its own findings, where the model,
// which sees one key at a time, cannot help.
func TestCheckTokens(t *testing.T) {
	ok := codec.StatusOK
	tok := "tokens"
	runHistoryCases(t, []historyCase{
		{name: "one token granted for two keys", want: []string{tok}, h: []Op{
			hGrant(1, "a", 1000, 0, 1, 1025),
			hGrant(2, "b", 1000, 2, 3, 1025),
		}},
		{name: "a query shows another key's token", want: []string{tok}, h: []Op{
			hGrant(1, "a", 1000, 0, 1, 1025),
			hHeld(2, "b", 2, 3, 1025),
		}},
		{name: "concurrent grants may come in either order", h: []Op{
			hGrant(1, "k", 10, 0, 30, 2049),
			hRelease(1, "k", 2049, 31, 32, ok),
			hGrant(2, "k", 10, 1, 40, 3073),
			hGrant(3, "a", 10, 0, 30, 1025),
		}},
		{name: "the same phantom seen twice", h: []Op{
			hHeld(1, "k", 0, 1, 1025),
			hHeld(2, "k", 2, 3, 1025),
		}},
		{name: "one owner's token on two keys", want: []string{tok}, h: []Op{
			hOwned(hGrant(1, "a", 1000, 0, 1, 1025), "o1"),
			hOwned(hGrant(2, "b", 1000, 2, 3, 1025), "o1"),
		}},
		{name: "one owner's grant answered on two keys' queries", want: []string{tok}, h: []Op{
			hOwned(hGrant(1, "a", 1000, 0, 1, 1025), "o1"),
			hOwned(hHeld(2, "b", 2, 3, 1025), "o1"),
		}},
		{name: "an owner's grant answered to two attempts and shown", h: []Op{
			hOwned(hGrant(1, "k", 1000, 0, 10, 1025), "o1"),
			hOwned(hGrant(2, "k", 1000, 5, 6, 1025), "o1"),
			hOwned(hHeld(3, "k", 7, 8, 1025), "o1"),
			hOwned(hGrant(2, "k", 1000, 20, 21, 1025), "o1"),
		}},
	})
}

// TestCheckTokensOrder drives the real-time sweep directly, since the model
// would flag these histories too.
func TestCheckTokensOrder(t *testing.T) {
	tests := []struct {
		name string
		h    []Op
		want int // violation lines
	}{
		{"increasing", []Op{hGrant(1, "k", 1, 0, 1, 1025), hGrant(1, "k", 1, 2, 3, 2049), hGrant(1, "k", 1, 4, 5, 3073)}, 0},
		{"overlapping, smaller second", []Op{hGrant(1, "k", 1, 0, 5, 2049), hGrant(2, "k", 1, 4, 6, 1025)}, 0},
		{"smaller after a larger one returned", []Op{hGrant(1, "k", 1, 0, 1, 2049), hGrant(2, "k", 1, 2, 3, 1025)}, 1},
		{"smaller than a grant two before", []Op{hGrant(1, "k", 1, 0, 1, 3073), hGrant(2, "k", 1, 2, 3, 4097), hGrant(3, "k", 1, 10, 11, 2049)}, 1},
		{"per key", []Op{hGrant(1, "a", 1, 0, 1, 3073), hGrant(2, "b", 1, 2, 3, 2049)}, 0},
		// Owners: the same token again is legal only for the same owner.
		{"the same owner's token again", []Op{hOwned(hGrant(1, "k", 1, 0, 1, 1025), "o1"), hOwned(hGrant(2, "k", 1, 2, 3, 1025), "o1")}, 0},
		{"the same token again without owners", []Op{hGrant(1, "k", 1, 0, 1, 1025), hGrant(2, "k", 1, 2, 3, 1025)}, 2},
		{"the same token again for another owner", []Op{hOwned(hGrant(1, "k", 1, 0, 1, 1025), "o1"), hOwned(hGrant(2, "k", 1, 2, 3, 1025), "o2")}, 2},
		{"the same owner's token after a larger one", []Op{
			hOwned(hGrant(1, "k", 1, 0, 1, 1025), "o1"), hOwned(hGrant(2, "k", 1, 2, 3, 2049), "o2"), hOwned(hGrant(1, "k", 1, 4, 5, 1025), "o1"),
		}, 1},
		{"the same owner's token, smaller", []Op{hOwned(hGrant(1, "k", 1, 0, 1, 2049), "o1"), hOwned(hGrant(2, "k", 1, 2, 3, 1025), "o1")}, 1},
	}
	for _, tt := range tests {
		if got := checkTokens(tt.h); len(got) != tt.want {
			t.Errorf("%s: %d violations, want %d: %v", tt.name, len(got), tt.want, got)
		}
	}
}

func TestCheckProblems(t *testing.T) {
	h := []Op{hGrant(1, "k", 1000, 0, 1, 1025)}
	problems := []string{`conn 1 at 2.000ms: stray answer "A k OK 2049": no A k request is outstanding`}
	rep := Check(h, problems, CheckConfig{OutDir: t.TempDir()})
	if got := checkersFound(rep); len(got) != 1 || got[0] != "protocol" {
		t.Fatalf("checkers that fired: %v, want [protocol]", got)
	}
	if !strings.Contains(rep.Violations[0], "stray answer") {
		t.Errorf("violation %q does not carry the problem", rep.Violations[0])
	}
	if Check(h, nil, CheckConfig{}).OK() != true {
		t.Errorf("the same history without the problem fails")
	}
}

func TestCheckHangs(t *testing.T) {
	ok := codec.StatusOK
	tests := []struct {
		name  string
		op    Op
		hangs bool
	}{
		{"release answered in time", hRelease(1, "k", 0, 0, 999, ok), false},
		{"release answered late", hRelease(1, "k", 0, 0, 1001, ok), true},
		{"query unanswered when the run ended", hLost(hFree(1, "k", 0, 5000)), true},
		{"query cut off by a connection failure in time", hLost(hFree(1, "k", 0, 900)), false},
		{"waiting acquire answered within its wait plus the bound", hWait(hTimeout(1, "k", 0, 0, 5900), 5000), false},
		{"waiting acquire answered late", hWait(hTimeout(1, "k", 0, 0, 6100), 5000), true},
		{"try-lock answered late", hTimeout(1, "k", -1, 0, 1100), true},
		{"acquire that waits forever", hLost(hWait(hTimeout(1, "k", 0, 0, 60000), 0)), false},
	}
	for _, tt := range tests {
		rep := Check([]Op{tt.op}, nil, CheckConfig{AnswerBound: time.Second, OutDir: t.TempDir()})
		got := checkersFound(rep)
		if hangs := len(got) == 1 && got[0] == "hang"; hangs != tt.hangs || !tt.hangs && len(got) > 0 {
			t.Errorf("%s: checkers that fired %v, want hang=%v; %v", tt.name, got, tt.hangs, rep.Violations)
		}
	}
	// A history taken before Finish cannot be judged.
	open := hLost(hFree(1, "k", 10, 0))
	if rep := Check([]Op{open}, nil, CheckConfig{}); rep.OK() {
		t.Errorf("a request with no Return passed the hang check")
	}
}

// TestCheckVisualization: a history porcupine rejects leaves its HTML
// visualization in OutDir, named in the report.
func TestCheckVisualization(t *testing.T) {
	dir := t.TempDir()
	h := []Op{
		hGrant(1, "a", 1000, 0, 1, 1025), // a legal key beside the illegal one
		hGrant(1, "orders/42", 1000, 0, 1, 2049),
		hGrant(2, "orders/42", 1000, 10, 11, 3073),
	}
	rep := Check(h, nil, CheckConfig{OutDir: dir})
	if rep.OK() || rep.Visualization == "" {
		t.Fatalf("report %+v: want a violation with a visualization", rep)
	}
	if !strings.HasPrefix(rep.Visualization, dir) {
		t.Errorf("visualization %s is not in OutDir %s", rep.Visualization, dir)
	}
	data, err := os.ReadFile(rep.Visualization)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "<html") || !strings.Contains(string(data), "held by 2049") {
		t.Errorf("visualization does not look like one of this model (%d bytes)", len(data))
	}
	if len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], rep.Visualization) || !strings.Contains(rep.Violations[0], `"orders/42"`) {
		t.Errorf("violations %q: want one naming the key and the file", rep.Violations)
	}
	if rep.Ops != 3 || rep.ByKey["orders/42"] != 2 || rep.ByKey["a"] != 1 {
		t.Errorf("Ops %d, ByKey %v: want 3, orders/42:2 a:1", rep.Ops, rep.ByKey)
	}
}

// TestCheckTimeoutInconclusive: running out of time is a finding, not a
// pass.
func TestCheckTimeoutInconclusive(t *testing.T) {
	h := []Op{hGrant(1, "k", 1000, 0, 1, 1025)}
	rep := Check(h, nil, CheckConfig{Timeout: time.Nanosecond})
	if rep.OK() || !strings.Contains(strings.Join(rep.Violations, "\n"), "inconclusive") {
		t.Errorf("violations %q: want an inconclusive one", rep.Violations)
	}
}

// simulatedServer is one simulated server whose history both the checker
// (TestCheckSyntheticHistory) and the sweep (TestCheckSweepSynthetic) are
// tried on: a correct one, which both must pass, or one with a planted bug,
// which both must catch.
type simulatedServer struct {
	name     string
	seed     uint64
	stall    bool // leaderless spells: answers are held back, and so overlap
	owners   bool // every acquire names an owner, and a lost or MOVED one is retried with it
	bug      bool // leases end early
	shareBug bool // with owners: an acquire of a held key gets the holder's token, whatever its owner
	correct  bool
}

var simulatedServers = []simulatedServer{
	{"correct server", 1, false, false, false, false, true},
	{"correct server, another seed", 2, false, false, false, false, true},
	{"correct server with leaderless spells", 3, true, false, false, false, true},
	{"correct server with owners", 4, false, true, false, false, true},
	{"correct server with owners, another seed", 5, false, true, false, false, true},
	{"correct server with owners and leaderless spells", 6, true, true, false, false, true},
	{"server ends leases early", 1, false, false, true, false, false},
	{"server ends leases early, with owners", 4, false, true, true, false, false},
	{"server shares a grant with another owner", 4, false, true, false, true, false},
}

// history runs the server's simulation for 5,000 ops.
func (ss simulatedServer) history() (*simulation, []Op) {
	sim := newSimulation(ss.seed, ss.bug)
	sim.stall, sim.owners, sim.shareBug = ss.stall, ss.owners, ss.shareBug
	return sim, sim.run(5000)
}

// TestCheckSyntheticHistory: a history of a simulated correct server (~5,000
// ops over 6 keys from 12 clients, with phantoms, expiries and a few dozen
// unknown outcomes) passes in reasonable time, with owners and retries too;
// the same simulation with a server that ends leases early, or that hands
// the holder's token to any owner, is caught.
func TestCheckSyntheticHistory(t *testing.T) {
	for _, tt := range simulatedServers {
		t.Run(tt.name, func(t *testing.T) {
			sim, h := tt.history()
			start := time.Now()
			rep := Check(h, nil, CheckConfig{AnswerBound: time.Second, OutDir: t.TempDir(), Timeout: time.Minute})
			t.Logf("%d ops (%d to porcupine, %d unknown, %d phantoms seen, %d expiries, %d retries, %d answered with the owner's grant), checked in %v",
				len(h), rep.Ops, sim.unknown, sim.phantomsSeen, sim.expiries, sim.retries, sim.retryHits, time.Since(start).Round(time.Millisecond))
			if rep.OK() != tt.correct {
				t.Errorf("OK() = %v, want %v; violations:\n%s", rep.OK(), tt.correct, strings.Join(rep.Violations, "\n"))
			}
			if tt.correct && (sim.unknown < 20 || sim.phantomsSeen == 0 || sim.expiries < 20) {
				t.Errorf("the simulation is too tame to mean much: %d unknown, %d phantoms seen, %d expiries", sim.unknown, sim.phantomsSeen, sim.expiries)
			}
			if tt.correct && tt.owners && (sim.retries < 20 || sim.retryHits < 5) {
				t.Errorf("too few retries to mean much: %d retries, %d answered with the owner's grant", sim.retries, sim.retryHits)
			}
			if !tt.correct && !strings.Contains(strings.Join(rep.Violations, "\n"), "linearizability") {
				t.Errorf("the bug was not caught by porcupine: %v", rep.Violations)
			}
		})
	}
}

// simulation is a correct (or, with bug, a lease-shortening) lock server and
// its clients, in virtual time. Each client runs one request at a time;
// every request takes effect at one instant between its call and its
// return, and the requests are applied in the order of those instants, so
// the history is linearizable by construction.
type simulation struct {
	rng      *rand.Rand
	bug      bool // leases end at 60% of what was asked for
	stall    bool // see TestCheckSyntheticHistory
	owners   bool // see TestCheckSyntheticHistory
	shareBug bool // see TestCheckSyntheticHistory
	ownerSeq int  // owners issued so far
	keys     []string
	table    map[string]*simLock
	counter  uint64
	clients  []*simClient
	queue    simQueue
	hist     []Op

	unknown, phantomsSeen, expiries int
	retries, retryHits              int // retries sent; acquires answered with their owner's grant
}

// simLock is the server's state of a key. known is false for a phantom:
// a grant whose answer was lost.
type simLock struct {
	token    uint64
	owner    string
	expireAt time.Duration
	known    bool
}

type simClient struct {
	id    int
	held  map[string]uint64 // the grants this client knows it has
	retry *Op               // with owners: the acquire to send again, its answer having been lost or MOVED
}

// simEvent is a request waiting for its instant of effect.
type simEvent struct {
	at  time.Duration // when it takes effect
	op  Op            // Call set; the rest is filled in at that instant
	cli *simClient
}

type simQueue []*simEvent

func (q simQueue) Len() int           { return len(q) }
func (q simQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q simQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)        { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func newSimulation(seed uint64, bug bool) *simulation {
	s := &simulation{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), bug: bug, table: make(map[string]*simLock)}
	for i := range 6 {
		s.keys = append(s.keys, fmt.Sprintf("key-%d", i))
	}
	for i := range 12 {
		s.clients = append(s.clients, &simClient{id: i + 1, held: make(map[string]uint64)})
	}
	return s
}

// micros is a random duration of up to n microseconds.
func (s *simulation) micros(n int) time.Duration {
	return time.Duration(s.rng.IntN(n+1)) * time.Microsecond
}

// run simulates until n requests were made and returns the history.
func (s *simulation) run(n int) []Op {
	for _, c := range s.clients {
		s.next(c, s.micros(2000))
	}
	for made := len(s.clients); s.queue.Len() > 0; {
		e := heap.Pop(&s.queue).(*simEvent)
		ret := s.apply(e)
		if made < n {
			s.next(e.cli, ret+s.micros(1500))
			made++
		}
	}
	return s.hist
}

// next makes client c's next request, sent at call.
func (s *simulation) next(c *simClient, call time.Duration) {
	if c.retry != nil {
		// As the Go client does: the same acquire again, with its owner,
		// after a reconnect's backoff, which gives others time to see the
		// grant it may have made as a phantom.
		op := *c.retry
		call += 2*time.Millisecond + s.micros(8000)
		c.retry, op.Call = nil, call
		s.retries++
		heap.Push(&s.queue, &simEvent{at: call + s.micros(3000), op: op, cli: c})
		return
	}
	key := s.keys[s.rng.IntN(len(s.keys))]
	op := Op{Conn: c.id, Key: key, Call: call}
	r := s.rng.IntN(100)
	if tok, ok := c.held[key]; ok {
		switch {
		case r < 45:
			op.Op, op.Token = codec.OpRelease, tok
		case r < 75:
			op.Op, op.Token, op.LeaseMs = codec.OpExtend, tok, uint32(20+s.rng.IntN(60))
		default:
			op.Op = codec.OpQuery
		}
	} else {
		switch {
		case r < 60:
			op.Op, op.LeaseMs = codec.OpAcquire, uint32(20+s.rng.IntN(60))
			op.WaitMs = codec.WaitNone
			if s.rng.IntN(2) == 0 {
				op.WaitMs = int64(5 + s.rng.IntN(20))
			}
			if s.owners {
				s.ownerSeq++
				op.Owner = fmt.Sprintf("c%d-%d", c.id, s.ownerSeq)
			}
		case r < 95:
			op.Op = codec.OpQuery
		default:
			op.Op = codec.OpRelease // whoever holds
		}
	}
	heap.Push(&s.queue, &simEvent{at: call + s.micros(3000), op: op, cli: c})
}

// Fates of a simulated request.
const (
	fateAnswered   = iota
	fateMoved      // answered MOVED, without effect
	fateLostEffect // no answer (or ERR), having taken effect
	fateLostNone   // no answer (or ERR), without effect
)

// apply gives the request of e its effect at e.at, records it with its
// answer (or without one) and returns its return time.
func (s *simulation) apply(e *simEvent) time.Duration {
	now, op, c := e.at, e.op, e.cli
	lk := s.table[op.Key]
	if lk != nil && now >= lk.expireAt {
		delete(s.table, op.Key)
		lk = nil
		s.expiries++
	}
	// One request in a hundred loses its answer (half of them having taken
	// effect), one in two hundred is answered MOVED.
	fate := fateAnswered
	switch r := s.rng.IntN(200); {
	case r < 1:
		fate = fateMoved
	case r < 2:
		fate = fateLostEffect
	case r < 3:
		fate = fateLostNone
	}
	if s.owners && op.Op == codec.OpAcquire && fate == fateAnswered && s.rng.IntN(100) < 4 {
		// With owners, acquires lose more answers after taking effect,
		// so that enough retries find their owner's grant.
		fate = fateLostEffect
	}
	op.Answered = true
	op.Return = now + s.micros(3000)
	if s.stall {
		// Every 500ms, 200ms without a leader: answers wait for it to end.
		if ph := op.Return % (500 * time.Millisecond); ph < 200*time.Millisecond {
			op.Return += 200*time.Millisecond - ph
		}
	}
	switch {
	case fate == fateMoved || fate == fateLostNone:
		op.Status = codec.StatusMoved
	case op.Op == codec.OpAcquire && lk != nil && op.Owner != "" && (lk.owner == op.Owner || s.shareBug):
		// The owner's grant holds the key: its token, lease untouched.
		op.Status, op.RespToken = codec.StatusOK, lk.token
		c.held[op.Key] = lk.token
		lk.known = lk.known || fate == fateAnswered
		if lk.owner == op.Owner {
			s.retryHits++
		}
	case op.Op == codec.OpAcquire && lk == nil:
		s.counter++
		tok := s.counter*1024 + uint64(op.Key[len(op.Key)-1]-'0') // shard in the low bits, as baton does
		lease := time.Duration(op.LeaseMs) * time.Millisecond
		if s.bug {
			lease = lease * 6 / 10
		}
		// A correct server may hold the lock somewhat longer, never shorter.
		s.table[op.Key] = &simLock{token: tok, owner: op.Owner, expireAt: now + lease + s.micros(2000), known: fate == fateAnswered}
		op.Status, op.RespToken = codec.StatusOK, tok
		c.held[op.Key] = tok
	case op.Op == codec.OpAcquire:
		op.Status = codec.StatusTimeout
	case op.Op == codec.OpRelease:
		op.Status = codec.StatusNotHeld
		if lk != nil && (op.Token == 0 || op.Token == lk.token) {
			delete(s.table, op.Key)
			op.Status = codec.StatusOK
		}
		delete(c.held, op.Key)
	case op.Op == codec.OpExtend:
		op.Status = codec.StatusNotHeld
		if lk != nil && op.Token == lk.token {
			lk.expireAt = now + time.Duration(op.LeaseMs)*time.Millisecond + s.micros(2000)
			op.Status = codec.StatusOK
		} else {
			delete(c.held, op.Key)
		}
	case lk != nil: // a query
		op.Status, op.RespToken, op.RespOwner = codec.StatusHeld, lk.token, lk.owner
		op.RemainingMs = uint64((lk.expireAt - now + time.Millisecond - 1) / time.Millisecond)
		if !lk.known {
			s.phantomsSeen++
		}
	default:
		op.Status = codec.StatusFree
	}
	if fate != fateAnswered && op.Op == codec.OpAcquire && op.Owner != "" {
		c.retry = &Op{Conn: op.Conn, Op: op.Op, Key: op.Key, LeaseMs: op.LeaseMs, WaitMs: op.WaitMs, Owner: op.Owner}
	}
	if fate == fateLostEffect || fate == fateLostNone {
		// The client cannot know what became of it.
		op.Answered, op.Status, op.RespToken, op.RemainingMs, op.RespOwner = false, 0, 0, 0, ""
		if s.rng.IntN(2) == 0 {
			op.Answered, op.Status, op.Code = true, codec.StatusErr, codec.CodeUnavailable
		}
		if op.Op != codec.OpQuery {
			s.unknown++
		}
		delete(c.held, op.Key)
	}
	s.hist = append(s.hist, op)
	return op.Return
}
