package bench

import (
	"sync"
	"sync/atomic"
	"time"
)

// keyLines holds, for keys shared by the slots of many connections
// (contended), what no single connection can see: the key's grants in the
// order they happen, and the acquires waiting for it.
//
// The order is observable from the client side because of causality: a
// holder releases only after it has read its grant, and the next grant of
// the key happens only after that release. So the grants of one key reach
// granted one after the other, in the order the server made them, whatever
// connections they arrive on (as long as every lease outlasts the run's
// hiccups: the contended workload releases, it does not let leases run
// out).
//
// The FIFO check. When slot b is granted a key, every other slot a still
// waiting for that key must not have sent its acquire more than slack
// before b sent its own: the server queues acquires in the order it reads
// them, so a (waiting since earlier) should have been granted first. The
// slack covers what the client cannot see, the time between sending an
// acquire and the server reading it. A server that grants in any other
// order (last come first served, random) is caught: with 16 clients on one
// key at a few milliseconds per hand-off, an overtaken waiter soon lags by
// more than the slack.
//
// Shared holds (permits > 0: every key a semaphore of permits) lose the
// causality above: up to permits grants of a key can be made at once (in
// one commit), and they reach their connections in any order. What a
// semaphore promises is checked instead, each from what the client saw
// for certain:
//   - permits: a holder holds from its grant being read to its release
//     being sent, within the server's grant; so no more than permits of
//     them may overlap. (The contended cycle releases as soon as it reads
//     its grant, so a holder too many shows only when its grant and the
//     others' releases cross: the check never misfires, but it catches
//     only some of a server's excess grants.)
//   - tokens: a grant's token is greater than every token of the key read
//     before its acquire was sent (those were issued before the acquire
//     was, and the grant after it), and no token comes twice among the
//     key's recent grants.
//   - FIFO: tokens are issued in grant order, so of two acquires of a key
//     one sent more than the slack before the other must get the smaller
//     token; checked over the key's recentShared latest grants, which a
//     server that overtakes its queue soon breaks.
type keyLines struct {
	slack   time.Duration
	permits int // 0: exclusive locks
	lines   []keyLine
	grants  atomic.Int64
}

// keyLine is one shared key's state.
type keyLine struct {
	mu      sync.Mutex
	last    uint64        // highest token granted so far; 0: none
	waiters []waiter      // acquires sent and not answered
	freedAt time.Duration // when the R that frees the key was sent; -1: none since the last grant
	// Shared holds only: holders (grants read and not released) and the
	// latest grants, oldest first, at most recentShared.
	holders int
	recent  []recentGrant
}

// waiter is an acquire in flight: slot client sent it at sent, when the
// highest token of the key read so far was seen.
type waiter struct {
	client int
	sent   time.Duration
	seen   uint64
}

// recentGrant is a grant of a shared key: its token, and when its acquire
// was sent.
type recentGrant struct {
	token uint64
	sent  time.Duration
}

// recentShared is how many of a shared key's latest grants the FIFO and
// token checks of shared holds compare a grant with: a few rounds of 16
// permits, and a bounded cost per grant.
const recentShared = 64

func newKeyLines(keys int, slack time.Duration, permits int) *keyLines {
	l := &keyLines{slack: slack, permits: permits, lines: make([]keyLine, keys)}
	for i := range l.lines {
		l.lines[i].freedAt = -1
	}
	return l
}

// queued records that client sent an acquire of key k at sent. It must be
// called before the request goes out.
func (l *keyLines) queued(k, client int, sent time.Duration) {
	kl := &l.lines[k]
	kl.mu.Lock()
	kl.waiters = append(kl.waiters, waiter{client, sent, kl.last})
	kl.mu.Unlock()
}

// abandoned forgets client's acquire of key k (it was answered without a
// grant).
func (l *keyLines) abandoned(k, client int) {
	kl := &l.lines[k]
	kl.mu.Lock()
	kl.remove(client)
	kl.mu.Unlock()
}

// releasing records that the holder of key k sent its release at sent. It
// must be called before the request goes out.
func (l *keyLines) releasing(k int, sent time.Duration) {
	kl := &l.lines[k]
	kl.mu.Lock()
	kl.freedAt = sent
	if kl.holders > 0 {
		kl.holders--
	}
	kl.mu.Unlock()
}

// grantCheck is what granted found.
type grantCheck struct {
	tokenOK bool // the token is greater than every earlier one of the key
	fifoOK  bool // no waiter was overtaken
	// permitsOK: shared holds: the grant left no more holders than permits
	permitsOK bool
	// handoff is the time from the release that freed the key being sent
	// to this grant being read; -1 when no release preceded the grant.
	handoff time.Duration
}

// granted checks a grant of key k with token to client, read at now.
func (l *keyLines) granted(k, client int, token uint64, now time.Duration) grantCheck {
	l.grants.Add(1)
	kl := &l.lines[k]
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if l.permits > 0 {
		return kl.grantedShared(l, client, token)
	}
	g := grantCheck{tokenOK: kl.last == 0 || token > kl.last, fifoOK: true, permitsOK: true, handoff: -1}
	kl.last = max(kl.last, token)
	w, found := kl.remove(client)
	sent := w.sent
	if found {
		for _, w := range kl.waiters {
			if w.sent+l.slack < sent {
				g.fifoOK = false
				break
			}
		}
	}
	if kl.freedAt >= 0 {
		g.handoff = now - kl.freedAt
		kl.freedAt = -1
	}
	return g
}

// grantedShared is granted for a key of shared holds; kl.mu is held. It
// measures no hand-off: which release let a grant in cannot be told.
func (kl *keyLine) grantedShared(l *keyLines, client int, token uint64) grantCheck {
	g := grantCheck{tokenOK: true, fifoOK: true, permitsOK: true, handoff: -1}
	kl.last = max(kl.last, token)
	kl.holders++
	g.permitsOK = kl.holders <= l.permits
	w, found := kl.remove(client)
	if found && token <= w.seen {
		g.tokenOK = false
	}
	for _, r := range kl.recent {
		if r.token == token {
			g.tokenOK = false
		}
		if found && (r.sent+l.slack < w.sent && r.token > token || w.sent+l.slack < r.sent && token > r.token) {
			g.fifoOK = false
		}
	}
	if found {
		if len(kl.recent) == recentShared {
			copy(kl.recent, kl.recent[1:])
			kl.recent = kl.recent[:recentShared-1]
		}
		kl.recent = append(kl.recent, recentGrant{token, w.sent})
	}
	return g
}

// checked is the number of grants checked so far.
func (l *keyLines) checked() int64 { return l.grants.Load() }

// remove takes client's waiter out of the line and returns it. Lines are
// short (the clients of one key), so a scan is cheaper than any index.
func (kl *keyLine) remove(client int) (waiter, bool) {
	for i, w := range kl.waiters {
		if w.client == client {
			last := len(kl.waiters) - 1
			kl.waiters[i] = kl.waiters[last]
			kl.waiters = kl.waiters[:last]
			return w, true
		}
	}
	return waiter{}, false
}
