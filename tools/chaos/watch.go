package chaos

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Watches (protocol 1.4) under the faults: a watcher per key watches it
// for the whole run on the raw protocol, following MOVED and starting again
// wherever it can after an ERR or a lost connection, and records what each
// session (one W, until its end) said. The watch checker holds each
// session to what the protocol promises, against the grants the history
// shows: the tokens of its HELD lines grow, no exclusive grant is skipped
// between two of them, and no shared one either unless a SHARED line came
// between them (its count includes it; a SHARED line names no token).

// CheckerWatch: a watch session's lines disagree with the grants.
const CheckerWatch = "watch"

// Bounds of a watcher's tries.
const (
	watchDial  = time.Second
	watchPause = 50 * time.Millisecond
)

// WatchSession is what one W said, from its first line to its end.
type WatchSession struct {
	Key  string
	Addr string // the node it ran on
	// States are its lines in order: a HELD line's token, 0 for FREE,
	// SharedLine for SHARED.
	States []uint64
	// Bad are lines wrong on their own: a SHARED line whose count is not
	// within 1..permits.
	Bad []string
	End string // how it ended: "MOVED <addr>", "ERR ...", the read's error, "stopped"
}

// SharedLine stands for a SHARED line in WatchSession.States: no token
// comes near it.
const SharedLine = ^uint64(0)

// Watchers watch keys until Stop.
type Watchers struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	addrs    []string
	sessions []WatchSession
	conns    map[net.Conn]bool
}

// StartWatchers starts a watcher of each key on the cluster at addrs.
func StartWatchers(addrs, keys []string) *Watchers {
	w := &Watchers{stop: make(chan struct{}), addrs: slices.Clone(addrs), conns: map[net.Conn]bool{}}
	for i, key := range keys {
		w.wg.Add(1)
		go w.watch(key, i)
	}
	return w
}

// Stop ends every watcher and returns the sessions they recorded.
func (w *Watchers) Stop() []WatchSession {
	close(w.stop)
	w.mu.Lock()
	for c := range w.conns {
		c.Close()
	}
	w.mu.Unlock()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sessions
}

func (w *Watchers) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// watch runs one key's watcher: a session after another, on the node a
// MOVED names, else on the next address it knows.
func (w *Watchers) watch(key string, turn int) {
	defer w.wg.Done()
	to := ""
	for !w.stopped() {
		addr := to
		if addr == "" {
			addr = w.addr(turn)
			turn++
		}
		s := w.session(key, addr)
		to = ""
		if moved, ok := strings.CutPrefix(s.End, "MOVED "); ok {
			to = moved
		} else {
			w.refresh(addr)
		}
		if len(s.States) > 0 {
			w.mu.Lock()
			w.sessions = append(w.sessions, s)
			w.mu.Unlock()
		}
		if to == "" {
			select {
			case <-w.stop:
			case <-time.After(watchPause):
			}
		}
	}
}

func (w *Watchers) addr(turn int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addrs[turn%len(w.addrs)]
}

// refresh asks the members for the voters' addresses (C -), after a
// session ended without a MOVED: the members change under the membership
// faults.
func (w *Watchers) refresh(tried string) {
	for _, a := range append([]string{tried}, w.snapshotAddrs()...) {
		if list, err := askLine(a, "C -", 2*time.Second); err == nil && strings.HasPrefix(list, "C - OK ") {
			w.mu.Lock()
			w.addrs = strings.Split(strings.TrimPrefix(list, "C - OK "), ",")
			w.mu.Unlock()
			return
		}
	}
}

func (w *Watchers) snapshotAddrs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.addrs)
}

// session runs one W of key on addr until it ends.
func (w *Watchers) session(key, addr string) WatchSession {
	s := WatchSession{Key: key, Addr: addr}
	c, err := net.DialTimeout("tcp", addr, watchDial)
	if err != nil {
		s.End = err.Error()
		return s
	}
	w.mu.Lock()
	if w.stopped() {
		w.mu.Unlock()
		c.Close()
		s.End = "stopped"
		return s
	}
	w.conns[c] = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
		c.Close()
	}()
	if _, err := c.Write([]byte("W " + key + "\n")); err != nil {
		s.End = err.Error()
		return s
	}
	r := bufio.NewReader(c)
	var resp codec.Response
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			s.End = err.Error()
			if w.stopped() {
				s.End = "stopped"
			}
			return s
		}
		if err := codec.ParseResponse([]byte(strings.TrimSuffix(line, "\n")), &resp); err != nil {
			s.End = fmt.Sprintf("unreadable line %q: %v", line, err)
			return s
		}
		switch resp.Status {
		case codec.StatusHeld:
			s.States = append(s.States, resp.Token)
		case codec.StatusFree:
			s.States = append(s.States, 0)
		case codec.StatusShared:
			s.States = append(s.States, SharedLine)
			if resp.Holders < 1 || resp.Holders > resp.Permits {
				s.Bad = append(s.Bad, strings.TrimSpace(line))
			}
		case codec.StatusMoved:
			s.End = "MOVED " + string(resp.Addr)
			return s
		default:
			s.End = strings.TrimSpace(line)
			return s
		}
	}
}

// askLine sends one line to addr on a connection of its own (dialled
// within a second) and returns its answer, all within timeout.
func askLine(addr, line string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(answer), err
}

// CheckWatches holds the sessions to the history's grants (the tokens of
// the acquires answered OK): within a session the HELD tokens grow, no
// exclusive grant of the key has a token between two HELD tokens that
// follow each other in the session, and no shared grant either unless a
// SHARED line came between them (nothing is skipped: PROTOCOL.md, Watch);
// a HELD line never shows a shared grant's token.
func CheckWatches(sessions []WatchSession, h []Op) []string {
	exclusive, shared := map[string][]uint64{}, map[string][]uint64{}
	for i := range h {
		if op := &h[i]; op.isGrant() {
			if op.Op == codec.OpShared {
				shared[op.Key] = append(shared[op.Key], op.RespToken)
			} else {
				exclusive[op.Key] = append(exclusive[op.Key], op.RespToken)
			}
		}
	}
	for _, m := range []map[string][]uint64{exclusive, shared} {
		for k := range m {
			slices.Sort(m[k])
			m[k] = slices.Compact(m[k])
		}
	}
	// between is the first of the sorted tokens g in (after, before).
	between := func(g []uint64, after, before uint64) (uint64, bool) {
		if i, _ := slices.BinarySearch(g, after+1); i < len(g) && g[i] < before {
			return g[i], true
		}
		return 0, false
	}
	f := findings{name: CheckerWatch}
	for _, s := range sessions {
		for _, b := range s.Bad {
			f.add("%s: a watch on %s (ended %s) said %q", s.Key, s.Addr, s.End, b)
		}
		last, sawShared := uint64(0), false
		for _, tok := range s.States {
			switch tok {
			case 0:
				continue
			case SharedLine:
				sawShared = true
				continue
			}
			if _, ok := slices.BinarySearch(shared[s.Key], tok); ok {
				f.add("%s: a watch on %s (ended %s) showed the shared grant %d as HELD: %v", s.Key, s.Addr, s.End, tok, s.States)
			}
			switch {
			case tok <= last:
				f.add("%s: a watch on %s (ended %s) saw token %d after %d: %v", s.Key, s.Addr, s.End, tok, last, s.States)
			case last != 0:
				if g, ok := between(exclusive[s.Key], last, tok); ok {
					f.add("%s: a watch on %s (ended %s) skipped the grant of token %d, between %d and %d: %v", s.Key, s.Addr, s.End, g, last, tok, s.States)
				} else if g, ok := between(shared[s.Key], last, tok); ok && !sawShared {
					f.add("%s: a watch on %s (ended %s) skipped the shared grant of token %d, between %d and %d, with no SHARED line: %v", s.Key, s.Addr, s.End, g, last, tok, s.States)
				}
			}
			last, sawShared = tok, false
		}
	}
	return f.lines()
}
