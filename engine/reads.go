package engine

import (
	"time"

	"github.com/baton-dev/baton/codec"
)

// Linearizable queries in a cluster: a Q is answered from the leader's view
// only after a ReadIndex has confirmed that this node still leads and that
// its view holds every committed change, and so is a W's first line. A U
// goes through the same queue, without needing the ReadIndex, so that it
// cannot overtake the W it ends. Queries wait in the shard's read
// queue and are confirmed in batches, one ReadIndex each, by one goroutine
// per shard, so they are answered in the order they arrived; a Q that
// arrives while the node does not serve the shard goes through the same
// queue (and is answered MOVED there, without a ReadIndex), so that it
// cannot overtake an earlier Q of the same key on the same connection.

// readTimeout bounds the ReadIndex behind a batch of queries.
const readTimeout = 2 * time.Second

// pendingRead is a Q or W waiting for the ReadIndex that makes it
// linearizable, or a U behind them.
type pendingRead struct {
	cs  *connState
	op  byte
	key string
}

// queueRead puts a Q, W or U in the read queue, or answers ERR overloaded
// when the queue is full: this is where MaxPendingQueries is checked.
// Called with s.mu held.
func (s *shard) queueRead(cs *connState, op byte, key []byte) {
	if len(s.reads) >= s.maxReads {
		s.node.adm.hits.hit(limitPendingQueries)
		s.sendError(cs, op, key, codec.CodeOverloaded, tooManyReads)
		return
	}
	s.reads = append(s.reads, pendingRead{cs: cs, op: op, key: string(key)})
	s.kickReads()
}

// kickReads wakes the reader, if reads wait.
func (s *shard) kickReads() {
	if len(s.reads) == 0 {
		return
	}
	select {
	case s.readKick <- struct{}{}:
	default:
	}
}

// runReads answers queued queries in batches until the node stops. A leader
// cut off from its peers cannot confirm, so it answers ERR unavailable,
// never stale state.
func (n *Node) runReads(s *shard) {
	for {
		select {
		case <-n.stopC:
			return
		case <-s.readKick:
		}
		batch, serving := s.takeReads()
		if len(batch) == 0 {
			continue
		}
		confirmed := false
		if serving && needsReadIndex(batch) {
			if rs, err := n.nh.ReadIndex(s.id, readTimeout); err == nil {
				confirmed, _ = n.completed(rs)
			}
		}
		s.answerReads(batch, confirmed)
	}
}

// needsReadIndex reports whether a batch has a Q or a W: U alone needs no
// confirmation.
func needsReadIndex(batch []pendingRead) bool {
	for _, q := range batch {
		if q.op != codec.OpUnwatch {
			return true
		}
	}
	return false
}

// takeReads empties the read queue; serving says whether a ReadIndex is
// worth asking for. Holding requests (awaiting its fence or a new leader),
// a node leaves them queued: startServing, or a leader named, kicks the
// reader again.
func (s *shard) takeReads() (batch []pendingRead, serving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holding() {
		return nil, false
	}
	batch, s.reads = s.reads, nil
	return batch, s.serving
}

// answerReads answers a batch: from the view if its ReadIndex confirmed
// the view and the node still serves, else MOVED or ERR unavailable (a U
// is answered OK whatever the view).
func (s *shard) answerReads(batch []pendingRead, confirmed bool) {
	now := monoNow()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range batch {
		if confirmed && s.serving || q.op == codec.OpUnwatch {
			s.serveRead(q.cs, q.op, bytesOf(q.key), now)
		} else {
			s.answerNotServing(q.cs, q.op, bytesOf(q.key))
		}
	}
}
