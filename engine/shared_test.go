package engine

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// Shared holds (protocol 1.4, S) on one serving shard, driven as the
// other shard tests are: requests in, proposals taken and applied to the
// real table, answers read back.

// sharedShard is a serving shard whose cluster version enables shared
// holds.
func sharedShard(t *testing.T) *shard {
	t.Helper()
	s := testShard(t)
	raiseTo(s, sm.LevelShared)
	return s
}

// raiseTo applies a raise of the cluster version to level, as the
// version's leader would propose it.
func raiseTo(s *shard, level uint64) {
	var b sm.Batch
	applyEntry(s, b.Seal(sm.Header{Proposer: 7, Raise: true, Level: level}))
}

// sharedStep is one step of a scenario: a request on a named connection
// (line), or the next proposal taken and applied (apply: the codes the
// table must answer, in order; ops: the ops the proposal must hold, in
// order, "G" Grant, "R" Release, "X" Expire, "K" Extend), or timers fired
// after a sleep (sleep). want: every connection's answers after the step,
// by name, as regular expressions; "$tN" stands for the N-th token granted
// in the scenario. A connection not named must have been sent nothing.
type sharedStep struct {
	on, line string
	apply    []sm.Code
	ops      string
	sleep    time.Duration
	want     map[string][]string
}

var opLetters = map[sm.Op]string{sm.OpGrant: "G", sm.OpRelease: "R", sm.OpExpire: "X", sm.OpExtend: "K"}

func runShared(t *testing.T, s *shard, steps []sharedStep) {
	t.Helper()
	conns := map[string]*connState{}
	var toks []uint64
	for i, st := range steps {
		switch {
		case st.line != "":
			if conns[st.on] == nil {
				conns[st.on] = connTo(s)
			}
			line := st.line
			for n := len(toks); n >= 1; n-- {
				line = strings.ReplaceAll(line, fmt.Sprintf("$t%d", n), fmt.Sprint(toks[n-1]))
			}
			request(t, s, conns[st.on], line)
		case st.sleep > 0:
			time.Sleep(st.sleep)
			s.fireTimers(monoNow())
		case st.apply != nil:
			p, cmds := take(t, s)
			var ops strings.Builder
			for _, c := range cmds {
				ops.WriteString(opLetters[c.Op])
			}
			if st.ops != "" && ops.String() != st.ops {
				t.Fatalf("step %d: proposed %s (%+v), want %s", i, ops.String(), cmds, st.ops)
			}
			want := make([]sm.Result, len(st.apply))
			for j, c := range st.apply {
				want[j] = sm.Result{Code: c}
			}
			apply(s, p, cmds, want...)
			for _, r := range tableOf(s).obs.last {
				if r.Code == sm.Granted {
					toks = append(toks, r.Token)
				}
			}
		}
		for name, cs := range conns {
			got := answers(cs)
			want := st.want[name]
			if len(got) != len(want) {
				t.Fatalf("step %d (%s %s): %s got %q, want %q", i, st.on, st.line, name, got, want)
			}
			for j, w := range want {
				for n := len(toks); n >= 1; n-- {
					w = strings.ReplaceAll(w, fmt.Sprintf("$t%d", n), fmt.Sprint(toks[n-1]))
				}
				if !regexp.MustCompile("^" + w + "$").MatchString(got[j]) {
					t.Fatalf("step %d: %s line %d: %q, want %q (tokens %v)", i, name, j, got[j], w, toks)
				}
			}
		}
	}
}

func TestSharedHolds(t *testing.T) {
	G, R, X, K := sm.Granted, sm.Released, sm.Expired, sm.Extended
	rejected := sm.GrantRejected
	tests := []struct {
		name  string
		steps []sharedStep
	}{
		{"a semaphore of 2: two in one commit, the third waits for a release, which hands over in the same commit", []sharedStep{
			{on: "a", line: "S k 2 10000 5000"},
			{on: "b", line: "S k 2 10000 5000"},
			{on: "c", line: "S k 2 10000 5000"},
			{apply: []sm.Code{G, G}, ops: "GG", want: map[string][]string{"a": {`S k OK $t1`}, "b": {`S k OK $t2`}}},
			{on: "q", line: "Q k", want: map[string][]string{"q": {`Q k SHARED 2 2`}}},
			{on: "b", line: "R k $t2"},
			{apply: []sm.Code{R, G}, ops: "RG", want: map[string][]string{"b": {`R k OK`}, "c": {`S k OK $t3`}}},
			{on: "q", line: "Q k", want: map[string][]string{"q": {`Q k SHARED 2 2`}}},
		}},
		{"S with room but an A waiting before it: it waits (FIFO)", []sharedStep{
			{on: "r1", line: "S k 3 10000 5000"},
			{apply: []sm.Code{G}, want: map[string][]string{"r1": {`S k OK $t1`}}},
			{on: "w", line: "A k 10000 5000"},
			{on: "r2", line: "S k 3 10000 5000"},
			{on: "r3", line: "S k 3 10000 -1", want: map[string][]string{"r3": {`S k TIMEOUT`}}},
			{on: "r1", line: "R k $t1"},
			{apply: []sm.Code{R, G}, ops: "RG", want: map[string][]string{"r1": {`R k OK`}, "w": {`A k OK $t2`}}},
			{on: "w", line: "R k $t2"},
			{apply: []sm.Code{R, G}, ops: "RG", want: map[string][]string{"w": {`R k OK`}, "r2": {`S k OK $t3`}}},
		}},
		{"a writer's release lets every reader at the head in, in the same commit", []sharedStep{
			{on: "w", line: "A k 10000 0"},
			{apply: []sm.Code{G}, want: map[string][]string{"w": {`A k OK $t1`}}},
			{on: "r1", line: "S k 1000 10000 5000"},
			{on: "r2", line: "S k 1000 10000 5000"},
			{on: "r3", line: "S k 1000 10000 5000"},
			{on: "w2", line: "A k 10000 5000"},
			{on: "w", line: "R k $t1"},
			{apply: []sm.Code{R, G, G, G}, ops: "RGGG", want: map[string][]string{"w": {`R k OK`}, "r1": {`S k OK $t2`}, "r2": {`S k OK $t3`}, "r3": {`S k OK $t4`}}},
			{on: "q", line: "Q k", want: map[string][]string{"q": {`Q k SHARED 3 1000`}}},
		}},
		{"permits differ from the holders' or the waiters': ERR badrequest, nothing proposed", []sharedStep{
			{on: "a", line: "S k 2 10000 0"},
			{apply: []sm.Code{G}, want: map[string][]string{"a": {`S k OK $t1`}}},
			{on: "b", line: "S k 3 10000 0", want: map[string][]string{"b": {`S k ERR badrequest permits 3 differ from the key's 2`}}},
			{on: "a", line: "R k"},
			{apply: []sm.Code{R}, want: map[string][]string{"a": {`R k OK`}}},
			{on: "w", line: "A k 10000 0"},
			{apply: []sm.Code{G}, want: map[string][]string{"w": {`A k OK $t2`}}},
			{on: "c", line: "S k 5 10000 5000"},
			{on: "b", line: "S k 3 10000 5000", want: map[string][]string{"b": {`S k ERR badrequest permits 3 differ from the key's 5`}}},
		}},
		{"a refused S waits for the earlier S of its connection (answers to one op and key keep their order)", []sharedStep{
			{on: "a", line: "S k 2 10000 0"},
			{on: "a", line: "S k 2 10000 0"},
			{apply: []sm.Code{G, G}, want: map[string][]string{"a": {`S k OK $t1`, `S k OK $t2`}}},
			{on: "a", line: "S k 2 10000 5000"},
			{on: "a", line: "S k 3 10000 0"},
			{on: "b", line: "R k $t1"},
			{apply: []sm.Code{R, G}, want: map[string][]string{"b": {`R k OK`}, "a": {`S k OK $t3`, `S k ERR badrequest permits 3 differ from the key's 2`}}},
		}},
		{"each grant its own lease: one runs out, the other holds", []sharedStep{
			{on: "a", line: "S k 2 1 0"},
			{on: "b", line: "S k 2 60000 0"},
			{apply: []sm.Code{G, G}, want: map[string][]string{"a": {`S k OK $t1`}, "b": {`S k OK $t2`}}},
			{sleep: 2 * time.Millisecond},
			{apply: []sm.Code{X}, ops: "X"},
			{on: "q", line: "Q k", want: map[string][]string{"q": {`Q k SHARED 1 2`}}},
			{on: "a", line: "K k $t1 1000"},
			{apply: []sm.Code{sm.NotHeld}, want: map[string][]string{"a": {`K k NOTHELD`}}},
			{on: "b", line: "K k $t2 1000"},
			{apply: []sm.Code{K}, want: map[string][]string{"b": {`K k OK`}}},
		}},
		{"R without a token releases every holder, and the head's Grant rides along", []sharedStep{
			{on: "a", line: "S k 2 10000 0"},
			{on: "b", line: "S k 2 10000 0"},
			{apply: []sm.Code{G, G}, want: map[string][]string{"a": {`S k OK $t1`}, "b": {`S k OK $t2`}}},
			{on: "w", line: "A k 10000 5000"},
			{on: "x", line: "R k"},
			{apply: []sm.Code{R, G}, ops: "RG", want: map[string][]string{"x": {`R k OK`}, "w": {`A k OK $t3`}}},
		}},
		{"owners: a retry gets its grant back; the other kind is ERR badrequest", []sharedStep{
			{on: "a", line: "S k 2 10000 0 o1"},
			{apply: []sm.Code{G}, want: map[string][]string{"a": {`S k OK $t1`}}},
			{on: "b", line: "S k 2 10000 0 o1"},
			{apply: []sm.Code{sm.Regranted}, want: map[string][]string{"b": {`S k OK $t1`}}},
			{on: "b", line: "A k 10000 0 o1"},
			{apply: []sm.Code{sm.KindMismatch}, want: map[string][]string{"b": {`A k ERR badrequest this owner holds a shared grant of the key: release it before an exclusive acquire`}}},
			{on: "c", line: "A k 10000 5000 o2"},
			{on: "a", line: "R k $t1"},
			{apply: []sm.Code{R, G}, want: map[string][]string{"a": {`R k OK`}, "c": {`A k OK $t2`}}},
			{on: "c", line: "S k 2 10000 0 o2"},
			{apply: []sm.Code{sm.KindMismatch}, want: map[string][]string{"c": {`S k ERR badrequest this owner holds the key exclusively: release it before a shared acquire`}}},
		}},
		{"a grant that lands after its wait ran out is released, and the next gets the room", []sharedStep{
			{on: "a", line: "S k 1 10000 1"},
			{on: "b", line: "S k 1 10000 5000"},
			{sleep: 2 * time.Millisecond, want: map[string][]string{"a": {`S k TIMEOUT`}}},
			{apply: []sm.Code{G}, ops: "G"},
			{apply: []sm.Code{R, G}, ops: "RG", want: map[string][]string{"b": {`S k OK $t2`}}},
		}},
		{"a rejected Grant keeps its place", []sharedStep{
			{on: "a", line: "S k 1 10000 0"},
			{apply: []sm.Code{G}, want: map[string][]string{"a": {`S k OK $t1`}}},
			{on: "b", line: "S k 1 10000 5000"},
			{on: "x", line: "R k 999"}, // no such grant: NOTHELD, and b's Grant rides along, rejected
			{apply: []sm.Code{sm.NotHeld, rejected}, ops: "RG", want: map[string][]string{"x": {`R k NOTHELD`}}},
			{on: "a", line: "R k $t1"},
			{apply: []sm.Code{R, G}, want: map[string][]string{"a": {`R k OK`}, "b": {`S k OK $t2`}}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runShared(t, sharedShard(t), tc.steps) })
	}
}

// TestSharedNeedsClusterVersion: below cluster version 4 an S is answered
// ERR unavailable with the reason, and nothing is proposed.
func TestSharedNeedsClusterVersion(t *testing.T) {
	s := testShard(t)
	raiseTo(s, sm.LevelMembership)
	cs := connTo(s)
	request(t, s, cs, "S k 2 10000 0")
	if got := answers(cs); len(got) != 1 || got[0] != "S k ERR unavailable "+sharedNeedsVersion(sm.LevelMembership) {
		t.Fatalf("answered %q", got)
	}
	nothingProposed(t, s, "for an S below cluster version 4")
}

// TestSharedExpireHeldBackByItsExtend: a shared grant's Extend in flight
// holds back that grant's Expire only.
func TestSharedExpireHeldBackByItsExtend(t *testing.T) {
	s := sharedShard(t)
	a, b := connTo(s), connTo(s)
	request(t, s, a, "S k 2 1 0")
	request(t, s, b, "S k 2 1 0")
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted}, sm.Result{Code: sm.Granted})
	var ta, tb uint64
	fmt.Sscanf(answers(a)[0], "S k OK %d", &ta)
	fmt.Sscanf(answers(b)[0], "S k OK %d", &tb)
	request(t, s, a, fmt.Sprintf("K k %d 60000", ta))
	ext, extCmds := take(t, s)
	time.Sleep(2 * time.Millisecond)
	s.fireTimers(monoNow())
	exp, expCmds := take(t, s)
	if len(expCmds) != 1 || expCmds[0].Op != sm.OpExpire || expCmds[0].Token != tb {
		t.Fatalf("proposed %+v, want only the Expire of %d", expCmds, tb)
	}
	apply(s, ext, extCmds, sm.Result{Code: sm.Extended})
	apply(s, exp, expCmds, sm.Result{Code: sm.Expired})
	s.fireTimers(monoNow())
	nothingProposed(t, s, "under the extended grant's new lease")
	if h, _, _ := sharedHolders(s, "k"); h != 1 {
		t.Fatalf("%d holders, want the extended one", h)
	}
}

// TestSharedLeaseWithoutKeyState: a shared grant's lease runs out after
// its key's working state was dropped (pushed out of the parked ring):
// the Expire is of that grant, and the other holder stays.
func TestSharedLeaseWithoutKeyState(t *testing.T) {
	s := sharedShard(t)
	a, b := connTo(s), connTo(s)
	request(t, s, a, "S k 2 60000 0")
	request(t, s, b, "S k 2 1 0")
	p, cmds := take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Granted}, sm.Result{Code: sm.Granted})
	var tb uint64
	answers(a)
	fmt.Sscanf(answers(b)[0], "S k OK %d", &tb)
	s.mu.Lock()
	delete(s.keys, "k")
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	s.fireTimers(monoNow())
	exp, expCmds := take(t, s)
	if len(expCmds) != 1 || expCmds[0].Op != sm.OpExpire || expCmds[0].Token != tb {
		t.Fatalf("proposed %+v, want the Expire of %d", expCmds, tb)
	}
	apply(s, exp, expCmds, sm.Result{Code: sm.Expired})
	if h, p, ok := sharedHolders(s, "k"); !ok || h != 1 || p != 2 {
		t.Fatalf("held by %d of %d (shared %v), want 1 of 2", h, p, ok)
	}
}

// sharedHolders is what holds key in s's view: its shared holders and
// permits, ok false when the key is not held by shared grants.
func sharedHolders(s *shard, key string) (holders, permits uint32, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, held := s.table.Find([]byte(key))
	if !held {
		return 0, 0, false
	}
	return s.table.Shared(slot)
}

// TestWatchShared: a watch of a key held by shared grants, commit by
// commit (the lines of TestWatch's exclusive holders, with SHARED).
func TestWatchShared(t *testing.T) {
	sg := func(permits uint32, owner string) sm.Command {
		c := grant("k", 10000, owner)
		c.Permits = permits
		return c
	}
	tests := []struct {
		name  string
		steps []watchStep
	}{
		{"two grants in one commit: one line", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{cmds: []sm.Command{sg(3, ""), sg(3, "")}, want: []string{`W k SHARED 2 3`}},
			{cmds: []sm.Command{release("k", 0)}, want: []string{`W k FREE`}},
		}},
		{"grants ended in their own commit still show", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{cmds: []sm.Command{sg(3, "a"), sg(3, "b"), release("k", 0)}, want: []string{`W k SHARED 2 3`, `W k FREE`}},
		}},
		{"a release of an older holder hides nothing", []watchStep{
			{cmds: []sm.Command{sg(2, "a")}},
			{line: "W k", want: []string{`W k SHARED 1 2`}},
			{cmds: []sm.Command{sg(2, "b"), release("k", 0), grant("k", 100, "w")}, want: []string{`W k SHARED 2 2`, `W k HELD $tok3 100 w`}},
		}},
		{"shared after exclusive in one commit: the exclusive grant shows", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{cmds: []sm.Command{grant("k", 100, "w"), release("k", 0), sg(2, "")}, want: []string{`W k HELD $tok1 100 w`, `W k SHARED 1 2`}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sharedShard(t)
			cs := connTo(s)
			var toks []uint64
			for i, st := range tt.steps {
				if st.line != "" {
					request(t, s, cs, st.line)
				}
				if st.cmds != nil {
					for _, res := range applyCollect(s, entryOf(7, uint64(i+1), false, st.cmds...)) {
						if res.Code == sm.Granted {
							toks = append(toks, res.Token)
						}
					}
				}
				got := answers(cs)
				if len(got) != len(st.want) {
					t.Fatalf("step %d: got %q, want %q", i, got, st.want)
				}
				for j, w := range st.want {
					for n := len(toks); n >= 1; n-- {
						w = strings.ReplaceAll(w, fmt.Sprintf("$tok%d", n), fmt.Sprint(toks[n-1]))
					}
					if !regexp.MustCompile("^" + w + "$").MatchString(got[j]) {
						t.Fatalf("step %d, line %d: %q, want %q", i, j, got[j], w)
					}
				}
			}
		})
	}
}
