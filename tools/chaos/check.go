package chaos

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/baton-dev/baton/codec"
)

// CheckConfig tunes Check.
type CheckConfig struct {
	// AnswerBound: every request is answered, or its connection fails,
	// within its wait (WaitMs > 0; 0 for others) plus this. 0 means
	// DefaultAnswerBound.
	AnswerBound time.Duration
	// OutDir is where porcupine's HTML visualization is written when it
	// finds a violation; "" means a new temporary directory.
	OutDir string
	// Timeout is porcupine's time budget for the whole history (the keys
	// are checked in parallel within it); 0 means DefaultCheckTimeout. A
	// timeout is reported as inconclusive (a violation line saying so),
	// never as a pass, with what a sweep of the key found (see sweep.go),
	// which takes up to sweepBudget more. Drawing the visualization of a
	// key found not linearizable reruns its check and may take up to
	// Timeout again.
	Timeout time.Duration
}

// Defaults of CheckConfig.
const (
	// DefaultAnswerBound is the slack a request gets when AnswerBound is 0:
	// generous, since a failover with a Raft election and a few retries
	// fits in it many times, and a hang is usually forever.
	DefaultAnswerBound = 10 * time.Second
	// DefaultCheckTimeout is porcupine's budget when Timeout is 0.
	DefaultCheckTimeout = 2 * time.Minute
)

// maxLinesPerChecker caps each checker's violation lines: a broken server
// usually breaks things many times over, and the first few say it all.
const maxLinesPerChecker = 20

// Report is what Check found.
type Report struct {
	Ops           int            // operations given to the linearizability checker
	ByKey         map[string]int // the same, per key
	Violations    []string       // one line per finding of any checker; empty means the run passed
	Visualization string         // path of the HTML file, when porcupine found the history not linearizable
}

// OK reports whether the run passed every checker.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Check runs every checker on the history h and the recorder's problems:
// exactly one answer per request (every problem is a violation), nothing
// hangs, fencing tokens increase and are never reused, each key's
// history is linearizable against the lock model, and each shared key's
// agrees with a lock table that has permits (shared.go).
func Check(h []Op, problems []string, cfg CheckConfig) Report {
	if cfg.AnswerBound <= 0 {
		cfg.AnswerBound = DefaultAnswerBound
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultCheckTimeout
	}
	rep := Report{ByKey: make(map[string]int)}
	protocol := findings{name: "protocol"}
	for _, p := range problems {
		protocol.add("%s", p)
	}
	rep.Violations = append(rep.Violations, protocol.lines()...)
	rep.Violations = append(rep.Violations, checkHangs(h, cfg.AnswerBound)...)
	// The lock checkers see the lock requests only: a client's C - (its
	// address refresh) and M are recorded, so that their answers pair, but
	// name no key of the table.
	locks := slices.DeleteFunc(slices.Clone(h), func(o Op) bool { return o.Op == codec.OpCluster || o.Op == codec.OpMember })
	rep.Violations = append(rep.Violations, checkTokens(locks)...)
	rep.Violations = append(rep.Violations, checkLinearizable(locks, cfg, &rep)...)
	rep.Violations = append(rep.Violations, checkShared(locks)...)
	return rep
}

// findings collects one checker's violation lines, up to
// maxLinesPerChecker, and counts the rest.
type findings struct {
	name    string
	out     []string
	dropped int
}

func (f *findings) add(format string, args ...any) {
	if len(f.out) == maxLinesPerChecker {
		f.dropped++
		return
	}
	f.out = append(f.out, f.name+": "+fmt.Sprintf(format, args...))
}

func (f *findings) lines() []string {
	if f.dropped > 0 {
		return append(f.out, fmt.Sprintf("%s: ... and %d more", f.name, f.dropped))
	}
	return f.out
}

// checkHangs finds requests that were neither answered nor cut off by a
// connection failure within their bound, measured from Call. An acquire that
// waits forever may rightly never be answered and is exempt.
func checkHangs(h []Op, slack time.Duration) []string {
	f := findings{name: "hang"}
	open := 0
	for i := range h {
		o := &h[i]
		if !o.Answered && o.Return < o.Call {
			open++ // the history was taken before Finish
			continue
		}
		bound, ok := o.answerBound(slack)
		if !ok {
			continue
		}
		switch took := o.Return - o.Call; {
		case took <= bound:
		case o.Answered:
			f.add("answered after %v, bound %v: %s", took.Round(time.Millisecond), bound, o)
		default:
			f.add("no answer and no connection failure for %v, bound %v: %s", took.Round(time.Millisecond), bound, o)
		}
	}
	if open > 0 {
		f.add("%d requests were still outstanding: the history was taken before Recorder.Finish, so hangs cannot be judged", open)
	}
	return f.lines()
}

// checkTokens checks the fencing tokens the history saw: per key, grants
// increase in real-time order (a grant answered before another was sent has
// the smaller token), no token is granted twice or seen for two keys, and
// each token has one owner wherever it shows (A OK, Q HELD).
//
// The one exception is an owner's own grant (protocol 1.1): acquires of one
// key that name the same owner are answered with the one grant's token, a
// retry after a lost answer as well as acquires that waited together. So
// two A OK with the same token are legal when they have the same key and
// the same non-empty owner, and such a pair may have equal tokens in real
// time order too (one answered before the other was sent), never a smaller
// one.
func checkTokens(h []Op) []string {
	f := findings{name: "tokens"}
	grants := make(map[string][]*Op)
	byCall := make([]*Op, 0, len(h))
	for i := range h {
		byCall = append(byCall, &h[i])
	}
	slices.SortStableFunc(byCall, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })

	granted := make(map[uint64]*Op) // the first A OK of each token
	seen := make(map[uint64]*Op)    // the first A OK or Q HELD of each token
	reported := make(map[uint64]bool)
	for _, o := range byCall {
		if !o.Answered {
			continue
		}
		isGrant := o.isAcquire() && o.Status == codec.StatusOK
		if !isGrant && o.Status != codec.StatusHeld {
			continue
		}
		t := o.RespToken
		if isGrant {
			grants[o.Key] = append(grants[o.Key], o)
			if g := granted[t]; g == nil {
				granted[t] = o
			} else if !sameOwnerGrant(g, o) && !reported[t] {
				reported[t] = true
				f.add("token %d granted twice: %s, and %s", t, g, o)
			}
		}
		s := seen[t]
		switch {
		case s == nil:
			seen[t] = o
		case reported[t]:
		case s.Key != o.Key:
			reported[t] = true
			f.add("token %d seen for two keys: %s, and %s", t, s, o)
		case s.grantOwner() != o.grantOwner():
			// The owner is stored with the grant: whoever is answered with
			// its token, or shown it, sees the same one.
			reported[t] = true
			f.add("token %d seen with two owners: %s, and %s", t, s, o)
		}
	}

	keys := sortedKeys(grants)
	for _, k := range keys {
		gs := grants[k] // in Call order
		byRet := slices.Clone(gs)
		slices.SortStableFunc(byRet, func(a, b *Op) int { return cmp.Compare(a.Return, b.Return) })
		// Sweep: before looks at g2, best is the grant with the largest
		// token among those answered before g2 was sent.
		var best *Op
		j := 0
		for _, g2 := range gs {
			for ; j < len(byRet) && byRet[j].Return < g2.Call; j++ {
				if best == nil || byRet[j].RespToken > best.RespToken {
					best = byRet[j]
				}
			}
			switch {
			case best == nil || g2.RespToken > best.RespToken:
			case g2.RespToken == best.RespToken && sameOwnerGrant(best, g2):
				// The owner's grant again: a retry, or another waiter. Any
				// other grant with that token is reported as granted twice.
			default:
				f.add("key %q: token %d is not above token %d granted before it was asked for: %s, after %s", k, g2.RespToken, best.RespToken, g2, best)
			}
		}
	}
	return f.lines()
}

// sameOwnerGrant reports whether two A OK with the same token may both be
// the one grant of an owner: they name the same key and the same owner.
// Without an owner a token is granted once.
func sameOwnerGrant(a, b *Op) bool {
	return a.Key == b.Key && a.Owner != "" && a.Owner == b.Owner
}

// keyCheck is one key's linearizability check.
type keyCheck struct {
	key    string
	ops    []porcupine.Operation
	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
	swept  *sweepResult // when porcupine was inconclusive
}

// checkLinearizable checks each key's history against the lock model with
// porcupine, the keys in parallel, within cfg.Timeout in all, and writes a
// visualization of every key that is not linearizable.
func checkLinearizable(h []Op, cfg CheckConfig, rep *Report) []string {
	f := findings{name: "linearizability"}
	checks := porcupineHistories(h)
	for _, kc := range checks {
		rep.ByKey[kc.key] = len(kc.ops)
		rep.Ops += len(kc.ops)
	}

	deadline := time.Now().Add(cfg.Timeout)
	work := make(chan *keyCheck)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(checks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for kc := range work {
				kc.result = porcupine.Unknown
				if left := time.Until(deadline); left > 0 {
					// The verdict first, without the bookkeeping a
					// visualization needs; that only for a key that fails.
					kc.result = porcupine.CheckOperationsTimeout(lockModel, kc.ops, left)
				}
				switch kc.result {
				case porcupine.Illegal:
					_, kc.info = porcupine.CheckOperationsVerbose(lockModel, kc.ops, cfg.Timeout)
				case porcupine.Unknown:
					// No verdict is still no place to look: the sweep may
					// find the op where the history goes wrong.
					r := sweep(kc.ops, sweepBudget)
					kc.swept = &r
				}
			}
		}()
	}
	for _, kc := range checks {
		work <- kc
	}
	close(work)
	wg.Wait()

	for i, kc := range checks {
		switch kc.result {
		case porcupine.Ok:
		case porcupine.Unknown:
			f.add("key %q (%d ops): inconclusive, porcupine ran out of its %v budget; %s", kc.key, len(kc.ops), cfg.Timeout, kc.swept.describe(kc.ops))
		case porcupine.Illegal:
			path, err := visualize(cfg.OutDir, i, kc)
			if err != nil {
				f.add("key %q (%d ops): not linearizable (longest linearizable prefix %d ops); writing the visualization failed: %v", kc.key, len(kc.ops), longestPrefix(kc.info), err)
				continue
			}
			if rep.Visualization == "" {
				rep.Visualization = path
			}
			f.add("key %q (%d ops): not linearizable (longest linearizable prefix %d ops); visualization: %s", kc.key, len(kc.ops), longestPrefix(kc.info), path)
		}
	}
	return f.lines()
}

// porcupineHistories turns h into one porcupine history per key, in key
// order, leaving out what the model need not see: MOVED answers (the node
// did not serve the request), queries without a state in their answer, and
// acquires of unknown outcome (at most they made a phantom, which the model
// allows anyway). The other unknown ops return after everything else, as
// porcupine wants an op that may take effect at any time after its call.
// An acquire's lease bound comes from leaseBounds, over all of h: the
// attempts that may have made its grant include those left out.
func porcupineHistories(h []Op) []*keyCheck {
	bounds := newLeaseBounds(h)
	var end time.Duration
	for i := range h {
		end = max(end, h[i].Call, h[i].Return)
	}
	end += time.Millisecond

	byKey := make(map[string][]*Op)
	for i := range h {
		o := &h[i]
		if isSharedKey(o.Key) {
			continue // the shared checker's (shared.go): the model is of an exclusive lock
		}
		switch o.outcome() {
		case outcomeNone:
			continue
		case outcomeUnknown:
			if o.Op == codec.OpAcquire {
				continue
			}
		}
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	var checks []*keyCheck
	for _, k := range sortedKeys(byKey) {
		ops := byKey[k]
		slices.SortStableFunc(ops, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })
		kc := &keyCheck{key: k, ops: make([]porcupine.Operation, 0, len(ops))}
		var lanes []time.Duration // per lane, the Return of its last op
		for _, o := range ops {
			in := lockInput{
				op: o.Op, token: o.Token, leaseMs: o.LeaseMs, waitMs: o.WaitMs, owner: o.Owner,
				call: int64(o.Call), ret: int64(o.Return), conn: o.Conn, key: o.Key,
			}
			if o.Op == codec.OpAcquire {
				in.leaseLB = int64(bounds.of(o))
			}
			out := lockOutput{status: o.Status, token: o.RespToken, remaining: o.RemainingMs, owner: o.RespOwner, code: o.Code}
			ret := o.Return
			if o.outcome() == outcomeUnknown {
				in.unknown, in.ret, ret = true, unknownReturn, end
			}
			// Lanes only lay the visualization out: ops of one connection
			// overlap when it pipelines, so each op goes on the first lane
			// free at its call.
			lane := slices.IndexFunc(lanes, func(last time.Duration) bool { return last < o.Call })
			if lane < 0 {
				lane = len(lanes)
				lanes = append(lanes, 0)
			}
			lanes[lane] = ret
			kc.ops = append(kc.ops, porcupine.Operation{
				ClientId: lane, Input: in, Call: int64(o.Call), Output: out, Return: int64(ret),
			})
		}
		checks = append(checks, kc)
	}
	return checks
}

// leaseBounds bounds the lease of an owner's grant from below. Every
// attempt of one acquire (a retry on another connection after MOVED, an
// ERR or a lost connection) names the same owner, and any of them may be
// the one that made the grant the others are answered with: an attempt
// whose answer was lost is a phantom to the model, and its grant started
// its lease at some time after that attempt's Call, maybe long before the
// retry that learns the token was even sent. So the lease surely lasts
// until the least Call + lease of those attempts, not of the one answered.
// Only attempts sent before the answered one returned count: a later one
// cannot have made a grant that was already there. That includes attempts
// answered MOVED or TIMEOUT, since they too may have been queued or
// proposed before they were answered (the bound only gets weaker, never
// wrong).
type leaseBounds map[ownerKey][]attempt

// ownerKey names one owner's acquires of one key.
type ownerKey struct{ key, owner string }

// attempt is one acquire naming an owner.
type attempt struct {
	call   time.Duration
	minEnd time.Duration // the least Call + lease of this attempt and the ones sent before it
}

// newLeaseBounds groups h's acquires with an owner by (key, owner), each
// group in Call order with its running minimum.
func newLeaseBounds(h []Op) leaseBounds {
	b := make(leaseBounds)
	for i := range h {
		o := &h[i]
		if o.isAcquire() && o.Owner != "" {
			k := ownerKey{o.Key, o.Owner}
			b[k] = append(b[k], attempt{call: o.Call, minEnd: o.Call + leaseDur(o.LeaseMs)})
		}
	}
	for _, as := range b {
		slices.SortStableFunc(as, func(x, y attempt) int { return cmp.Compare(x.call, y.call) })
		for i := 1; i < len(as); i++ {
			as[i].minEnd = min(as[i].minEnd, as[i-1].minEnd)
		}
	}
	return b
}

// of is the time before which the lease of the grant the acquire o was
// answered with surely does not end. Without an owner only o can have made
// the grant: its own Call + lease.
func (b leaseBounds) of(o *Op) time.Duration {
	own := o.Call + leaseDur(o.LeaseMs)
	if o.Owner == "" {
		return own
	}
	as := b[ownerKey{o.Key, o.Owner}]
	// n: the attempts sent at or before o's Return, o itself among them.
	n, _ := slices.BinarySearchFunc(as, o.Return, func(a attempt, t time.Duration) int {
		if a.call <= t {
			return -1
		}
		return 1
	})
	if n == 0 {
		return own
	}
	return min(own, as[n-1].minEnd)
}

// leaseDur converts a lease in ms to a duration.
func leaseDur(ms uint32) time.Duration {
	return time.Duration(ms) * time.Millisecond
}

// visualize writes kc's visualization into dir (a new temporary directory
// when dir is "") and returns its path.
func visualize(dir string, i int, kc *keyCheck) (string, error) {
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "baton-chaos-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("porcupine-%02d-%s.html", i, fileSafe(kc.key)))
	if err := porcupine.VisualizePath(lockModel, kc.info, path); err != nil {
		return "", err
	}
	return path, nil
}

// fileSafe turns a key (any bytes but space and control bytes) into a
// short file name part.
func fileSafe(key string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, key)
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// longestPrefix is the length of the longest partial linearization
// porcupine found: how far into the key's history it got.
func longestPrefix(info porcupine.LinearizationInfo) int {
	n := 0
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			n = max(n, len(lin))
		}
	}
	return n
}

// sortedKeys returns m's keys in order, so that reports are deterministic.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
