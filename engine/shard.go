package engine

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/baton-dev/baton/engine/stagetrace"
	sm "github.com/baton-dev/baton/statemachine"
)

// originKind says who waits for the outcome of a proposed command.
type originKind uint8

const (
	originInternal originKind = iota // Expire, or release of an abandoned grant
	originGrant                      // a waiter's Grant
	originClient                     // a client's R or K
)

// origin pairs a proposed command with whoever waits for its outcome.
type origin struct {
	kind originKind
	op   byte // originClient: codec.OpRelease or codec.OpExtend
	// extends: an Extend of a holder's token, counted in ks.extending, or
	// for a shared grant (shared) in ks.grantOps.
	extends bool
	// shared: the command is about the shared grant token (an Expire, a
	// release for nobody, an Extend counted in ks.grantOps).
	shared bool
	trail  uint32 // originClient: answers that wait for this one (order.go); 0 for none
	ks     *keyState
	cs     *connState
	w      *waiter
	token  uint64 // originInternal: the grant the Expire or Release is for; an extends Extend's
}

// proposal is one Raft entry this node proposed and has not seen applied.
type proposal struct {
	seq     uint64
	data    []byte
	origins []origin // origins[i] belongs to command i
	fence   bool     // a fence (statemachine: The fence), which a new leader commits before it serves
	failed  bool     // its requesters were answered ERR already (outcome unknown)
	// settled: it left the in-flight list, applied or known never to apply,
	// and its requesters have had their one answer. A timeout that dragonboat
	// reports afterwards must not answer them again.
	settled bool
}

// shard is the engine's side of one Raft group: the view of its keys, the
// leader-local wait queues, the batch being built, the proposals in flight
// and the timers. Everything in it is guarded by mu, which the event loops
// (requests), the apply goroutine (Applied), the timer goroutine and the
// proposer take in turn; none of them blocks while holding it.
//
// Lock order: proposeMu, then mu, then the state machine's table lock
// (Update takes it inside mu, which it holds for the observer: Node.Locker),
// then a connState's mu, then the unsent ledger's mu.
type shard struct {
	id   uint64
	node *Node

	mu sync.Mutex
	// table is the shard's committed lock table, the state machine's
	// (statemachine.Table), read under mu: the state machine changes it
	// only with mu held (Node.Locker), and tells of each change (applied)
	// before it lets go. keys has the working state of the keys that are
	// busy; leases the deadline of every held key, by the table's slot.
	table      sm.Table
	keys       map[string]*keyState
	parked     []*keyState // idle keyStates of held keys, a ring (busy.go)
	parkedNext int         // the oldest in parked, once it is full
	leases     leases
	waits      deadlineHeap[*waiter]
	pending    sm.Batch
	origins    []origin
	inflight   []*proposal
	seq        uint64
	trailing   map[uint32][]trailingAnswer // answers held back behind an R or K in flight (order.go)
	nextTrail  uint32

	// stageRead: when the input holding pending's first command was read,
	// for the probe build's trace (engine/stagetrace); takes no room in a
	// normal build.
	stageRead stagetrace.Mark

	// applying: the apply goroutine is in applied, and the answers the
	// entry produces are held in held, to be written once it is done
	// (conn.go: heldAnswers).
	applying bool
	held     heldAnswers

	// logged: the entries applied since the last snapshot the engine
	// asked for (snapshots.go).
	logged logSince
	// sends: the snapshots this replica streams to others, by replica,
	// with when each started; the log is not compacted while one is under
	// way, nor until heldUntil after the last one ended (snapshots.go).
	sends     map[uint64]time.Time
	heldUntil time.Time
	lastSent  time.Time // when the last stream received ended

	// inflightCmds: the commands of the proposals in inflight, which with
	// those of pending is what MaxPendingCommands bounds.
	inflightCmds int

	leaderID  uint64 // as last reported by Raft; 0 when unknown
	serving   bool   // this node leads the shard and holds the fence: its fence applied, no other since
	needFence bool   // a fence must be proposed (once Raft says this node leads) before serving
	// fenceWaitUntil: while Raft names this node leader and its fence has
	// not applied, the monotonic time until which requests are held for
	// the fence (awaitingFence); 0 when none are.
	fenceWaitUntil int64
	stopping       bool // the node shuts down: serve nothing, pull nothing
	// handingOff: the node hands the shard over, because it is leaving
	// (cluster.go, transferLeadership) or a node of higher priority asked
	// (handOffAsked): commands are batched but not proposed, and
	// stopServing answers them MOVED once the new leader is known.
	handingOff bool

	lastPull time.Time // last time this node asked for the shard's leadership
	// The cluster version (version.go): the levels the shard's members
	// reported, by replica id, as their reports applied; the term in which
	// this node's own report last applied; when it last sent one.
	levels       map[uint64]uint64
	reportedTerm uint64
	lastReport   time.Time
	reads        []pendingRead // queries and watches waiting for a ReadIndex (clusters only)
	// watches: the watches of each watched key, while this node serves
	// the shard; watchDirty: those the entry being applied changed
	// (watch.go).
	watches    map[string]*watch
	watchDirty []*watch
	readKick   chan struct{} // wakes the reader

	// Bounds of the shard's queues, from the node's Limits (fields, so
	// that tests can lower them): past them, requests that would add to
	// a queue are answered ERR overloaded.
	maxPending       int // commands batched or proposed, not committed yet (MaxPendingCommands)
	maxReads         int // queries waiting for a ReadIndex (MaxPendingQueries)
	maxWaitersPerKey int // acquires waiting for one key (MaxWaitersPerKey)

	proposeMu   sync.Mutex          // orders Propose calls: see Node.proposePending
	kick        chan struct{}       // wakes the proposer
	timerKick   chan struct{}       // wakes the timer goroutine: an earlier deadline
	snapKick    chan struct{}       // wakes the snapshotter: the log took in SnapshotBytes or SnapshotEntries (snapshots.go)
	results     chan inflightResult // proposals for the watcher; never full when a proposer sends
	inFlight    atomic.Int64        // proposals sent to results whose outcome the watcher has not taken
	resultsFull atomic.Bool         // a proposer stopped at MaxProposalsInFlight: the watcher kicks it

	stats shardStats // for /metrics and /status, read without mu (metrics.go)
}

func newShard(n *Node, id uint64) *shard {
	l := n.adm.limits
	return &shard{
		id:        id,
		node:      n,
		keys:      make(map[string]*keyState),
		levels:    make(map[uint64]uint64),
		kick:      make(chan struct{}, 1),
		timerKick: make(chan struct{}, 1),
		snapKick:  make(chan struct{}, 1),
		readKick:  make(chan struct{}, 1),
		// This is where MaxProposalsInFlight is kept: a proposer proposes
		// only while fewer are in flight (resultsAreFull).
		results:          make(chan inflightResult, l.MaxProposalsInFlight),
		maxPending:       l.MaxPendingCommands,
		maxReads:         l.MaxPendingQueries,
		maxWaitersPerKey: l.MaxWaitersPerKey,
	}
}

// epoch anchors the monotonic clock used for every deadline.
var epoch = time.Now()

// monoNow is nanoseconds on the monotonic clock.
// hold returns where answers sent now are held: the entry's, while one is
// applied; nil (wake the connection's writer) otherwise. mu must be held.
func (s *shard) hold() *heldAnswers {
	if s.applying {
		return &s.held
	}
	return nil
}

func monoNow() int64 { return int64(time.Since(epoch)) }

func msToNanos(ms uint32) int64 { return int64(ms) * int64(time.Millisecond) }

// holderToken is the token of ks's committed holder, 0 when the key is
// free. While an entry's Applied runs, the table is already at the entry's
// end: a row that a later command of the entry frees reads as free.
func (s *shard) holderToken(ks *keyState) uint64 {
	if ks.slot == noSlot || !s.table.Held(uint32(ks.slot)) {
		return 0
	}
	return s.table.Token(uint32(ks.slot))
}

// bytesOf views a key string as bytes without copying, for formatting only.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
