package engine

import (
	"errors"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"

	"github.com/baton-dev/baton/codec"
	"github.com/baton-dev/baton/engine/stagetrace"
)

// The proposer turns a shard's pending batch into Raft entries, and the
// watcher collects what dragonboat says of each entry that did not apply.
// Neither may hold up an event loop: event loops only try to propose (a
// busy proposer takes their batch along), and a proposal is only made when
// the watcher's queue has room for it, so nothing on an event loop's path
// ever waits for a commit.

const (
	// proposeTimeout bounds how long a proposal may stay uncommitted before
	// its requesters are answered ERR unavailable.
	proposeTimeout = 5 * time.Second
	// proposeRetry is the pause after dragonboat refused a proposal.
	proposeRetry = 10 * time.Millisecond
)

// Limits.MaxProposalsInFlight bounds the proposals of a shard that
// dragonboat holds and the watcher has not seen settle (shard.inFlight; the
// results queue has room for them all). While it is reached (commits
// stall), new commands wait in the pending batch, and past
// MaxPendingCommands (batched and proposed) they are answered ERR overloaded
// (batchFull).

// inflightResult is a proposal handed to dragonboat, whose outcome the
// watcher collects.
type inflightResult struct {
	p  *proposal
	rs *dragonboat.RequestState
}

// proposer is the part of dragonboat's NodeHost that proposes: an interface
// so that the shard's batching can be tested without Raft.
type proposer interface {
	Propose(session *client.Session, cmd []byte, timeout time.Duration) (*dragonboat.RequestState, error)
}

// runProposer proposes the shard's pending batch whenever it is kicked (by
// the apply, timer and watcher paths, and by event loops that found it
// busy).
func (n *Node) runProposer(s *shard) {
	for {
		select {
		case <-n.stopC:
			return
		case <-s.kick:
		}
		n.proposePending(s)
	}
}

// proposeFromLoop is proposePending for an event loop at the end of a
// drain, which saves a goroutine hop per commit. If another goroutine is
// proposing for the shard, the loop does not wait for it: the proposer is
// kicked and takes the batch along.
func (n *Node) proposeFromLoop(s *shard) {
	if !s.proposeMu.TryLock() {
		s.kickProposer()
		return
	}
	n.proposeLocked(s)
	s.proposeMu.Unlock()
}

// proposePending turns what is pending in s into proposals, one Raft entry
// each, until nothing is left or the watcher's queue is full. proposeMu
// keeps proposals in the order of their sequence numbers, which is how
// applied entries are matched to them.
func (n *Node) proposePending(s *shard) {
	s.proposeMu.Lock()
	defer s.proposeMu.Unlock()
	n.proposeLocked(s)
}

// proposeLocked is proposePending with proposeMu held.
func (n *Node) proposeLocked(s *shard) {
	session := n.sessions[s.id-1]
	for {
		// Only proposers send to results, and only under proposeMu, so a
		// free slot now is still free at the send below.
		if s.resultsAreFull() {
			n.adm.hits.hit(limitProposalsInFlight)
			return // the watcher kicks us when a slot frees
		}
		s.mu.Lock()
		p := s.takeProposal()
		var read int64
		if stagetrace.On {
			read = s.stageRead.Take()
		}
		s.mu.Unlock()
		if p == nil {
			return
		}
		if stagetrace.On && !p.fence {
			stagetrace.Proposed(s.id, n.proposerID, p.seq, read, stagetrace.Now())
		}
		n.metrics.proposed(len(p.origins))
		rs, err := n.raft.Propose(session, p.data, proposeTimeout)
		if err != nil {
			n.metrics.failedProposals.Inc()
			s.mu.Lock()
			if s.removeInflight(p) {
				code := codec.CodeUnavailable
				if errors.Is(err, dragonboat.ErrSystemBusy) {
					code = codec.CodeOverloaded
				}
				s.failProposal(p, code, err.Error())
				s.resolveDropped(p)
			}
			// A shard that is not ready, or a full queue, says no again at
			// once: leave the rest to the proposer after a pause, keeping a
			// fence for its next try.
			s.needFence = s.needFence || p.fence
			s.mu.Unlock()
			time.AfterFunc(proposeRetry, s.kickProposer)
			return
		}
		s.inFlight.Add(1)
		s.results <- inflightResult{p, rs}
	}
}

// resultsAreFull reports whether MaxProposalsInFlight proposals are in
// flight; if so, the watcher kicks the proposer when one settles.
func (s *shard) resultsAreFull() bool {
	if s.inFlight.Load() < int64(cap(s.results)) {
		return false
	}
	s.resultsFull.Store(true)
	// A proposal that settled before the mark was set did not see it:
	// look again, or nobody might kick the proposer.
	return s.inFlight.Load() >= int64(cap(s.results))
}

// watchResults waits for each proposal's outcome in order. Applied entries
// were already answered by Applied; here only failures are handled.
func (n *Node) watchResults(s *shard) {
	for r := range s.results {
		res := <-r.rs.ResultC()
		r.rs.Release()
		s.inFlight.Add(-1)
		if s.resultsFull.Swap(false) {
			s.kickProposer()
		}
		if res.Completed() {
			continue
		}
		n.metrics.failedProposals.Inc()
		s.mu.Lock()
		if res.Timeout() {
			s.proposalTimedOut(r.p)
		} else {
			s.proposalDropped(r.p)
		}
		s.mu.Unlock()
	}
}
