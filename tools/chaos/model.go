package chaos

import (
	"math"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/baton-dev/baton/codec"
)

// This file is the sequential specification of one key of the lock table
// that porcupine checks each key's history against. The package doc explains
// why it bounds time the way it does; in short, the model never assumes a
// lease ended unless the op that sees it end returned after the lease's
// earliest possible end, and remembers that time as a floor for every later
// op.

// lockState is the model's state of one key. It is a small comparable
// value, so that porcupine can compare and cache states cheaply. All times
// are nanoseconds on the recorder's clock. An owner is "" when the grant
// has none, and whenever its token is 0, so that two states that mean the
// same are equal.
type lockState struct {
	// holder is the token of the grant the model knows holds the key; 0
	// when it knows of none (a phantom may still hold it).
	holder uint64
	// holderOwner is the owner the holder's acquire named: an acquire with
	// it is answered with holder's token, and a query shows it.
	holderOwner string
	// expiryLB: the holder's lease surely does not end before this time.
	expiryLB int64
	// maxToken is the largest token observed so far: no grant after it may
	// have a token that is not larger.
	maxToken uint64
	// ghost is the token of a phantom holder last seen by a query, which may
	// be seen again while it lasts; 0 when none. ghost != 0 implies
	// holder == 0.
	ghost uint64
	// ghostOwner is the owner the query showed for ghost.
	ghostOwner string
	// floor is a lower bound on the current time in the linearization: some
	// earlier op saw a lease end, so every later op returned after it.
	floor int64
}

// lockInput is an op as the model sees it: the request and its interval.
type lockInput struct {
	op      byte
	token   uint64 // R (0: whoever holds), K
	leaseMs uint32 // A, K
	waitMs  int64  // A
	owner   string // A: "" when none
	// leaseLB, for an A: the lease of the grant it is answered with surely
	// does not end before this. With an owner, the grant may have been made
	// by any attempt of the same acquire, so it is the least Call + lease
	// among the acquires of this key and owner sent before this one
	// returned (leaseBounds); without, call + leaseMs.
	leaseLB int64
	call    int64  // ns
	ret     int64  // ns; math.MaxInt64 when the outcome is unknown
	unknown bool   // no answer or ERR: it may take effect, at any time after call
	conn    int    // for the visualization
	key     string // for the visualization
}

// lockOutput is the answer an op got. For an unknown op only code is set
// (the ERR code, or "" when no answer came), for the visualization.
type lockOutput struct {
	status    codec.Status
	token     uint64 // A OK, Q HELD
	remaining uint64 // Q HELD
	owner     string // Q HELD: the owner shown, "" when none
	code      string
}

// lockModel is the porcupine model of one key.
var lockModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{lockState{}} },
	Step: func(state, input, output any) []any {
		return step(state.(lockState), input.(lockInput), output.(lockOutput))
	},
	Hash:              hashState,
	DescribeOperation: describeOperation,
	DescribeState:     describeState,
}).ToModel()

// step returns every state the key may be in after op in (answered out) is
// linearized in state s; none when it cannot be.
func step(s lockState, in lockInput, out lockOutput) []any {
	if in.ret < s.floor {
		// An earlier op saw a lease end, so it was linearized at or after
		// floor; this op returned before that, so it cannot come after it.
		return nil
	}
	switch in.op {
	case codec.OpAcquire:
		return stepAcquire(s, in, out)
	case codec.OpRelease:
		if in.unknown {
			e, ok := releaseOK(s, in)
			return withEffect(s, e, ok)
		}
		if out.status == codec.StatusOK {
			return one(releaseOK(s, in))
		}
		return one(notHeld(s, in))
	case codec.OpExtend:
		if in.unknown {
			e, ok := extendOK(s, in)
			return withEffect(s, e, ok)
		}
		if out.status == codec.StatusOK {
			return one(extendOK(s, in))
		}
		return one(notHeld(s, in))
	case codec.OpQuery:
		return stepQuery(s, in, out)
	}
	return nil
}

// stepAcquire: an OK is a new grant, which must find the key free and
// bring a new, larger token, or, for an acquire with an owner, the grant of
// that owner that holds the key: a retry, or one of several acquires of the
// owner that waited together. A TIMEOUT is always possible (a phantom may
// hold the key) and an unknown acquire changes nothing the model can see:
// at most it made a phantom, or was a retry, which changes nothing.
//
// The three cases exclude each other (a new token is above maxToken, holder
// and ghost are not, and ghost != 0 only without a holder), so an OK leads
// to one state at most.
func stepAcquire(s lockState, in lockInput, out lockOutput) []any {
	if in.unknown || out.status != codec.StatusOK {
		return []any{s}
	}
	t := out.token
	switch {
	case in.owner != "" && t == s.holder && in.owner == s.holderOwner:
		// The owner's grant holds the key: the server answers with its
		// token, and neither issues a new one nor touches the lease.
		return []any{s}
	case in.owner != "" && t == s.ghost && in.owner == s.ghostOwner:
		// The phantom a query saw was this owner's grant, made by an
		// attempt whose answer was lost; now its owner knows it. Only the
		// owner the query showed may get it: one grant has one owner.
		s.holder, s.holderOwner, s.expiryLB = t, in.owner, in.leaseLB
		s.ghost, s.ghostOwner = 0, ""
		return []any{s}
	}
	f, ok := free(s, in.ret)
	if !ok || t <= s.maxToken {
		return nil
	}
	f.holder, f.holderOwner, f.expiryLB, f.maxToken = t, in.owner, in.leaseLB, t
	f.ghost, f.ghostOwner = 0, ""
	return []any{f}
}

// stepQuery: FREE needs a key that may be free. HELD names the known holder,
// or a phantom: one seen before, or a new one with a larger token, which
// could only have been granted if the key may be free. The owner shown is
// the grant's: the holder's, or the one shown when the phantom was first
// seen.
func stepQuery(s lockState, in lockInput, out lockOutput) []any {
	if out.status == codec.StatusFree {
		f, ok := free(s, in.ret)
		if !ok {
			return nil
		}
		f.ghost, f.ghostOwner = 0, ""
		return []any{f}
	}
	x := out.token
	if x == s.holder {
		if out.owner != s.holderOwner {
			return nil
		}
		return []any{s}
	}
	f, ok := free(s, in.ret)
	switch {
	case !ok:
		return nil
	case x == s.ghost:
		if out.owner != s.ghostOwner {
			return nil
		}
	case x <= s.maxToken:
		return nil
	}
	f.holder, f.holderOwner = 0, ""
	f.ghost, f.ghostOwner, f.maxToken = x, out.owner, max(f.maxToken, x)
	return []any{f}
}

// releaseOK is the state after a release that succeeded, and whether one
// could. Without a token it releases whoever holds the key, a phantom if
// nobody known; with one, only that grant.
func releaseOK(s lockState, in lockInput) (lockState, bool) {
	switch {
	case in.token == 0:
		s.holder, s.holderOwner, s.ghost, s.ghostOwner = 0, "", 0, ""
	case in.token == s.holder:
		s.holder, s.holderOwner = 0, ""
	case in.token == s.ghost:
		s.ghost, s.ghostOwner = 0, ""
	default:
		return s, false
	}
	return s, true
}

// extendOK is the state after an extend that succeeded, and whether one
// could: the grant holds the key and its lease now surely lasts until L
// after the request was sent. A phantom the client learned of from a query
// becomes the known holder, with the owner the query showed.
func extendOK(s lockState, in lockInput) (lockState, bool) {
	switch {
	case in.token == s.holder:
	case in.token == s.ghost:
		s.holder, s.holderOwner, s.ghost, s.ghostOwner = s.ghost, s.ghostOwner, 0, ""
	default:
		return s, false
	}
	s.expiryLB = in.call + msNanos(in.leaseMs)
	return s, true
}

// notHeld is the state after a NOTHELD to a release or an extend, and
// whether it is possible. Without a token it means the key is free. With
// one it means that grant does not hold the key: true of any other grant,
// and of the known holder only once its lease may have ended.
func notHeld(s lockState, in lockInput) (lockState, bool) {
	switch {
	case in.token == 0:
		f, ok := free(s, in.ret)
		f.ghost, f.ghostOwner = 0, ""
		return f, ok
	case in.token != s.holder:
		if in.token == s.ghost {
			s.ghost, s.ghostOwner = 0, "" // the phantom is gone, and a token never comes back
		}
		return s, true
	}
	return expire(s, in.ret)
}

// free is the state in which the op returning at ret finds the key free,
// and whether it can: with no known holder (a phantom may vanish at any
// time), or once the holder's lease may have ended before ret.
func free(s lockState, ret int64) (lockState, bool) {
	if s.holder == 0 {
		return s, true
	}
	return expire(s, ret)
}

// expire takes the known holder away for an op returning at ret, if its
// lease may have ended by then. The op is then linearized at or after
// expiryLB, and so is everything after it: floor records that.
func expire(s lockState, ret int64) (lockState, bool) {
	if ret < s.expiryLB {
		return s, false
	}
	s.holder, s.holderOwner = 0, ""
	s.floor = max(s.floor, s.expiryLB)
	return s, true
}

// withEffect is the states after an op whose outcome is unknown: it did
// nothing, or (when it could) it did what an OK would have done.
func withEffect(s lockState, e lockState, ok bool) []any {
	if !ok || e == s {
		return []any{s}
	}
	return []any{s, e}
}

// one wraps a deterministic step's result.
func one(s lockState, ok bool) []any {
	if !ok {
		return nil
	}
	return []any{s}
}

// msNanos converts a lease in ms to nanoseconds.
func msNanos(ms uint32) int64 {
	return int64(ms) * int64(time.Millisecond)
}

// hashState mixes every field, so that porcupine's cache compares few
// states; equal states hash equally, as it requires.
func hashState(state any) uint64 {
	s := state.(lockState)
	h := uint64(14695981039346656037)
	for _, v := range [...]uint64{s.holder, uint64(s.expiryLB), s.maxToken, s.ghost, uint64(s.floor)} {
		h = (h ^ v) * 1099511628211
	}
	// The owners byte by byte, with a separator, so that ("ab", "") and
	// ("a", "b") differ.
	for _, o := range [...]string{s.holderOwner, s.ghostOwner} {
		for i := 0; i < len(o); i++ {
			h = (h ^ uint64(o[i])) * 1099511628211
		}
		h = (h ^ 0x100) * 1099511628211
	}
	return h
}

// describeOperation renders an op for the visualization: connection,
// request, its call and return in ms, and its answer.
func describeOperation(input, output any) string {
	in, out := input.(lockInput), output.(lockOutput)
	b := make([]byte, 0, 64)
	b = append(b, 'c')
	b = strconv.AppendInt(b, int64(in.conn), 10)
	b = append(b, ' ', in.op, ' ')
	b = append(b, in.key...)
	switch in.op {
	case codec.OpAcquire:
		b = append(b, " lease "...)
		b = strconv.AppendUint(b, uint64(in.leaseMs), 10)
		b = append(b, " wait "...)
		b = strconv.AppendInt(b, in.waitMs, 10)
		if in.owner != "" {
			b = append(b, " owner "...)
			b = append(b, in.owner...)
		}
	case codec.OpRelease:
		if in.token != 0 {
			b = append(b, ' ')
			b = strconv.AppendUint(b, in.token, 10)
		}
	case codec.OpExtend:
		b = append(b, ' ')
		b = strconv.AppendUint(b, in.token, 10)
		b = append(b, " lease "...)
		b = strconv.AppendUint(b, uint64(in.leaseMs), 10)
	}
	b = append(b, " @"...)
	b = appendMs(b, time.Duration(in.call))
	b = append(b, " -> "...)
	switch {
	case in.unknown && out.code != "":
		b = append(b, "unknown (ERR "...)
		b = append(b, out.code...)
		b = append(b, ')')
		return string(b)
	case in.unknown:
		return string(append(b, "unknown (no answer)"...))
	}
	b = append(b, out.status.String()...)
	if out.status == codec.StatusHeld || out.status == codec.StatusOK && in.op == codec.OpAcquire {
		b = append(b, ' ')
		b = strconv.AppendUint(b, out.token, 10)
	}
	if out.status == codec.StatusHeld {
		b = append(b, ' ')
		b = strconv.AppendUint(b, out.remaining, 10)
		b = append(b, "ms left"...)
		if out.owner != "" {
			b = append(b, ", owner "...)
			b = append(b, out.owner...)
		}
	}
	b = append(b, " @"...)
	b = appendMs(b, time.Duration(in.ret))
	return string(b)
}

// describeState renders a state for the visualization.
func describeState(state any) string {
	s := state.(lockState)
	b := make([]byte, 0, 64)
	if s.holder != 0 {
		b = append(b, "held by "...)
		b = strconv.AppendUint(b, s.holder, 10)
		b = appendOwner(b, s.holderOwner)
		b = append(b, " until >= "...)
		b = appendMs(b, time.Duration(s.expiryLB))
	} else {
		b = append(b, "no known holder"...)
	}
	if s.ghost != 0 {
		b = append(b, ", phantom "...)
		b = strconv.AppendUint(b, s.ghost, 10)
		b = appendOwner(b, s.ghostOwner)
	}
	b = append(b, ", max token "...)
	b = strconv.AppendUint(b, s.maxToken, 10)
	if s.floor > 0 {
		b = append(b, ", now >= "...)
		b = appendMs(b, time.Duration(s.floor))
	}
	return string(b)
}

// appendOwner appends " (owner O)" when the grant has an owner.
func appendOwner(b []byte, owner string) []byte {
	if owner == "" {
		return b
	}
	b = append(b, " (owner "...)
	b = append(b, owner...)
	return append(b, ')')
}

// unknownReturn is the return time the model gives an op whose outcome is
// unknown: it may take effect at any time after it was sent.
const unknownReturn = math.MaxInt64
