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
type keyLines struct {
	slack  time.Duration
	lines  []keyLine
	grants atomic.Int64
}

// keyLine is one shared key's state.
type keyLine struct {
	mu      sync.Mutex
	last    uint64        // highest token granted so far; 0: none
	waiters []waiter      // acquires sent and not answered
	freedAt time.Duration // when the R that frees the key was sent; -1: none since the last grant
}

// waiter is an acquire in flight: slot client sent it at sent.
type waiter struct {
	client int
	sent   time.Duration
}

func newKeyLines(keys int, slack time.Duration) *keyLines {
	l := &keyLines{slack: slack, lines: make([]keyLine, keys)}
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
	kl.waiters = append(kl.waiters, waiter{client, sent})
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
	kl.mu.Unlock()
}

// grantCheck is what granted found.
type grantCheck struct {
	tokenOK bool // the token is greater than every earlier one of the key
	fifoOK  bool // no waiter was overtaken
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
	g := grantCheck{tokenOK: kl.last == 0 || token > kl.last, fifoOK: true, handoff: -1}
	kl.last = max(kl.last, token)
	sent, found := kl.remove(client)
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

// checked is the number of grants checked so far.
func (l *keyLines) checked() int64 { return l.grants.Load() }

// remove takes client's waiter out of the line and returns when it sent
// its acquire. Lines are short (the clients of one key), so a scan is
// cheaper than any index.
func (kl *keyLine) remove(client int) (time.Duration, bool) {
	for i, w := range kl.waiters {
		if w.client == client {
			last := len(kl.waiters) - 1
			kl.waiters[i] = kl.waiters[last]
			kl.waiters = kl.waiters[:last]
			return w.sent, true
		}
	}
	return 0, false
}
