package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/baton-dev/baton/codec"
)

// This file is a second opinion for a key porcupine could not decide in
// time. A sweep in plain Call order would not do: an acquire that waits is
// sent before the release that frees the key for it, so it flags every
// hand-off to a waiter. Instead the sweep runs through the history's calls
// and returns in time order, with the set of configurations the key may be
// in: a model state and which of the ops in flight it has linearized. At
// an op's return, every configuration is first closed under linearizing
// ops in flight (in any order), and only those in which the returning op
// is linearized survive. That is exact, the algorithm of "just in time"
// linearizability checkers, with two liberties that make it cheap:
//
//   - An op of unknown outcome (no answer, or ERR) may take effect at any
//     time after its Call, so porcupine keeps it in flight to the end, and
//     its search may grow with every such op in flight, as they pile up in
//     a long run with faults. The sweep instead lets such an
//     op take effect at any time, any number of times, and forgets whether
//     it did. That allows more than the real history (an extend applied
//     twice), never less, so the sweep never flags a history porcupine
//     would pass; when it finds a dead end, so would porcupine.
//   - An op that changes nothing now and could allow nothing more later
//     (an acquire answered TIMEOUT; a NOTHELD of a token that can no
//     longer hold the key; a query that shows what the model knows) is
//     linearized at once, and a floor that is behind the event at hand
//     (every op left returns after it) is forgotten. Both only merge
//     configurations of which one allows all that the other does; without
//     them, every query in flight during a leaderless spell would double
//     the configurations.
//
// Its result is a hint with a place: the op at which no configuration is
// left, which the visualization of a long history could not show anyway.

// Bounds of a sweep.
const (
	// sweepMaxConfigs bounds the configurations of one closure: past it
	// the sweep gives up, as porcupine did.
	sweepMaxConfigs = 1 << 18
	// sweepBudget bounds a sweep's time. It is meant to be cheap next to
	// porcupine's budget: a sweep that cannot finish in it gives up.
	sweepBudget = 30 * time.Second
	// sweepShowStates is how many of the configurations before a dead end
	// the report shows.
	sweepShowStates = 3
)

// sweepConfig is one configuration of a sweep: a model state and the ops
// in flight it has linearized, by slot.
type sweepConfig struct {
	s    lockState
	done uint64
}

// sweepOp is one op of a key's porcupine history, as the sweep uses it.
type sweepOp struct {
	in  lockInput
	out lockOutput
}

// sweepResult is what a sweep found.
type sweepResult struct {
	// ok: every op found a configuration.
	ok bool
	// gaveUp says why the sweep stopped short, when it did.
	gaveUp string
	// at is the op with no configuration left (or where the sweep gave
	// up), its index in the history; -1 when ok.
	at int
	// inFlight are the other known ops in flight then, by index.
	inFlight []int
	// before describes a few of the configurations' states just before
	// the dead end.
	before []string
}

// sweep checks one key's porcupine history (see the file comment) within
// budget.
func sweep(ops []porcupine.Operation, budget time.Duration) sweepResult {
	deadline := time.Now().Add(budget)
	type event struct {
		at  int64
		ret bool // its return; else its call
		op  int  // index into ops
	}
	sops := make([]sweepOp, len(ops))
	events := make([]event, 0, 2*len(ops))
	for i, o := range ops {
		in, out := o.Input.(lockInput), o.Output.(lockOutput)
		sops[i] = sweepOp{in: in, out: out}
		events = append(events, event{at: o.Call, op: i})
		if !in.unknown {
			events = append(events, event{at: o.Return, ret: true, op: i})
		}
	}
	// Calls before returns at one instant, as porcupine orders them: the
	// two ops are then concurrent, which allows more, never less.
	slices.SortStableFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case !a.ret && b.ret:
			return -1
		case a.ret && !b.ret:
			return 1
		}
		return 0
	})

	var (
		frontier = map[sweepConfig]bool{{}: true}
		slots    [64]int          // the op in each slot; valid where used is set
		used     uint64           // the slots in use
		slotOf   = map[int]uint{} // op -> slot, while in flight
		ambient  = map[uint64][]int{}
	)
	inFlight := func(except int) []int {
		var idx []int
		for b := range 64 {
			if used&(1<<b) != 0 && slots[b] != except {
				idx = append(idx, slots[b])
			}
		}
		slices.Sort(idx)
		return idx
	}
	deadEnd := func(op int, gaveUp string) sweepResult {
		r := sweepResult{at: op, gaveUp: gaveUp, inFlight: inFlight(op)}
		// Sorted, so that a report is the same every time.
		var states []string
		for c := range frontier {
			states = append(states, describeState(c.s))
		}
		slices.Sort(states)
		states = slices.Compact(states)
		r.before = states[:min(len(states), sweepShowStates)]
		return r
	}

	// now is the time of the event at hand: every op still to be
	// linearized returns at or after it.
	var now int64
	// settle makes c canonical: every op in flight that surely changes
	// nothing from c on is linearized (see the file comment), and a floor
	// no later than now, which no op left can be stopped by, is 0, so that
	// states differing only in such a floor are one.
	settle := func(c sweepConfig) sweepConfig {
		if c.s.floor <= now {
			c.s.floor = 0
		}
		for b := range 64 {
			bit := uint64(1) << b
			if used&bit == 0 || c.done&bit != 0 {
				continue
			}
			if o := &sops[slots[b]]; settledNoop(c.s, o.in, o.out) {
				c.done |= bit
			}
		}
		return c
	}
	// closure is every configuration reachable from the frontier by
	// linearizing ops in flight, and ops of unknown outcome, or ok false
	// when there are too many.
	closure := func() (map[sweepConfig]bool, bool) {
		seen := make(map[sweepConfig]bool, len(frontier))
		var work []sweepConfig
		add := func(c sweepConfig) {
			c = settle(c)
			if !seen[c] {
				seen[c] = true
				work = append(work, c)
			}
		}
		for c := range frontier {
			add(c)
		}
		for len(work) > 0 && len(seen) <= sweepMaxConfigs {
			c := work[len(work)-1]
			work = work[:len(work)-1]
			for b := range 64 {
				bit := uint64(1) << b
				if used&bit == 0 || c.done&bit != 0 {
					continue
				}
				o := &sops[slots[b]]
				for _, ns := range step(c.s, o.in, o.out) {
					add(sweepConfig{ns.(lockState), c.done | bit})
				}
			}
			// An unknown release or extend can change something only
			// for the grant it names, if that holds the key, known or
			// phantom; one without a token for whoever holds it. The
			// others are left out, as they could only leave c as it is.
			if c.s.holder == 0 && c.s.ghost == 0 {
				continue
			}
			for i, t := range [...]uint64{0, c.s.holder, c.s.ghost} {
				if i > 0 && t == 0 {
					continue // no holder, or no phantom: not the token-0 list again
				}
				for _, u := range ambient[t] {
					o := &sops[u]
					for _, ns := range step(c.s, o.in, o.out) {
						add(sweepConfig{ns.(lockState), c.done})
					}
				}
			}
		}
		return seen, len(seen) <= sweepMaxConfigs
	}

	for n, e := range events {
		if n%256 == 0 && time.Now().After(deadline) {
			return deadEnd(e.op, fmt.Sprintf("it ran out of its %v budget", budget))
		}
		o := &sops[e.op]
		now = e.at
		switch {
		case !e.ret && o.in.unknown:
			// Unknown releases of one token all do the same, and may
			// each take effect any time now: one stands for all.
			dup := o.in.op == codec.OpRelease && slices.ContainsFunc(ambient[o.in.token], func(u int) bool { return sops[u].in.op == codec.OpRelease })
			if !dup {
				ambient[o.in.token] = append(ambient[o.in.token], e.op)
			}
		case !e.ret:
			if used == ^uint64(0) {
				return deadEnd(e.op, "more than 64 ops were in flight at once")
			}
			b := uint(0)
			for used&(1<<b) != 0 {
				b++
			}
			used |= 1 << b
			slots[b] = e.op
			slotOf[e.op] = b
		default:
			b := slotOf[e.op]
			bit := uint64(1) << b
			all, ok := closure()
			if !ok {
				return deadEnd(e.op, fmt.Sprintf("more than %d configurations", sweepMaxConfigs))
			}
			next := make(map[sweepConfig]bool)
			for c := range all {
				if c.done&bit != 0 {
					next[sweepConfig{c.s, c.done &^ bit}] = true
				}
			}
			if len(next) == 0 {
				return deadEnd(e.op, "")
			}
			frontier = next
			used &^= bit
			delete(slotOf, e.op)
		}
	}
	return sweepResult{ok: true, at: -1}
}

// settledNoop reports whether the op (in, out) changes nothing in state s,
// and linearized later could allow nothing more, so that linearizing it at
// once loses nothing: an acquire answered without a grant; a NOTHELD of a
// token that is neither the holder nor the phantom, and never can be
// again, as every later grant or phantom has a token above maxToken; a
// query that shows what the model knows. It must be allowed now (its
// Return not before floor, which only rises).
func settledNoop(s lockState, in lockInput, out lockOutput) bool {
	if in.unknown || in.ret < s.floor {
		return false
	}
	switch in.op {
	case codec.OpAcquire:
		return out.status != codec.StatusOK
	case codec.OpRelease, codec.OpExtend:
		return out.status == codec.StatusNotHeld && in.token != 0 && in.token <= s.maxToken &&
			in.token != s.holder && in.token != s.ghost
	case codec.OpQuery:
		switch {
		case out.status == codec.StatusHeld:
			// The known holder, with its owner: later the token can only
			// be the holder again (it is not above maxToken, nor the
			// phantom, which is 0 while there is a holder), and the
			// query changes nothing then either.
			return s.holder != 0 && out.token == s.holder && out.owner == s.holderOwner
		case out.status == codec.StatusFree:
			// Nothing is known to hold the key. Later, a FREE could also
			// end a holder's lease or forget a phantom; but forgetting
			// only forbids, and an op that needs a lease over could have
			// ended it itself: after this one did, its Return would have
			// to be past that end anyway (floor).
			return s.holder == 0 && s.ghost == 0
		}
	}
	return false
}

// describe renders r for the inconclusive line of its key; ops is the
// history the sweep ran over.
func (r sweepResult) describe(ops []porcupine.Operation) string {
	describe := func(i int) string {
		return describeOperation(ops[i].Input, ops[i].Output)
	}
	switch {
	case r.ok:
		return "a sweep in time order found a linearization of every op (it lets ops of unknown outcome take effect any number of times, so this is a hint, not a pass)"
	case r.gaveUp != "":
		return fmt.Sprintf("a sweep in time order gave up at op %d (%s), %s", r.at, describe(r.at), r.gaveUp)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "a sweep in time order, which never flags what porcupine would pass, found no linearization past op %d of %d: %s", r.at, len(ops), describe(r.at))
	if len(r.inFlight) > 0 {
		parts := make([]string, len(r.inFlight))
		for i, j := range r.inFlight {
			parts[i] = describe(j)
		}
		fmt.Fprintf(&b, "; in flight with it: %s", strings.Join(parts, "; "))
	}
	if len(r.before) > 0 {
		fmt.Fprintf(&b, "; the key could be in: %s", strings.Join(r.before, " | "))
	}
	return b.String()
}
