package engine

import (
	"strconv"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// Watches (protocol 1.4, W and U): a connection's watch of a key is
// answered at once with the key's committed state (in a cluster after a
// ReadIndex, as a Q: reads.go), then with one line each time an entry
// that applies changes the key's holders, until U, the connection's end,
// or the node's end of leading the shard, which ends it with MOVED (or
// ERR unavailable). Watches start only on the serving leader; its lines
// come from the entries the node applies, in commit order, whoever
// proposed them, so a watch parked for a moment (a fence of another node
// seen before Raft names it the leader, a hand-off under way) misses
// nothing, and ends once the new leader is known (stopServing), or at
// once when the node is cut off (leaderUpdated).
//
// A watch is in two places, under their own locks: the shard's map of
// the watches of each key (shard.mu), which the apply path looks at, and
// the connection's map of its watches by key (connState.mu), which its
// end and U take apart. Lock order: shard.mu, then connState.mu, as for
// every answer.
//
// The apply path pays for watches only when the shard has some: one map
// lookup per command that changes a holder (watchChanged), and at the end
// of the entry one line per watch of each key it changed (sendWatched):
// the key's state after the entry, so that a hand-off (a release and the
// next grant in one commit) shows as its new holder only. Nothing is
// skipped, though: a grant that a later command of the same entry ends
// (an R without a token, say) gets its own line first, from the grant
// itself, since the table the lines are read from is already the
// entry's end.
// A line goes through the connection's queue like any answer, so a
// watcher that does not read is cut off by MaxUnsentPerConn and
// MaxUnsent and slows nobody down.

// watch is one connection's watch of one key.
type watch struct {
	cs  *connState
	key string
	// next is the key's next watch in the shard's list (shard.watches
	// holds the first): a key has one watch most often, and a list costs
	// no allocation of its own.
	next *watch
	// dirty: the entry being applied changed the key's holders, and the
	// watch is in shard.watchDirty.
	dirty bool
	// granted is the entry's latest grant of the key so far (its token,
	// lease and owner), which a later change in the entry would hide.
	granted      uint64
	grantLeaseMs uint32
	grantOwner   string
	// Shared grants (protocol 1.4): holders is the count of the last line
	// sent (0 for FREE or HELD), which is the key's at the start of the
	// next entry that changes it; during one, count follows its changes
	// (from holders), and sharedFrom is the first token of its shared
	// grants not shown yet, which a release later in the entry would
	// hide: that release sends a SHARED line first, as a hidden exclusive
	// grant gets its HELD line.
	holders, count, permits uint32
	sharedFrom              uint64
}

// watchW serves a W for key on cs once its ReadIndex (in a cluster)
// confirmed the view, or at once on a single node: it starts the watch,
// or finds the one cs has, and answers the key's state. s.mu is held.
func (s *shard) watchW(cs *connState, key []byte, now int64) {
	first := s.watches[string(key)]
	for w := first; w != nil; w = w.next {
		if w.cs == cs {
			w.holders = s.stateLine(cs, codec.OpWatch, key, now, false)
			return
		}
	}
	w := &watch{cs: cs, key: string(key), next: first}
	switch cs.addWatch(w) {
	case connClosed:
		return
	case connFull:
		s.sendError(cs, codec.OpWatch, key, codec.CodeOverloaded, cs.adm.tooManyWatchesOnConn)
		return
	case nodeFull:
		s.sendError(cs, codec.OpWatch, key, codec.CodeOverloaded, cs.adm.tooManyWatchesOnNode)
		return
	}
	if s.watches == nil {
		s.watches = make(map[string]*watch)
	}
	s.watches[w.key] = w
	w.holders = s.stateLine(cs, codec.OpWatch, key, now, false)
}

// unwatch serves a U: it ends cs's watch of key, if it has one, and
// answers OK, after which no W line of the key follows on cs. s.mu is
// held.
func (s *shard) unwatch(cs *connState, key []byte) {
	if w := cs.removeWatch(string(key)); w != nil {
		s.dropWatch(w)
	}
	s.send(cs, codec.OpUnwatch, key, codec.StatusOK)
}

// dropWatch takes w out of the shard's map. s.mu is held.
func (s *shard) dropWatch(w *watch) {
	first := s.watches[w.key]
	switch {
	case first == w && w.next == nil:
		delete(s.watches, w.key)
	case first == w:
		s.watches[w.key] = w.next
	default:
		for o := first; o != nil; o = o.next {
			if o.next == w {
				o.next = w.next
				break
			}
		}
	}
	w.next = nil
	w.dirty, w.granted, w.sharedFrom = false, 0, 0 // sendWatched skips it: no line after U
}

// watchChanged notes that a command c of the entry being applied changed
// key's holders (res: Granted, Released or Expired): its watches get a
// line at the end of the entry, and one now for grants of the entry that
// c ends. s.mu is held.
func (s *shard) watchChanged(c *sm.Command, res sm.Result) {
	if len(s.watches) == 0 {
		return
	}
	for w := s.watches[string(c.Key)]; w != nil; w = w.next {
		if !w.dirty {
			w.dirty, w.count = true, w.holders
			s.watchDirty = append(s.watchDirty, w)
		}
		if w.granted != 0 {
			w.cs.sendEvent(&codec.Response{Op: codec.OpWatch, Key: c.Key, Status: codec.StatusHeld,
				Token: w.granted, RemainingMs: uint64(w.grantLeaseMs), Owner: bytesOf(w.grantOwner)}, s.hold())
			w.granted = 0
		}
		switch {
		case res.Code == sm.Granted && c.Permits != 0:
			w.count, w.permits = w.count+1, c.Permits
			if w.sharedFrom == 0 {
				w.sharedFrom = res.Token
			}
		case res.Code == sm.Granted:
			w.granted, w.grantLeaseMs, w.grantOwner = res.Token, c.LeaseMs, string(c.Owner)
		case w.count > 0:
			// A shared grant went (Released, Expired), or all of them
			// (a Release without a token: Token 0).
			if w.sharedFrom != 0 && (res.Token == 0 || res.Token >= w.sharedFrom) {
				w.cs.sendEvent(&codec.Response{Op: codec.OpWatch, Key: c.Key, Status: codec.StatusShared,
					Holders: uint64(w.count), Permits: uint64(w.permits)}, s.hold())
				w.sharedFrom = 0
			}
			if res.Token == 0 {
				w.count = 0
			} else {
				w.count--
			}
		}
	}
}

// sendWatched sends, at the end of an applied entry, one line to each
// watch of a key the entry changed: the key's state after the entry, so
// that a hand-off (a release and the next grant in one commit) shows as
// its new holder only. s.mu is held.
func (s *shard) sendWatched(now int64) {
	for i, w := range s.watchDirty {
		if w.dirty {
			w.dirty, w.granted, w.grantOwner, w.sharedFrom = false, 0, "", 0
			w.holders = s.stateLine(w.cs, codec.OpWatch, bytesOf(w.key), now, true)
		}
		s.watchDirty[i] = nil
	}
	s.watchDirty = s.watchDirty[:0]
}

// endWatches ends every watch of the shard, which this node no longer
// serves: each is answered MOVED to the leader, or ERR unavailable. s.mu
// is held.
func (s *shard) endWatches() {
	for key, first := range s.watches {
		for w := first; w != nil; w = w.next {
			w.cs.removeWatch(key)
			s.answerNotServingEvent(w.cs, codec.OpWatch, bytesOf(key))
		}
		delete(s.watches, key)
	}
	for i := range s.watchDirty {
		s.watchDirty[i] = nil
	}
	s.watchDirty = s.watchDirty[:0]
}

// addWatch lists w in the connection's watches. This is where
// MaxWatchesPerConn and MaxWatches are checked.
func (cs *connState) addWatch(w *watch) addResult {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch {
	case cs.closed:
		return connClosed
	case len(cs.watches) >= cs.adm.limits.MaxWatchesPerConn:
		cs.adm.hits.hit(limitWatchesPerConn)
		return connFull
	case !cs.adm.admitWatch():
		cs.adm.hits.hit(limitWatches)
		return nodeFull
	}
	if cs.watches == nil {
		cs.watches = make(map[string]*watch)
	}
	cs.watches[w.key] = w
	return added
}

// removeWatch takes the connection's watch of key out of its list and
// returns it; nil when it has none (or its end took them all).
func (cs *connState) removeWatch(key string) *watch {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	w := cs.watches[key]
	if w != nil {
		delete(cs.watches, key)
		cs.adm.watchesGone(1)
	}
	return w
}

// takeWatches empties the connection's list of watches, at its end, and
// returns them for their shards to drop.
func (cs *connState) takeWatches() []*watch {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ws := make([]*watch, 0, len(cs.watches))
	for _, w := range cs.watches {
		ws = append(ws, w)
	}
	cs.adm.watchesGone(len(cs.watches))
	cs.watches = nil
	return ws
}

// dropWatches drops the watches of a connection that ended from their
// shards.
func (n *Node) dropWatches(cs *connState) {
	for _, w := range cs.takeWatches() {
		s := n.shardFor(bytesOf(w.key))
		s.mu.Lock()
		s.dropWatch(w)
		s.mu.Unlock()
	}
}

// watchLimitTexts are the texts of ERR overloaded for the watch limits.
func watchLimitTexts(l Limits) (onConn, onNode string) {
	return "too many watches on this connection (" + strconv.Itoa(l.MaxWatchesPerConn) + ")",
		"too many watches on this node (" + strconv.Itoa(l.MaxWatches) + "), retry later"
}
