package engine

// Answers to one (op, key) on one connection leave in the order of the
// requests (PROTOCOL.md, Transport). An R or K is answered when its command
// applies, and commands apply in the order they were proposed; but one that
// is answered at once, because this node does not serve the shard or the
// batch is full, could overtake an earlier R or K of the same key on the same
// connection whose command is still in flight, and the client would pair the
// two answers the wrong way round. Such an answer trails the earlier one: it
// is kept in shard.trailing under the earlier command's trail number and
// sent right after that command is answered. (Acquires keep their order
// through the key's queue instead: deferAnswer.)

// trailingAnswer is an answer to an R or K decided at once and held back.
type trailingAnswer struct {
	cs   *connState
	op   byte
	code string // ERR code; "" for MOVED or ERR unavailable, decided when sent
	text string
}

// answerNow answers an R or K of ks decided without Raft: at once, or after
// the connection's earlier R or K of the key that is still in flight. code
// "" stands for "not serving" (answerNotServing).
func (s *shard) answerNow(cs *connState, op byte, key []byte, ks *keyState, code, text string) {
	a := trailingAnswer{cs: cs, op: op, code: code, text: text}
	if ks == nil || ks.inflight == 0 {
		s.sendTrailing(key, a)
		return
	}
	o := s.lastUnanswered(cs, op, ks)
	if o == nil {
		s.sendTrailing(key, a)
		return
	}
	if o.trail == 0 {
		s.nextTrail++
		if s.nextTrail == 0 {
			s.nextTrail = 1
		}
		o.trail = s.nextTrail
	}
	if s.trailing == nil {
		s.trailing = make(map[uint32][]trailingAnswer)
	}
	s.trailing[o.trail] = append(s.trailing[o.trail], a)
}

// lastUnanswered is the latest R or K of ks from cs with op whose answer is
// still to come: batched, or in a proposal that did not fail. It looks at no
// more of the key's commands than are in flight.
func (s *shard) lastUnanswered(cs *connState, op byte, ks *keyState) *origin {
	left := ks.inflight
	for i := len(s.origins) - 1; i >= 0 && left > 0; i-- {
		if o := &s.origins[i]; o.ks == ks {
			if o.kind == originClient && o.cs == cs && o.op == op {
				return o
			}
			left--
		}
	}
	for j := len(s.inflight) - 1; j >= 0 && left > 0; j-- {
		p := s.inflight[j]
		for i := len(p.origins) - 1; i >= 0 && left > 0; i-- {
			if o := &p.origins[i]; o.ks == ks {
				if !p.failed && o.kind == originClient && o.cs == cs && o.op == op {
					return o
				}
				left--
			}
		}
	}
	return nil
}

// answeredClient sends what trails o, a client's R or K that was just
// answered.
func (s *shard) answeredClient(o *origin) {
	if o.trail == 0 {
		return
	}
	key := bytesOf(o.ks.key)
	for _, a := range s.trailing[o.trail] {
		s.sendTrailing(key, a)
	}
	delete(s.trailing, o.trail)
	o.trail = 0
}

func (s *shard) sendTrailing(key []byte, a trailingAnswer) {
	if a.code == "" {
		s.answerNotServing(a.cs, a.op, key)
		return
	}
	s.sendError(a.cs, a.op, key, a.code, a.text)
}
