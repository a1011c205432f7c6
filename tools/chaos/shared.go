package chaos

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Shared holds (protocol 1.4, S) under the faults: shared workers take one
// of SharedPermits shared holds of the SharedKeys (and now and then the
// key exclusively, a writer of a read-write lock), hold it for part of its
// lease, maybe extend it, release it or let its lease run out, and query
// the keys. porcupine's model is of an exclusive lock (model.go), so these
// keys go to a checker of their own, which holds the history to a lock
// table with permits (checkShared):
//
//   - capacity: at no moment do more than SharedPermits shared grants, or
//     an exclusive grant and anything else, hold the key as their holders
//     surely know it (from the answer of the acquire until the release was
//     sent, or until the lease surely ran out: the same bound of a lease the
//     model uses, leaseBounds, replaced by each extend answered OK and
//     lowered by each of unknown outcome);
//   - queries: a Q answered within such holds shows them: SHARED with at
//     least as many holders as surely held the key throughout the query and
//     the key's permits, HELD with the exclusive grant's token, FREE only
//     if nothing surely held it; SHARED never while an exclusive grant
//     surely held the key, and HELD never with a shared grant's token.
//
// The token checker (check.go) holds the grants of both kinds to the same
// rules, and the watch checker (watch.go) knows SHARED lines.

// CheckerShared: the history of a shared key disagrees with a lock table
// that has permits.
const CheckerShared = "shared"

// SharedPermits is the permits of every shared key of a run.
const SharedPermits = 2

// sharedPrefix starts the name of every shared key (and so of every
// generation of one: keys.go), which is how the checkers tell them.
const sharedPrefix = "sem/"

// SharedKeys are the keys the shared workers use, one on each of two
// shards.
var SharedKeys = []string{"sem/a", "sem/b"}

// isSharedKey reports whether key is one the shared workers use.
func isSharedKey(key string) bool { return strings.HasPrefix(key, sharedPrefix) }

// holdSpan is when one grant surely held its key, as its holder knows.
type holdSpan struct {
	token    uint64
	shared   bool
	from, to time.Duration
	grant    *Op // the first acquire answered with the token
}

// checkShared checks the history of every shared key in h.
func checkShared(h []Op) []string {
	f := findings{name: CheckerShared}
	byKey := map[string][]*Op{}
	for i := range h {
		if o := &h[i]; isSharedKey(o.Key) {
			byKey[o.Key] = append(byKey[o.Key], o)
		}
	}
	bounds := newLeaseBounds(h)
	for _, k := range sortedKeys(byKey) {
		ops := byKey[k]
		slices.SortStableFunc(ops, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })
		spans := holdSpans(ops, bounds)
		checkCapacity(&f, k, spans)
		checkSharedQueries(&f, k, ops, spans)
	}
	return f.lines()
}

// holdSpans finds, for every grant of one key's ops (in Call order), when
// it surely held the key: from the first answer that carried its token to
// the first release of it sent, or the end of its lease as surely known,
// whichever comes first.
func holdSpans(ops []*Op, bounds leaseBounds) []holdSpan {
	byToken := map[uint64]*holdSpan{}
	var order []uint64
	for _, o := range ops {
		if !o.isGrant() {
			continue
		}
		s := byToken[o.RespToken]
		if s == nil {
			s = &holdSpan{token: o.RespToken, shared: o.Op == codec.OpShared, from: o.Return, to: bounds.of(o), grant: o}
			byToken[o.RespToken] = s
			order = append(order, o.RespToken)
			continue
		}
		// A retry's answer: the same grant, its lease untouched.
		s.from = min(s.from, o.Return)
	}
	// An extend sets a new lease from when it applies, no sooner than its
	// Call, which may be shorter than the one before: one answered OK
	// replaces the bound, one whose outcome is unknown may have, so it can
	// only lower it. (ops are in Call order, as a holder's extends are.)
	for _, o := range ops {
		s := byToken[o.Token]
		if s == nil || o.Op != codec.OpExtend {
			continue
		}
		switch end := o.Call + leaseDur(o.LeaseMs); o.outcome() {
		case outcomeKnown:
			if o.Status == codec.StatusOK {
				s.to = end
			}
		case outcomeUnknown:
			s.to = min(s.to, end)
		}
	}
	// A release ends the holder's claim when it is sent, answered or not;
	// one without a token (nobody sends it here) ends every claim.
	for _, o := range ops {
		if o.Op != codec.OpRelease {
			continue
		}
		for _, tok := range order {
			if s := byToken[tok]; (o.Token == 0 || o.Token == tok) && o.Call >= s.from {
				s.to = min(s.to, o.Call)
			}
		}
	}
	spans := make([]holdSpan, 0, len(order))
	for _, tok := range order {
		if s := byToken[tok]; s.to > s.from {
			spans = append(spans, *s)
		}
	}
	return spans
}

// checkCapacity sweeps the spans of one key: at no moment more than
// SharedPermits shared ones, nor an exclusive one beside any other.
func checkCapacity(f *findings, key string, spans []holdSpan) {
	type edge struct {
		at    time.Duration
		start bool
		span  *holdSpan
	}
	var edges []edge
	for i := range spans {
		edges = append(edges, edge{spans[i].from, true, &spans[i]}, edge{spans[i].to, false, &spans[i]})
	}
	// Ends before starts at the same instant: a hand-off's release and the
	// next grant are not an overlap.
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case !a.start && b.start:
			return -1
		case a.start && !b.start:
			return 1
		}
		return 0
	})
	holding := map[*holdSpan]bool{}
	for _, e := range edges {
		if !e.start {
			delete(holding, e.span)
			continue
		}
		holding[e.span] = true
		shared, exclusive := 0, 0
		for s := range holding {
			if s.shared {
				shared++
			} else {
				exclusive++
			}
		}
		if exclusive > 1 || exclusive == 1 && shared > 0 || shared > SharedPermits {
			var held []string
			for s := range holding {
				held = append(held, s.grant.String())
			}
			slices.Sort(held)
			f.add("key %q: at %v, %d exclusive and %d shared grants (permits %d) held at once, as their holders surely knew: %s",
				key, e.at, exclusive, shared, SharedPermits, strings.Join(held, "; "))
			return // one overlap says it; the rest follow from it
		}
	}
}

// checkSharedQueries holds each answered Q of one key to the spans that
// surely held the key throughout it.
func checkSharedQueries(f *findings, key string, ops []*Op, spans []holdSpan) {
	sharedTokens := map[uint64]bool{}
	for _, s := range spans {
		if s.shared {
			sharedTokens[s.token] = true
		}
	}
	for _, o := range ops {
		if o.Op == codec.OpAcquire && o.isGrant() && sharedTokens[o.RespToken] {
			f.add("key %q: a shared grant's token answered to an exclusive acquire: %s", key, o)
		}
		if o.Op != codec.OpQuery || !o.Answered {
			continue
		}
		shared := 0
		var exclusive *holdSpan
		for i := range spans {
			if s := &spans[i]; s.from <= o.Call && o.Return <= s.to {
				if s.shared {
					shared++
				} else {
					exclusive = s
				}
			}
		}
		switch o.Status {
		case codec.StatusShared:
			switch {
			case o.RespPermits != SharedPermits || o.RespHolders < 1 || o.RespHolders > o.RespPermits:
				f.add("key %q: %s: the key's permits are %d", key, o, SharedPermits)
			case exclusive != nil:
				f.add("key %q: %s, while %s surely held it", key, o, exclusive.grant)
			case int(o.RespHolders) < shared:
				f.add("key %q: %s, while %d shared grants surely held it", key, o, shared)
			}
		case codec.StatusHeld:
			switch {
			case sharedTokens[o.RespToken]:
				f.add("key %q: %s shows a shared grant's token as the exclusive holder", key, o)
			case shared > 0:
				f.add("key %q: %s, while %d shared grants surely held it", key, o, shared)
			case exclusive != nil && exclusive.token != o.RespToken:
				f.add("key %q: %s, while %s surely held it", key, o, exclusive.grant)
			}
		case codec.StatusFree:
			if exclusive != nil || shared > 0 {
				f.add("key %q: %s, while %d shared and %v exclusive grants surely held it", key, o, shared, exclusive != nil)
			}
		}
	}
}
