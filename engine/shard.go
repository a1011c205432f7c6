package engine

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/baton-dev/baton/codec"
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
	// extends: an Extend of the holder's token, counted in ks.extending.
	extends bool
	trail   uint32 // originClient: answers that wait for this one (order.go); 0 for none
	ks      *keyState
	cs      *connState
	w       *waiter
	token   uint64 // originInternal: the grant the Expire or Release is for
}

// proposal is one Raft entry this node proposed and has not seen applied.
type proposal struct {
	seq     uint64
	data    []byte
	origins []origin // origins[i] belongs to command i
	barrier bool     // the empty entry a new leader commits before serving
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
// Lock order: proposeMu, then mu, then a connState's mu.
type shard struct {
	id   uint64
	node *Node

	mu        sync.Mutex
	keys      map[string]*keyState
	owners    map[string]string // key -> owner of its committed grant, for grants with one (owners.go)
	leases    deadlineHeap[*keyState]
	waits     deadlineHeap[*waiter]
	pending   sm.Batch
	origins   []origin
	inflight  []*proposal
	seq       uint64
	trailing  map[uint32][]trailingAnswer // answers held back behind an R or K in flight (order.go)
	nextTrail uint32

	leaderID    uint64 // as last reported by Raft; 0 when unknown
	serving     bool   // this node leads the shard and its barrier has applied
	needBarrier bool   // a barrier must be proposed before serving
	stopping    bool   // the node shuts down: serve nothing, pull nothing

	lastPull time.Time     // last time this node asked for the shard's leadership
	reads    []pendingRead // queries waiting for a ReadIndex (clusters only)
	readKick chan struct{} // wakes the reader

	// Bounds that keep a commit stall from taking the server's memory:
	// past them, requests that would add to the batch or the read queue
	// are answered ERR overloaded (fields, so that tests can lower them).
	maxPending int // commands in the batch waiting to be proposed
	maxReads   int // queries waiting for a ReadIndex

	proposeMu   sync.Mutex          // orders Propose calls: see Node.proposePending
	kick        chan struct{}       // wakes the proposer
	timerKick   chan struct{}       // wakes the timer goroutine: an earlier deadline
	results     chan inflightResult // proposals for the watcher; never full when a proposer sends
	resultsFull atomic.Bool         // a proposer stopped at a full results queue: the watcher kicks it
}

// Default bounds of a shard's batch and read queue. A full batch means that
// maxProposalsInFlight proposals are waiting for a commit already.
const (
	maxPendingCommands = 1 << 16
	maxPendingReads    = 1 << 16
)

func newShard(n *Node, id uint64) *shard {
	return &shard{
		id:         id,
		node:       n,
		keys:       make(map[string]*keyState),
		owners:     make(map[string]string),
		kick:       make(chan struct{}, 1),
		timerKick:  make(chan struct{}, 1),
		readKick:   make(chan struct{}, 1),
		results:    make(chan inflightResult, maxProposalsInFlight),
		maxPending: maxPendingCommands,
		maxReads:   maxPendingReads,
	}
}

// epoch anchors the monotonic clock used for every deadline.
var epoch = time.Now()

// monoNow is nanoseconds on the monotonic clock.
func monoNow() int64 { return int64(time.Since(epoch)) }

func msToNanos(ms uint32) int64 { return int64(ms) * int64(time.Millisecond) }

// bytesOf views a key string as bytes without copying, for formatting only.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// ---- requests (called on event loops) ----

// handle serves one parsed request. It returns true when it queued commands
// for the proposer.
func (s *shard) handle(cs *connState, r *codec.Request, now int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		if r.Op == codec.OpAcquire {
			if ks := s.keys[string(r.Key)]; ks != nil && ks.hasLiveWaiter(cs) {
				// An earlier acquire of the key on this connection is still
				// unanswered (its Grant may be in flight): this answer must
				// not overtake it, or the client would pair them wrongly.
				s.deferAnswer(cs, ks, errNotServing)
				return false
			}
		}
		switch {
		case r.Op == codec.OpRelease || r.Op == codec.OpExtend:
			s.answerNow(cs, r.Op, r.Key, s.keys[string(r.Key)], "", "")
		case r.Op == codec.OpQuery && s.node.clustered():
			s.queueRead(cs, r.Key) // behind any earlier Q waiting for a ReadIndex (reads.go)
		default:
			s.answerNotServing(cs, r.Op, r.Key)
		}
		return false
	}
	before := s.pending.Len()
	switch r.Op {
	case codec.OpAcquire:
		s.acquire(cs, r, now)
	case codec.OpRelease, codec.OpExtend:
		if s.batchFull() {
			s.answerNow(cs, r.Op, r.Key, s.keys[string(r.Key)], codec.CodeOverloaded, tooManyCommands)
			break
		}
		s.releaseOrExtend(cs, r)
	case codec.OpQuery:
		if !s.node.clustered() {
			// One member: its applied view holds everything acknowledged.
			s.query(cs, r.Key, now)
			break
		}
		s.queueRead(cs, r.Key)
	}
	return s.pending.Len() > before
}

// badRequest answers a malformed request whose op and key could be read.
// A malformed A waits behind an earlier unanswered A of the same key on the
// same connection, so that answers to one (op, key) keep their order.
func (s *shard) badRequest(cs *connState, r *codec.Request, perr *codec.ParseError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Op == codec.OpAcquire {
		if ks := s.keys[string(r.Key)]; ks != nil && ks.hasLiveWaiter(cs) {
			s.deferAnswer(cs, ks, perr)
			return
		}
	}
	cs.sendParseError(r, perr)
}

func (s *shard) acquire(cs *connState, r *codec.Request, now int64) {
	ks := s.keys[string(r.Key)]
	if ks == nil {
		ks = s.addKey(string(r.Key))
	}
	retry := s.isRetry(ks, r.Owner)
	if r.WaitMs == codec.WaitNone && !retry && (ks.token != 0 || ks.granting != nil) {
		if ks.hasLiveWaiter(cs) {
			s.deferAnswer(cs, ks, nil)
		} else {
			send(cs, codec.OpAcquire, r.Key, codec.StatusTimeout)
		}
		s.forgetIfIdle(ks)
		return
	}
	if (retry || ks.token == 0 && ks.granting == nil && ks.firstQueued() == nil) && s.batchFull() {
		// It would be granted at once, by a command the batch has no room
		// for. (An acquire that queues adds no command, and a connection's
		// earlier acquire of the key means it queues: the order of
		// answers to one (op, key) is kept.)
		sendError(cs, codec.OpAcquire, r.Key, codec.CodeOverloaded, tooManyCommands)
		s.forgetIfIdle(ks)
		return
	}
	w := &waiter{cs: cs, ks: ks, leaseMs: r.LeaseMs, tryLock: r.WaitMs == codec.WaitNone, state: waitQueued, waitIdx: notInHeap}
	if len(r.Owner) > 0 {
		w.owner = string(r.Owner)
	}
	switch cs.addWaiter(w) {
	case connClosed:
		s.forgetIfIdle(ks)
		return
	case connFull:
		sendError(cs, codec.OpAcquire, r.Key, codec.CodeOverloaded, tooManyWaiters)
		s.forgetIfIdle(ks)
		return
	}
	ks.enqueue(w)
	if r.WaitMs > 0 {
		w.waitUntil = now + r.WaitMs*int64(time.Millisecond)
		s.waits.set(w)
		s.timerMayBeEarlier(w.waitUntil)
	}
	if retry {
		// The holder's owner asks again: its Grant answers it, not the
		// queue (owners.go).
		s.regrant(ks, w)
		return
	}
	s.grantHead(ks)
}

// deferAnswer queues a decided answer (TIMEOUT when err is nil) behind the
// connection's earlier acquire of the same key.
func (s *shard) deferAnswer(cs *connState, ks *keyState, err error) {
	w := &waiter{cs: cs, ks: ks, state: waitDeferred, deferred: deferredAnswer{err: err}, waitIdx: notInHeap}
	switch cs.addWaiter(w) {
	case connClosed:
		return
	case connFull:
		// Order gives way to the limit: answer now rather than keep more.
		sendError(cs, codec.OpAcquire, bytesOf(ks.key), codec.CodeOverloaded, tooManyWaiters)
		return
	}
	ks.enqueue(w)
}

func (s *shard) releaseOrExtend(cs *connState, r *codec.Request) {
	ks := s.keys[string(r.Key)]
	if ks == nil {
		// Nothing holds the key and nothing is in flight for it, so the
		// answer is certain without a round through Raft.
		send(cs, r.Op, r.Key, codec.StatusNotHeld)
		return
	}
	o := origin{kind: originClient, op: r.Op, ks: ks, cs: cs}
	if r.Op == codec.OpRelease {
		s.propose(sm.Command{Op: sm.OpRelease, Key: r.Key, Token: r.Token}, o)
		s.handOff(ks)
		return
	}
	if r.Token == ks.token && ks.token != 0 {
		o.extends = true
		ks.extending++
	}
	s.propose(sm.Command{Op: sm.OpExtend, Key: r.Key, Token: r.Token, LeaseMs: r.LeaseMs}, o)
}

func (s *shard) query(cs *connState, key []byte, now int64) {
	ks := s.keys[string(key)]
	if ks == nil || ks.token == 0 {
		send(cs, codec.OpQuery, key, codec.StatusFree)
		return
	}
	remaining := ks.deadline - now
	if remaining < 0 {
		remaining = 0
	}
	cs.send(&codec.Response{
		Op: codec.OpQuery, Key: key, Status: codec.StatusHeld, Token: ks.token,
		RemainingMs: uint64((remaining + int64(time.Millisecond) - 1) / int64(time.Millisecond)),
		Owner:       bytesOf(s.ownerOf(ks)),
	})
}

// answerNotServing answers a request this node cannot serve now: MOVED to
// the leader when another node is known to lead, else ERR unavailable.
func (s *shard) answerNotServing(cs *connState, op byte, key []byte) {
	if s.leaderID != s.node.cfg.ID {
		if addr := s.node.clientAddrOf(s.leaderID); addr != "" {
			cs.send(&codec.Response{Op: op, Key: key, Status: codec.StatusMoved, Addr: bytesOf(addr)})
			return
		}
	}
	sendError(cs, op, key, codec.CodeUnavailable, "leadership is changing or unknown, retry")
}

// Texts of ERR overloaded.
var (
	tooManyWaiters  = "too many unanswered acquires on this connection (" + strconv.Itoa(maxWaitersPerConn) + ")"
	tooManyCommands = "commits are stalled and too many commands wait to be proposed, retry later"
	tooManyReads    = "too many queries wait for the leader to confirm its leadership, retry later"
)

// batchFull reports whether the batch has no room for a client's command.
func (s *shard) batchFull() bool { return s.pending.Len() >= s.maxPending }

func send(cs *connState, op byte, key []byte, st codec.Status) {
	cs.send(&codec.Response{Op: op, Key: key, Status: st})
}

func sendError(cs *connState, op byte, key []byte, code, text string) {
	cs.send(&codec.Response{Op: op, Key: key, Status: codec.StatusErr, Code: bytesOf(code), Text: bytesOf(text)})
}

// ---- building batches ----

func (s *shard) addKey(key string) *keyState {
	ks := &keyState{key: key, leaseIdx: notInHeap}
	s.keys[key] = ks
	return ks
}

func (s *shard) forgetIfIdle(ks *keyState) {
	if ks.idle() && s.keys[ks.key] == ks {
		delete(s.keys, ks.key)
	}
}

// propose appends one command to the batch being built.
func (s *shard) propose(c sm.Command, o origin) {
	s.pending.Append(c)
	s.origins = append(s.origins, o)
	o.ks.inflight++
}

// grantHead proposes a Grant for the next waiter if the key is free and no
// Grant is in flight.
func (s *shard) grantHead(ks *keyState) {
	if s.serving && ks.token == 0 {
		s.handOff(ks)
	}
}

// handOff puts the next waiter's Grant in the same batch as a command that
// may free the key, so that a hand-off costs one commit. If the key turns
// out not to be freed, the Grant is rejected and the waiter keeps its place.
func (s *shard) handOff(ks *keyState) {
	if ks.granting != nil {
		return
	}
	if w := ks.firstQueued(); w != nil {
		s.proposeGrant(ks, w)
	}
}

func (s *shard) proposeGrant(ks *keyState, w *waiter) {
	w.state = waitGranting
	ks.granting = w
	s.propose(sm.Command{Op: sm.OpGrant, Key: bytesOf(ks.key), LeaseMs: w.leaseMs, Owner: bytesOf(w.owner)}, origin{kind: originGrant, ks: ks, w: w})
}

// takeProposal seals what is pending into a proposal and records it as in
// flight; nil when there is nothing to propose.
func (s *shard) takeProposal() *proposal {
	var p *proposal
	switch {
	case s.needBarrier:
		s.needBarrier = false
		var empty sm.Batch
		s.seq++
		p = &proposal{seq: s.seq, barrier: true, data: empty.Seal(sm.Header{Proposer: s.node.proposerID, Seq: s.seq})}
	case s.pending.Len() > 0:
		s.seq++
		p = &proposal{seq: s.seq, origins: s.origins, data: s.pending.Seal(sm.Header{Proposer: s.node.proposerID, Seq: s.seq})}
		// dragonboat keeps the entry's bytes, so the next batch gets
		// fresh memory instead of reusing this one.
		s.pending = sm.Batch{}
		s.origins = make([]origin, 0, len(p.origins))
	default:
		return nil
	}
	s.inflight = append(s.inflight, p)
	return p
}

// ---- outcomes (called by the state machine on every replica) ----

// applied processes one applied entry in log order.
func (s *shard) applied(h sm.Header, cmds []sm.Command, results []sm.Result) {
	now := monoNow()
	s.mu.Lock()
	defer s.mu.Unlock()
	var p *proposal
	if h.Proposer == s.node.proposerID {
		p = s.match(h.Seq)
	}
	if p != nil && p.barrier {
		s.startServing(now)
	}
	for i := range cmds {
		var o *origin
		if p != nil && i < len(p.origins) {
			o = &p.origins[i]
		}
		s.applyOne(&cmds[i], results[i], o, p != nil && p.failed, now)
	}
	s.kickIfPending()
}

// match finds the in-flight proposal with seq. Proposals of this node apply
// in the order they were proposed, so any older one still in flight will
// never apply: it is resolved as dropped.
func (s *shard) match(seq uint64) *proposal {
	for len(s.inflight) > 0 && s.inflight[0].seq < seq {
		s.resolveDropped(s.popInflight())
	}
	if len(s.inflight) > 0 && s.inflight[0].seq == seq {
		return s.popInflight()
	}
	return nil
}

// popInflight takes the oldest proposal off the in-flight list.
func (s *shard) popInflight() *proposal {
	p := s.inflight[0]
	s.inflight[0] = nil
	s.inflight = s.inflight[1:]
	p.settled = true
	return p
}

func (s *shard) applyOne(c *sm.Command, res sm.Result, o *origin, failed bool, now int64) {
	var ks *keyState
	if o != nil {
		ks = o.ks
		s.settle(o)
	} else {
		ks = s.keys[string(c.Key)]
	}
	// The committed view, kept on every replica.
	switch res.Code {
	case sm.Granted:
		if ks == nil {
			ks = s.addKey(string(c.Key))
		}
		ks.token, ks.leaseMs, ks.expiring = res.Token, c.LeaseMs, false
		s.setOwner(ks, c.Owner)
		s.setDeadline(ks, now)
	case sm.Released, sm.Expired:
		if ks != nil {
			ks.token, ks.deadline, ks.expiring = 0, 0, false
			s.leases.clear(ks)
			s.clearOwner(ks)
		}
	case sm.Extended:
		if ks != nil {
			ks.leaseMs = c.LeaseMs
			s.setDeadline(ks, now)
		}
	}
	if ks == nil {
		return
	}
	if o != nil {
		s.answer(o, c, res, failed, now)
	}
	s.grantHead(ks)
	s.forgetIfIdle(ks)
}

// settle ends the bookkeeping of one of this node's commands for its key:
// it applied, will never apply, or was never proposed.
func (s *shard) settle(o *origin) {
	ks := o.ks
	ks.inflight--
	if !o.extends {
		return
	}
	ks.extending--
	if ks.extending == 0 && s.serving && ks.token != 0 && !ks.expiring && ks.leaseIdx == notInHeap {
		// A lease that ran out under the Extend is looked at again (an
		// Extend that applied sets a fresh deadline right after).
		s.leases.set(ks)
		s.timerMayBeEarlier(ks.deadline)
	}
}

// answer tells the requester of one of this node's commands its outcome.
func (s *shard) answer(o *origin, c *sm.Command, res sm.Result, failed bool, now int64) {
	ks := o.ks
	switch o.kind {
	case originInternal:
		if c.Op == sm.OpExpire && res.Code != sm.Expired {
			s.expireFailed(ks)
		}
	case originClient:
		if failed {
			return
		}
		st := codec.StatusNotHeld
		if res.Code == sm.Released || res.Code == sm.Extended {
			st = codec.StatusOK
		}
		send(o.cs, o.op, c.Key, st)
		s.answeredClient(o)
	case originGrant:
		w := o.w
		if w.state == waitRegranting {
			s.regranted(w, res, failed, now)
			return
		}
		if ks.granting == w {
			ks.granting = nil
		}
		switch {
		case res.Code == sm.Granted, res.Code == sm.Regranted:
			s.granted(w, res.Token, res.Code == sm.Granted, failed, now)
		case w.abandoned || failed:
			s.handPlace(w)
			s.finish(w)
		case w.tryLock:
			send(w.cs, codec.OpAcquire, c.Key, codec.StatusTimeout)
			s.finish(w)
		default:
			w.state = waitQueued // keeps its place; the key was not free after all
		}
	}
}

// granted answers the acquire a grant landed for, and every other waiting
// acquire of its owner. A new grant (fresh: not the owner's own grant found
// again) that nobody waits for any more is given back at once.
func (s *shard) granted(w *waiter, token uint64, fresh, failed bool, now int64) {
	ks := w.ks
	live := !failed && !w.abandoned && !w.cs.peerGone(now)
	if live {
		w.cs.send(&codec.Response{Op: codec.OpAcquire, Key: bytesOf(ks.key), Status: codec.StatusOK, Token: token})
	}
	s.finish(w)
	if !s.grantSameOwner(ks, w.owner, token) && !live && fresh {
		s.propose(sm.Command{Op: sm.OpRelease, Key: bytesOf(ks.key), Token: token}, origin{kind: originInternal, ks: ks, token: token})
		s.handOff(ks)
	}
}

// finish takes an answered waiter out of the queue, then releases answers
// that were deferred behind it on the same connection.
func (s *shard) finish(w *waiter) {
	ks := w.ks
	if ks.deferred > 0 {
		for z := w.next; z != nil; {
			next := z.next
			if z.cs == w.cs {
				if z.state != waitDeferred {
					break
				}
				s.sendDeferred(z)
				ks.unlink(z)
				z.state = waitDone
				z.cs.removeWaiter(z)
			}
			z = next
		}
	}
	ks.unlink(w)
	w.state = waitDone
	w.cs.removeWaiter(w)
	s.waits.clear(w)
}

// errNotServing is the deferred answer of an acquire that leadership
// moved away from: MOVED, or ERR unavailable, decided when it is sent.
var errNotServing = errors.New("not serving")

func (s *shard) sendDeferred(z *waiter) {
	key := bytesOf(z.ks.key)
	if z.deferred.err == errNotServing {
		s.answerNotServing(z.cs, codec.OpAcquire, key)
		return
	}
	if z.deferred.token != 0 {
		z.cs.send(&codec.Response{Op: codec.OpAcquire, Key: key, Status: codec.StatusOK, Token: z.deferred.token})
		return
	}
	var perr *codec.ParseError
	if errors.As(z.deferred.err, &perr) {
		z.cs.sendParseError(&codec.Request{Op: codec.OpAcquire, Key: key}, perr)
		return
	}
	send(z.cs, codec.OpAcquire, key, codec.StatusTimeout)
}

// setDeadline starts the holder's lease afresh from now.
//
// Only the serving leader arms the lease timer: a follower's deadlines are
// restarted by startServing when it takes over, so keeping a heap of them
// would cost every follower a heap update per command for nothing. A key
// still armed from an earlier term is moved, to keep the heap ordered.
func (s *shard) setDeadline(ks *keyState, now int64) {
	ks.deadline = now + msToNanos(ks.leaseMs)
	plantedDeadline(ks, now) // the chaos run's planted bug; a no-op without -tags chaosmutation
	if s.serving || ks.leaseIdx != notInHeap {
		s.leases.set(ks)
		s.timerMayBeEarlier(ks.deadline)
	}
}

// expireFailed re-arms a held key's lease after an Expire of ours did not
// apply, so that the lease is looked at again.
func (s *shard) expireFailed(ks *keyState) {
	ks.expiring = false
	if ks.token != 0 {
		s.leases.set(ks)
		s.timerMayBeEarlier(ks.deadline)
	}
}

// ---- proposals that did not apply ----

// dropRetry is the soonest an Expire, or the release of an abandoned grant,
// is tried again after Raft dropped it (as it does during a leadership
// transfer), so that a shard that keeps dropping does not spin.
const dropRetry = 50 * time.Millisecond

// resolveDropped handles a proposal that is known never to apply. Its
// requesters are answered (a waiter loses its place: Raft drops proposals
// while leadership moves, and the client retries where MOVED sends it);
// internal commands are retried by the lease timer, expiring the grant
// they were for: after dropRetry at the soonest, and never before the end
// of the lease as it stands now. The lease may have been renewed since the
// command was proposed (an Extend, or a new leader starting every lease
// afresh), and ending it early would take the lock from a holder that was
// told it has it. (A dropped release of an abandoned grant so waits for
// the lease: its owner's retry may have been given the grant back since.)
func (s *shard) resolveDropped(p *proposal) {
	now := monoNow()
	for i := range p.origins {
		o := &p.origins[i]
		ks := o.ks
		s.settle(o)
		switch o.kind {
		case originInternal:
			ks.expiring = false
			if ks.token == o.token {
				ks.deadline = max(ks.deadline, now+int64(dropRetry))
				s.leases.set(ks)
				s.timerMayBeEarlier(ks.deadline)
			}
		case originClient:
			if !p.failed {
				s.answerNotServing(o.cs, o.op, bytesOf(ks.key))
				s.answeredClient(o)
			}
		case originGrant:
			if ks.granting == o.w {
				ks.granting = nil
			}
			if !p.failed && !o.w.abandoned {
				s.answerNotServing(o.w.cs, codec.OpAcquire, bytesOf(ks.key))
			}
			s.finish(o.w)
		}
		s.grantHead(ks)
		s.forgetIfIdle(ks)
	}
}

// failProposal answers the requesters of a proposal whose outcome is not
// known (its wait timed out): they get ERR unavailable and, should the entry
// still apply later, its grants are released at once.
func (s *shard) failProposal(p *proposal, code, text string) {
	if p.failed {
		return
	}
	p.failed = true
	for i := range p.origins {
		o := &p.origins[i]
		switch o.kind {
		case originClient:
			sendError(o.cs, o.op, bytesOf(o.ks.key), code, text)
			s.answeredClient(o)
		case originGrant:
			if !o.w.abandoned { // an abandoned waiter was answered already, or is gone
				sendError(o.w.cs, codec.OpAcquire, bytesOf(o.ks.key), code, text)
			}
			o.w.abandoned = true
			// Answers deferred behind it on its connection go out now, in
			// order; the waiter stays the key's granting one until the
			// outcome is known.
			s.finish(o.w)
		}
	}
}

// removeInflight drops p from the in-flight list; false if it is not there.
func (s *shard) removeInflight(p *proposal) bool {
	if p.settled {
		return false
	}
	for i, q := range s.inflight {
		if q == p {
			copy(s.inflight[i:], s.inflight[i+1:])
			s.inflight[len(s.inflight)-1] = nil
			s.inflight = s.inflight[:len(s.inflight)-1]
			p.settled = true
			return true
		}
	}
	return false
}

// proposalTimedOut handles a proposal dragonboat gave up waiting for. It may
// still commit: its requesters are answered now, unless match or a drop
// answered them already (a leader paused past the timeout learns of the new
// term first), and a barrier is proposed whose applying settles whether
// this one did (see match).
func (s *shard) proposalTimedOut(p *proposal) {
	if p.settled {
		return
	}
	s.failProposal(p, codec.CodeUnavailable, "not committed in time, retry")
	s.needBarrier = true
	s.kickIfPending()
}

// proposalDropped handles a proposal dragonboat reports dropped, rejected,
// aborted or terminated: it will not apply.
func (s *shard) proposalDropped(p *proposal) {
	if s.removeInflight(p) {
		s.resolveDropped(p)
	}
}

// ---- timers ----

// timerMayBeEarlier wakes the timer goroutine if when may come before the
// deadline it sleeps towards.
func (s *shard) timerMayBeEarlier(when int64) {
	if next, _ := nextDeadline(s.leases, s.waits); when > next {
		return
	}
	select {
	case s.timerKick <- struct{}{}:
	default:
	}
}

// fireTimers acts on every deadline due by now and returns the next one.
func (s *shard) fireTimers(now int64) (next int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ks, ok := s.leases.popDue(now); ok; ks, ok = s.leases.popDue(now) {
		s.leaseDue(ks, now)
	}
	for w, ok := s.waits.popDue(now); ok; w, ok = s.waits.popDue(now) {
		s.waitDue(w)
	}
	s.kickIfPending()
	return nextDeadline(s.leases, s.waits)
}

// leaseDue proposes Expire for a lease that ran out, with the next waiter's
// Grant in the same batch. Only the serving leader acts: a lease armed
// before leadership moved away is dropped here, and re-armed by
// startServing if leadership comes back.
//
// A holder's Extend in flight holds the Expire back: proposed behind it, the
// Expire would apply after the Extend was answered OK, and end the lease it
// had just renewed. settle re-arms the lease once no Extend is left.
func (s *shard) leaseDue(ks *keyState, now int64) {
	if !s.serving || ks.token == 0 || ks.expiring || ks.extending > 0 {
		return // startServing re-arms every lease; an Expire or settle the rest
	}
	ks.expiring = true
	s.propose(sm.Command{Op: sm.OpExpire, Key: bytesOf(ks.key), Token: ks.token}, origin{kind: originInternal, ks: ks, token: ks.token})
	s.handOff(ks)
}

// waitDue answers TIMEOUT to a waiter whose wait_ms ran out.
func (s *shard) waitDue(w *waiter) {
	ks := w.ks
	switch w.state {
	case waitQueued:
		if s.hasEarlierLive(w) {
			w.state = waitDeferred
			w.deferred = deferredAnswer{}
			ks.deferred++
			return
		}
		send(w.cs, codec.OpAcquire, bytesOf(ks.key), codec.StatusTimeout)
		s.handPlace(w)
		s.finish(w)
		s.forgetIfIdle(ks)
	case waitGranting, waitRegranting:
		// The Grant is in flight: answer now; a new grant that lands is
		// released (or kept for another acquire of the owner).
		w.abandoned = true
		send(w.cs, codec.OpAcquire, bytesOf(ks.key), codec.StatusTimeout)
		s.handPlace(w)
		s.finish(w)
	}
}

// abandon forgets an acquire whose connection closed. A Grant already in
// flight for it is released when it lands (see answer).
func (s *shard) abandon(w *waiter) {
	ks := w.ks
	switch w.state {
	case waitQueued, waitDeferred:
		s.handPlace(w)
		ks.unlink(w)
		w.state = waitDone
	case waitGranting, waitRegranting:
		w.abandoned = true
		s.handPlace(w)
		ks.unlink(w)
	}
	s.waits.clear(w)
	s.forgetIfIdle(ks)
}

// hasEarlierLive reports whether w's connection has an unanswered acquire of
// the same key ahead of w.
func (s *shard) hasEarlierLive(w *waiter) bool {
	for z := w.ks.head; z != nil && z != w; z = z.next {
		if z.cs == w.cs && z.live() {
			return true
		}
	}
	return false
}

// ---- leadership ----

// leaderUpdated follows Raft's view of who leads the shard.
func (s *shard) leaderUpdated(leaderID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaderID = leaderID
	if leaderID == s.node.cfg.ID {
		if !s.serving && !s.stopping {
			// Serve only once an entry of our own term has applied: by then
			// every earlier committed entry is in our view.
			s.needBarrier = true
			s.kickIfPending()
		}
		return
	}
	if leaderID == 0 && !s.stopping {
		// Nobody leads for a moment (an election, a transfer): stop
		// serving, but keep the waiters parked. They are answered MOVED
		// once the new leader is known, or served again if it is us.
		s.serving = false
		s.dropPending()
		return
	}
	s.stopServing()
}

// startServing runs when this node's barrier applies.
func (s *shard) startServing(now int64) {
	if s.serving || s.stopping || s.leaderID != s.node.cfg.ID {
		return
	}
	s.serving = true
	// Holders could not extend while no leader existed, so the new leader
	// does not charge them for that time: every lease starts afresh.
	// Waiters parked while nobody led are served again.
	for _, ks := range s.keys {
		if ks.token != 0 {
			s.setDeadline(ks, now)
		}
		s.regrantParked(ks)
		s.grantHead(ks)
	}
	s.kickIfPending()
}

// stopServing answers every waiter and every command not yet proposed:
// MOVED to the new leader, or ERR unavailable.
func (s *shard) stopServing() {
	s.serving = false
	s.dropPending()
	var queue []*waiter
	for _, ks := range s.keys {
		// A snapshot of the queue: answering a waiter releases the answers
		// deferred behind it, which leave the queue under the loop.
		queue = queue[:0]
		for w := ks.head; w != nil; w = w.next {
			queue = append(queue, w)
		}
		for _, w := range queue {
			if !w.inQueue {
				continue
			}
			// Waiters ahead of w were answered already, so an earlier live
			// acquire of its connection is one whose Grant is in flight:
			// w's answer must not overtake that one's, which comes when
			// the Grant applies or is dropped (then finish sends w's).
			earlier := s.hasEarlierLive(w)
			switch {
			case w.state == waitQueued && earlier:
				w.state, w.deferred = waitDeferred, deferredAnswer{err: errNotServing}
				ks.deferred++
				s.waits.clear(w)
			case w.state == waitQueued:
				s.answerNotServing(w.cs, codec.OpAcquire, bytesOf(ks.key))
				s.finish(w)
			case w.state == waitDeferred && !earlier:
				s.sendDeferred(w)
				ks.unlink(w)
				w.state = waitDone
				w.cs.removeWaiter(w)
			}
		}
		s.forgetIfIdle(ks)
	}
}

// dropPending answers the requesters of commands that were batched but not
// proposed; a waiter whose Grant was among them goes back to the queue.
func (s *shard) dropPending() {
	for i := range s.origins {
		o := &s.origins[i]
		s.settle(o)
		switch o.kind {
		case originClient:
			s.answerNotServing(o.cs, o.op, bytesOf(o.ks.key))
			s.answeredClient(o)
		case originGrant:
			if o.ks.granting == o.w {
				o.ks.granting = nil
			}
			o.w.state = waitQueued
		case originInternal:
			o.ks.expiring = false
		}
	}
	s.pending.Reset()
	s.origins = s.origins[:0]
	for _, ks := range s.keys {
		s.forgetIfIdle(ks)
	}
}

// reset replaces the committed view of the shard with the table as loaded
// (a snapshot recovery, or the start). Everything else keeps pointing at
// the keyStates it knows: proposals in flight, batched origins, waiters and
// their timers. So the keyStates are updated in place rather than replaced,
// and each leaves the lease heap through clear, which keeps the heap's
// indexes true; a key the new table does not hold just becomes free.
func (s *shard) reset(each func(func(sm.Lock))) {
	now := monoNow()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ks := range s.keys {
		ks.token, ks.leaseMs, ks.deadline, ks.expiring = 0, 0, 0, false
		s.leases.clear(ks)
	}
	clear(s.owners)
	held := 0
	each(func(l sm.Lock) {
		ks := s.keys[string(l.Key)]
		if ks == nil {
			ks = s.addKey(string(l.Key))
		}
		ks.token, ks.leaseMs = l.Token, l.LeaseMs
		s.setOwner(ks, l.Owner)
		s.setDeadline(ks, now)
		held++
	})
	// Once per shard at start, and once per snapshot recovery: rare.
	s.node.log.Info("shard table loaded", "shard", s.id, "locks", held)
	for _, ks := range s.keys {
		s.grantHead(ks)
		s.forgetIfIdle(ks)
	}
	s.kickIfPending()
}

// ---- goroutines ----

func (s *shard) kickIfPending() {
	if s.pending.Len() > 0 || s.needBarrier {
		s.kickProposer()
	}
}

func (s *shard) kickProposer() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// runTimers sleeps until the earliest deadline and fires what is due.
func (s *shard) runTimers(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next, ok := s.fireTimers(monoNow())
		wait := time.Hour
		if ok {
			wait = time.Duration(next - monoNow())
		}
		t.Reset(wait)
		select {
		case <-stop:
			return
		case <-t.C:
		case <-s.timerKick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}
