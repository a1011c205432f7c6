package statemachine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sharedTable is a table of shard 3 at cluster version LevelShared.
func sharedTable() *table {
	tb := newTable(3, 0, 0)
	tb.level = LevelShared
	return tb
}

// TestApplyShared is the contract of shared holds (PROTOCOL.md 1.4) as the
// table applies it: step by step, each command's result and the whole
// table after it; a command that is not Granted issues no token.
func TestApplyShared(t *testing.T) {
	const shard = 3
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	type step struct {
		cmd   Command
		want  Result
		after map[string]lockState // the whole table after the step (tableLocks)
	}
	// s is a shared grant of key as tableLocks names it.
	s := func(key string, permits uint32, seq uint64) string { return sharedName(key, permits, tok(seq)) }
	S := grantShared
	long := strings.Repeat("o", MaxOwnerLen)
	tests := []struct {
		name  string
		steps []step
	}{
		{"a semaphore of 2", []step{
			{S("a", 2, 100, ""), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 2, 1): {tok(1), 100, ""}}},
			{S("a", 2, 200, ""), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 2, 1): {tok(1), 100, ""}, s("a", 2, 2): {tok(2), 200, ""}}},
			{S("a", 2, 300, ""), Result{Code: GrantRejected}, map[string]lockState{s("a", 2, 1): {tok(1), 100, ""}, s("a", 2, 2): {tok(2), 200, ""}}},
			{release("a", tok(1)), Result{Code: Released, Token: tok(1)}, map[string]lockState{s("a", 2, 2): {tok(2), 200, ""}}},
			{S("a", 2, 400, ""), Result{Code: Granted, Token: tok(3)}, map[string]lockState{s("a", 2, 2): {tok(2), 200, ""}, s("a", 2, 3): {tok(3), 400, ""}}},
			// Other keys are untouched, and exclusive as ever.
			{grant("b", 5), Result{Code: Granted, Token: tok(4)}, map[string]lockState{s("a", 2, 2): {tok(2), 200, ""}, s("a", 2, 3): {tok(3), 400, ""}, "b": {tok(4), 5, ""}}},
			{release("a", tok(2)), Result{Code: Released, Token: tok(2)}, map[string]lockState{s("a", 2, 3): {tok(3), 400, ""}, "b": {tok(4), 5, ""}}},
			// The last holder leaves: the key is free, and may be granted
			// as either kind, with other permits.
			{release("a", tok(3)), Result{Code: Released, Token: tok(3)}, map[string]lockState{"b": {tok(4), 5, ""}}},
			{release("a", tok(3)), Result{Code: NotHeld}, map[string]lockState{"b": {tok(4), 5, ""}}},
			{S("a", 5, 6, ""), Result{Code: Granted, Token: tok(5)}, map[string]lockState{s("a", 5, 5): {tok(5), 6, ""}, "b": {tok(4), 5, ""}}},
			{release("a", tok(5)), Result{Code: Released, Token: tok(5)}, map[string]lockState{"b": {tok(4), 5, ""}}},
			{grant("a", 7), Result{Code: Granted, Token: tok(6)}, map[string]lockState{"a": {tok(6), 7, ""}, "b": {tok(4), 5, ""}}},
		}},
		{"one permit", []step{
			{S("a", 1, 1, ""), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 1, 1): {tok(1), 1, ""}}},
			{S("a", 1, 1, ""), Result{Code: GrantRejected}, map[string]lockState{s("a", 1, 1): {tok(1), 1, ""}}},
			{S("a", MaxPermits, 1, ""), Result{Code: PermitsMismatch}, map[string]lockState{s("a", 1, 1): {tok(1), 1, ""}}},
		}},
		{"permits mismatch", []step{
			{S("a", 2, 1, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "o1"}}},
			{S("a", 3, 1, ""), Result{Code: PermitsMismatch}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "o1"}}},
			{S("a", 1, 1, "o2"), Result{Code: PermitsMismatch}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "o1"}}},
			// The owner's retry comes first: it gets its grant back,
			// whatever permits it names.
			{S("a", 3, 9, "o1"), Result{Code: Regranted, Token: tok(1)}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "o1"}}},
			{S("a", 2, 1, "o2"), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "o1"}, s("a", 2, 2): {tok(2), 1, "o2"}}},
			// Full: a mismatch is still a mismatch.
			{S("a", 7, 1, "o3"), Result{Code: PermitsMismatch}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "o1"}, s("a", 2, 2): {tok(2), 1, "o2"}}},
			{S("a", 2, 1, "o3"), Result{Code: GrantRejected}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "o1"}, s("a", 2, 2): {tok(2), 1, "o2"}}},
		}},
		{"owner retries of shared grants", []step{
			{S("a", 3, 100, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 3, 1): {tok(1), 100, "o1"}}},
			// No token issued, the lease untouched.
			{S("a", 3, 999, "o1"), Result{Code: Regranted, Token: tok(1)}, map[string]lockState{s("a", 3, 1): {tok(1), 100, "o1"}}},
			{S("a", 3, 5, "o2"), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 3, 1): {tok(1), 100, "o1"}, s("a", 3, 2): {tok(2), 5, "o2"}}},
			{S("a", 3, 5, "o2"), Result{Code: Regranted, Token: tok(2)}, map[string]lockState{s("a", 3, 1): {tok(1), 100, "o1"}, s("a", 3, 2): {tok(2), 5, "o2"}}},
			// Without an owner, never a retry: a grant of its own.
			{S("a", 3, 6, ""), Result{Code: Granted, Token: tok(3)}, map[string]lockState{s("a", 3, 1): {tok(1), 100, "o1"}, s("a", 3, 2): {tok(2), 5, "o2"}, s("a", 3, 3): {tok(3), 6, ""}}},
			// Full, but the owner's retry still gets its grant back.
			{S("a", 3, 6, "o9"), Result{Code: GrantRejected}, map[string]lockState{s("a", 3, 1): {tok(1), 100, "o1"}, s("a", 3, 2): {tok(2), 5, "o2"}, s("a", 3, 3): {tok(3), 6, ""}}},
			{S("a", 3, 6, "o1"), Result{Code: Regranted, Token: tok(1)}, map[string]lockState{s("a", 3, 1): {tok(1), 100, "o1"}, s("a", 3, 2): {tok(2), 5, "o2"}, s("a", 3, 3): {tok(3), 6, ""}}},
			// An owner that left is no holder any more.
			{expire("a", tok(1)), Result{Code: Expired, Token: tok(1)}, map[string]lockState{s("a", 3, 2): {tok(2), 5, "o2"}, s("a", 3, 3): {tok(3), 6, ""}}},
			{S("a", 3, 7, "o1"), Result{Code: Granted, Token: tok(4)}, map[string]lockState{s("a", 3, 2): {tok(2), 5, "o2"}, s("a", 3, 3): {tok(3), 6, ""}, s("a", 3, 4): {tok(4), 7, "o1"}}},
			{S("b", 1, 1, long), Result{Code: Granted, Token: tok(5)}, map[string]lockState{s("a", 3, 2): {tok(2), 5, "o2"}, s("a", 3, 3): {tok(3), 6, ""}, s("a", 3, 4): {tok(4), 7, "o1"}, s("b", 1, 5): {tok(5), 1, long}}},
			{S("b", 1, 1, long), Result{Code: Regranted, Token: tok(5)}, map[string]lockState{s("a", 3, 2): {tok(2), 5, "o2"}, s("a", 3, 3): {tok(3), 6, ""}, s("a", 3, 4): {tok(4), 7, "o1"}, s("b", 1, 5): {tok(5), 1, long}}},
		}},
		{"a shared grant of an exclusively held key", []step{
			{grantBy("a", 10, "w"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 10, "w"}}},
			{S("a", 2, 1, "w"), Result{Code: KindMismatch}, map[string]lockState{"a": {tok(1), 10, "w"}}},
			{S("a", 2, 1, "r"), Result{Code: GrantRejected}, map[string]lockState{"a": {tok(1), 10, "w"}}},
			{S("a", 2, 1, ""), Result{Code: GrantRejected}, map[string]lockState{"a": {tok(1), 10, "w"}}},
			{grantBy("a", 10, "w"), Result{Code: Regranted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 10, "w"}}},
			{release("a", 0), Result{Code: Released, Token: tok(1)}, map[string]lockState{}},
			// Released: the same owner may take it shared.
			{S("a", 2, 1, "w"), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 2, 2): {tok(2), 1, "w"}}},
		}},
		{"an exclusive grant of a shared key", []step{
			{S("a", 2, 1, "r1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "r1"}}},
			{grantBy("a", 10, "r1"), Result{Code: KindMismatch}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "r1"}}},
			{grantBy("a", 10, "w"), Result{Code: GrantRejected}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "r1"}}},
			{grant("a", 10), Result{Code: GrantRejected}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "r1"}}},
			{S("a", 2, 1, ""), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "r1"}, s("a", 2, 2): {tok(2), 1, ""}}},
			{grant("a", 10), Result{Code: GrantRejected}, map[string]lockState{s("a", 2, 1): {tok(1), 1, "r1"}, s("a", 2, 2): {tok(2), 1, ""}}},
			{release("a", tok(1)), Result{Code: Released, Token: tok(1)}, map[string]lockState{s("a", 2, 2): {tok(2), 1, ""}}},
			{grantBy("a", 10, "r1"), Result{Code: GrantRejected}, map[string]lockState{s("a", 2, 2): {tok(2), 1, ""}}},
			{expire("a", tok(2)), Result{Code: Expired, Token: tok(2)}, map[string]lockState{}},
			{grantBy("a", 10, "r1"), Result{Code: Granted, Token: tok(3)}, map[string]lockState{"a": {tok(3), 10, "r1"}}},
		}},
		{"release with a token", []step{
			{S("a", 3, 1, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}}},
			{S("a", 3, 2, ""), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}}},
			{grant("x", 3), Result{Code: Granted, Token: tok(3)}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}, "x": {tok(3), 3, ""}}},
			// Another key's token, an unknown one: not held.
			{release("a", tok(3)), Result{Code: NotHeld}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}, "x": {tok(3), 3, ""}}},
			{release("x", tok(1)), Result{Code: NotHeld}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}, "x": {tok(3), 3, ""}}},
			{release("a", tok(9)), Result{Code: NotHeld}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}, "x": {tok(3), 3, ""}}},
			{release("a", tok(1)), Result{Code: Released, Token: tok(1)}, map[string]lockState{s("a", 3, 2): {tok(2), 2, ""}, "x": {tok(3), 3, ""}}},
			{release("a", tok(1)), Result{Code: NotHeld}, map[string]lockState{s("a", 3, 2): {tok(2), 2, ""}, "x": {tok(3), 3, ""}}},
		}},
		{"release without a token", []step{
			{S("a", 3, 1, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}}},
			{S("a", 3, 2, ""), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}}},
			{S("a", 3, 3, "o3"), Result{Code: Granted, Token: tok(3)}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}, s("a", 3, 3): {tok(3), 3, "o3"}}},
			{grant("x", 4), Result{Code: Granted, Token: tok(4)}, map[string]lockState{s("a", 3, 1): {tok(1), 1, "o1"}, s("a", 3, 2): {tok(2), 2, ""}, s("a", 3, 3): {tok(3), 3, "o3"}, "x": {tok(4), 4, ""}}},
			// Every holder of a, Token 0; x stays.
			{release("a", 0), Result{Code: Released}, map[string]lockState{"x": {tok(4), 4, ""}}},
			{release("a", 0), Result{Code: NotHeld}, map[string]lockState{"x": {tok(4), 4, ""}}},
			{S("a", 3, 5, "o1"), Result{Code: Granted, Token: tok(5)}, map[string]lockState{s("a", 3, 5): {tok(5), 5, "o1"}, "x": {tok(4), 4, ""}}},
			// One holder is every holder too.
			{release("a", 0), Result{Code: Released}, map[string]lockState{"x": {tok(4), 4, ""}}},
		}},
		{"extend and expire one grant among several", []step{
			{S("a", 3, 10, ""), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 3, 1): {tok(1), 10, ""}}},
			{S("a", 3, 20, "o"), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", 3, 1): {tok(1), 10, ""}, s("a", 3, 2): {tok(2), 20, "o"}}},
			{S("a", 3, 30, ""), Result{Code: Granted, Token: tok(3)}, map[string]lockState{s("a", 3, 1): {tok(1), 10, ""}, s("a", 3, 2): {tok(2), 20, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{extend("a", tok(2), 99), Result{Code: Extended, Token: tok(2)}, map[string]lockState{s("a", 3, 1): {tok(1), 10, ""}, s("a", 3, 2): {tok(2), 99, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{extend("a", tok(4), 99), Result{Code: NotHeld}, map[string]lockState{s("a", 3, 1): {tok(1), 10, ""}, s("a", 3, 2): {tok(2), 99, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{extend("a", 0, 99), Result{Code: NotHeld}, map[string]lockState{s("a", 3, 1): {tok(1), 10, ""}, s("a", 3, 2): {tok(2), 99, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{expire("a", tok(1)), Result{Code: Expired, Token: tok(1)}, map[string]lockState{s("a", 3, 2): {tok(2), 99, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{expire("a", tok(1)), Result{Code: Noop}, map[string]lockState{s("a", 3, 2): {tok(2), 99, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{extend("a", tok(1), 5), Result{Code: NotHeld}, map[string]lockState{s("a", 3, 2): {tok(2), 99, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{expire("a", 0), Result{Code: Noop}, map[string]lockState{s("a", 3, 2): {tok(2), 99, "o"}, s("a", 3, 3): {tok(3), 30, ""}}},
			{expire("a", tok(3)), Result{Code: Expired, Token: tok(3)}, map[string]lockState{s("a", 3, 2): {tok(2), 99, "o"}}},
			{expire("a", tok(2)), Result{Code: Expired, Token: tok(2)}, map[string]lockState{}},
		}},
		{"unknown op of a shared key", []step{
			{S("a", 2, 1, ""), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", 2, 1): {tok(1), 1, ""}}},
			{Command{Op: 9, Key: []byte("a"), Token: tok(1)}, Result{Code: Noop}, map[string]lockState{s("a", 2, 1): {tok(1), 1, ""}}},
		}},
		{"the most permits", []step{
			{S("a", MaxPermits, 1, ""), Result{Code: Granted, Token: tok(1)}, map[string]lockState{s("a", MaxPermits, 1): {tok(1), 1, ""}}},
			{S("a", MaxPermits, 2, ""), Result{Code: Granted, Token: tok(2)}, map[string]lockState{s("a", MaxPermits, 1): {tok(1), 1, ""}, s("a", MaxPermits, 2): {tok(2), 2, ""}}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := sharedTable()
			for i, st := range tc.steps {
				seq := tb.seq
				if got := outcome(tb.apply(&st.cmd)); got != st.want {
					t.Fatalf("step %d %+v: got %+v, want %+v", i, st.cmd, got, st.want)
				}
				if st.want.Code != Granted && tb.seq != seq {
					t.Fatalf("step %d: %v moved seq from %d to %d", i, st.want.Code, seq, tb.seq)
				}
				tb.endEntry()
				checkOwners(t, tb)
				if now := tableLocks(tb); !maps.Equal(now, st.after) {
					t.Fatalf("step %d: table %v, want %v", i, now, st.after)
				}
			}
		})
	}
}

// TestApplySharedLevel: below LevelShared a shared Grant changes nothing
// (NotEnabled), and applyBatch answers every command of a batch with one
// NotEnabled (a replica of level 3 skips such an entry whole); from
// LevelShared on the same batch applies. The fence comes first.
func TestApplySharedLevel(t *testing.T) {
	batch := []Command{grant("x", 1), grantShared("s", 2, 1, ""), release("y", 0), grantBy("z", 1, "o")}
	for _, level := range []uint64{1, 2, LevelMembership} {
		tb := newTable(3, 0, 0)
		tb.level = level
		c := grantShared("s", 2, 1, "o")
		if r := tb.apply(&c); r != (Result{Code: NotEnabled}) {
			t.Fatalf("level %d: a shared Grant gave %+v", level, r)
		}
		c = grant("y", 1)
		tb.apply(&c)
		before, seq, changed := tableLocks(tb), tb.seq, changedKeys(tb)
		// As DecodeBatch gives it: the header of a version 8 entry.
		got := tb.applyBatch(Header{Proposer: 1, shared: true}, batch, nil)
		if !slices.Equal(got, slices.Repeat([]Result{{Code: NotEnabled}}, len(batch))) {
			t.Fatalf("level %d: %+v", level, got)
		}
		if !maps.Equal(tableLocks(tb), before) || tb.seq != seq || !maps.Equal(changedKeys(tb), changed) || tb.shared != nil {
			t.Fatalf("level %d: the batch changed the table: %v, seq %d", level, tableLocks(tb), tb.seq)
		}
		// A batch without a shared Grant applies as ever.
		got = outcomes(tb.applyBatch(Header{Proposer: 1}, batch[2:], nil))
		if !slices.Equal(got, []Result{{Code: Released, Token: 1<<ShardBits | 3}, {Code: Granted, Token: 2<<ShardBits | 3}}) {
			t.Fatalf("level %d: a batch without shared grants: %+v", level, got)
		}
		// The fence keeps another proposer's batch out first.
		tb.fence = 7
		if got := tb.applyBatch(Header{Proposer: 8, shared: true}, batch, nil); got[0].Code != Fenced {
			t.Fatalf("level %d: a fenced batch with a shared grant: %+v", level, got)
		}
	}
	// Through Update, from the entry's bytes: the same.
	obs := newRecorder()
	s, _ := openSM(t, newTestDB(t), obs, 3)
	update(t, s, raiseEntry(1, LevelMembership), entry(2, batch...), raiseEntry(3, LevelShared), entry(4, batch...))
	if c := obs.calls(); !slices.Equal(c[1].results, slices.Repeat([]Result{{Code: NotEnabled}}, len(batch))) || c[3].results[1].Code != Granted {
		t.Fatalf("through Update: %+v, then %+v", c[1].results, c[3].results)
	}
	tb := sharedTable()
	got := outcomes(tb.applyBatch(Header{Proposer: 1, shared: true}, batch, nil))
	want := []Result{{Code: Granted, Token: 1<<ShardBits | 3}, {Code: Granted, Token: 2<<ShardBits | 3}, {Code: NotHeld}, {Code: Granted, Token: 3<<ShardBits | 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("at LevelShared: %+v, want %+v", got, want)
	}
}

// TestSharedSlots: every grant has a slot of its own, which the Table's
// per-slot methods read; Find gives a shared key's header, which Shared
// describes and Each skips; a Release without a token names the header
// and lists the freed grants (Table.Freed) in token order; a slot freed by
// an entry is not reused before the entry ends.
func TestSharedSlots(t *testing.T) {
	tb := sharedTable()
	v := Table{tb}
	res := tb.applyBatch(Header{Proposer: 1}, []Command{
		grantShared("k", 3, 10, "o1"), grant("x", 5), grantShared("k", 3, 20, ""), grantShared("k", 3, 30, "o3"),
	}, nil)
	tb.endEntry()
	g1, x, g2, g3 := res[0].Slot, res[1].Slot, res[2].Slot, res[3].Slot
	if len(map[uint32]bool{g1: true, x: true, g2: true, g3: true}) != 4 {
		t.Fatalf("slots %d %d %d %d are not four", g1, x, g2, g3)
	}
	h, ok := v.Find([]byte("k"))
	if !ok || h == g1 || h == g2 || h == g3 || h == x || !v.Held(h) || v.Token(h) != 0 || v.LeaseMs(h) != 0 || v.Owner(h) != "" || string(v.Key(h)) != "k" || v.Permits(h) != 3 {
		t.Fatalf("Find(k) = %d %v: a header %v, token %d", h, ok, v.Held(h), v.Token(h))
	}
	if n, p, ok := v.Shared(h); n != 3 || p != 3 || !ok {
		t.Fatalf("Shared(header) = %d, %d, %v", n, p, ok)
	}
	for i, g := range []uint32{g1, g2, g3} {
		if !v.Held(g) || v.Token(g) != res[[]int{0, 2, 3}[i]].Token || v.LeaseMs(g) != uint32(10*(i+1)) || string(v.Key(g)) != "k" || v.Permits(g) != 3 {
			t.Fatalf("grant %d in slot %d: held %v, token %d, lease %d, key %q, permits %d", i, g, v.Held(g), v.Token(g), v.LeaseMs(g), v.Key(g), v.Permits(g))
		}
		if _, _, ok := v.Shared(g); ok {
			t.Fatalf("Shared(grant %d) is ok", i)
		}
		if s, ok := v.Grant([]byte("k"), v.Token(g)); !ok || s != g {
			t.Fatalf("Grant(k, %d) = %d %v, want %d", v.Token(g), s, ok, g)
		}
	}
	if v.Owner(g1) != "o1" || v.Owner(g2) != "" || v.Owner(g3) != "o3" || v.Permits(x) != 0 {
		t.Fatal("owners or permits")
	}
	if s, ok := v.OwnerGrant([]byte("k"), "o3"); !ok || s != g3 {
		t.Fatalf("OwnerGrant(k, o3) = %d %v", s, ok)
	}
	if _, ok := v.OwnerGrant([]byte("k"), "o2"); ok {
		t.Fatal("OwnerGrant of no holder")
	}
	if _, ok := v.OwnerGrant([]byte("k"), ""); ok {
		t.Fatal("OwnerGrant of no owner")
	}
	if s, ok := v.Grant([]byte("x"), res[1].Token); !ok || s != x {
		t.Fatal("Grant of an exclusive lock")
	}
	if _, ok := v.Grant([]byte("x"), res[0].Token); ok {
		t.Fatal("Grant of another key's token")
	}
	if _, ok := v.Grant([]byte("k"), res[1].Token); ok {
		t.Fatal("Grant of another key's token")
	}
	var each, holders []uint32
	v.Each(func(s uint32) { each = append(each, s) })
	v.Holders(h, func(s uint32) { holders = append(holders, s) })
	slices.Sort(each)
	wantEach := []uint32{g1, x, g2, g3}
	slices.Sort(wantEach)
	if !slices.Equal(each, wantEach) || !slices.Equal(holders, []uint32{g1, g2, g3}) || v.Len() != 4 {
		t.Fatalf("Each %v, Holders %v, Len %d", each, holders, v.Len())
	}
	v.Holders(x, func(uint32) { t.Fatal("Holders of an exclusive lock") })
	n := 0
	v.Locks(func(l Lock) {
		n++
		if (string(l.Key) == "k") != (l.Permits == 3) || string(l.Key) == "x" && l.Permits != 0 {
			t.Fatalf("Locks gave %+v", l)
		}
	})
	if r, _ := tb.get([]byte("k")); r != (LookupResult{Held: true, Permits: 3, Holders: 3}) || n != 4 {
		t.Fatalf("get(k) = %+v, %d locks", r, n)
	}

	// Release one, then all: the entry's results and their slots.
	res = tb.applyBatch(Header{Proposer: 1}, []Command{release("k", res[2].Token), release("k", 0), grant("y", 1), grantShared("k", 2, 1, "")}, nil)
	if res[0].Slot != g2 || res[1].Code != Released || res[1].Token != 0 || res[1].Slot != h {
		t.Fatalf("releases: %+v", res[:2])
	}
	if got := v.Freed(1); !slices.Equal(got, []uint32{g1, g3}) {
		t.Fatalf("Freed = %v, want %v in token order", got, []uint32{g1, g3})
	}
	if v.Freed(0) != nil || v.Freed(2) != nil || v.Freed(4) != nil {
		t.Fatal("Freed of other commands")
	}
	for _, r := range res[2:] {
		if r.Slot == h || r.Slot == g1 || r.Slot == g2 || r.Slot == g3 {
			t.Fatalf("slot %d reused within the entry", r.Slot)
		}
	}
	tb.endEntry()
	if v.Freed(1) != nil {
		t.Fatal("Freed after the entry")
	}
	checkOwners(t, tb)
}

// TestSharedAllocations: grants and releases of a shared key that is
// already held allocate nothing once its holder index has grown; nor does
// the table's exclusive path (TestApplyAllocations).
func TestSharedAllocations(t *testing.T) {
	tb := sharedTable()
	c := grantShared("k", 8, 1, "")
	first := tb.apply(&c).Token
	g := grantShared("k", 8, 10, "")
	allocs := testing.AllocsPerRun(1000, func() {
		r := tb.apply(&g)
		e := extend("k", r.Token, 5)
		tb.apply(&e)
		rel := release("k", r.Token)
		tb.apply(&rel)
		tb.endEntry()
	})
	if allocs != 0 {
		t.Errorf("shared grant+extend+release allocates %v times, want 0", allocs)
	}
	if r, _ := tb.get([]byte("k")); r.Holders != 1 || tb.token(tb.shared[mustFind(t, tb, "k")].grants[first]) != first {
		t.Fatalf("the first holder is gone: %+v", r)
	}
	// A semaphore its holders leave and take again, owners and all.
	cycle := []Command{grantShared("s", 4, 1, "o1"), grantShared("s", 4, 1, ""), grantShared("s", 4, 1, "o2"), release("s", 0)}
	tb.applyBatch(Header{Proposer: 1}, cycle, nil)
	tb.endEntry()
	var res []Result
	allocs = testing.AllocsPerRun(1000, func() {
		res = tb.applyBatch(Header{Proposer: 1}, cycle, res[:0])
		tb.endEntry()
	})
	if allocs != 2 { // the two owners' strings
		t.Errorf("a semaphore's cycle allocates %v times, want 2", allocs)
	}
	checkOwners(t, tb)
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

func mustFind(t *testing.T, tb *table, key string) uint32 {
	t.Helper()
	i, ok := tb.heldSlot([]byte(key))
	if !ok {
		t.Fatalf("%q not held", key)
	}
	return i
}

// TestSharedChangedSinceCheckpoint: the changed set of shared keys. A
// header and its grants are dirty until the checkpoint; a grant or a header
// the checkpoint has becomes a ghost when freed (the next checkpoint
// deletes its row), and a key's row the checkpoint has is taken back by
// either kind; ghosts leave at the checkpoint, with their slots.
func TestSharedChangedSinceCheckpoint(t *testing.T) {
	tb := sharedTable()
	apply := func(cmds ...Command) []Result {
		r := tb.applyBatch(Header{Proposer: 1}, cmds, nil)
		tb.endEntry()
		checkOwners(t, tb)
		return r
	}
	r := apply(grantShared("s", 3, 1, "a"), grantShared("s", 3, 1, "b"), grant("x", 1), grantShared("brief", 2, 1, ""), release("brief", 0))
	if n := len(changedKeys(tb)); n != 2 || tb.dirty != 4 { // s and x: s's header and 2 grants, x; brief came and went
		t.Fatalf("changed %v, dirty %d", changedKeys(tb), tb.dirty)
	}
	tb.checkpointed()
	if tb.dirty != 0 || len(tb.changed) != 0 {
		t.Fatal("a checkpoint left changes")
	}
	// A stored grant released: a ghost of its own; the header stays.
	apply(release("s", r[0].Token))
	if ghosts := tb.dirty; ghosts != 1 || changedKeys(tb)["s"] != true {
		t.Fatalf("dirty %d, changed %v", ghosts, changedKeys(tb))
	}
	// The stored key's row comes back as the other kind, and again.
	apply(release("s", 0), grant("s", 5), release("s", 0), grantShared("s", 4, 1, ""))
	h := mustFind(t, tb, "s")
	if tb.rows[h].tok&rowStored == 0 || tb.rows[h].tok&rowShared == 0 {
		t.Fatalf("the key's stored row is not its header again: %b", tb.rows[h].tok&rowFlags)
	}
	ghosts := 0
	for _, i := range tb.changed {
		if r := tb.rows[i]; r.tok&(rowGrant|rowHeld|rowDirty) == rowGrant|rowDirty {
			ghosts++
		}
	}
	if ghosts != 2 {
		t.Fatalf("%d ghost grants, want s's two first", ghosts)
	}
	rows := len(tb.rows) - len(tb.free)
	tb.checkpointed()
	if len(tb.rows)-len(tb.free) != rows-2 || tb.dirty != 0 {
		t.Fatalf("the checkpoint left %d rows of %d", len(tb.rows)-len(tb.free), rows)
	}
	checkOwners(t, tb)
}

// TestSharedTableAgainstModel applies random shared and exclusive commands
// of a few keys, with entry ends and checkpoints, to a table and to a
// model of the protocol's rules, and checks every result and the table.
func TestSharedTableAgainstModel(t *testing.T) {
	type grantM struct {
		lease   uint32
		owner   string
		permits uint32
	}
	for seed := range uint64(20) {
		tb := sharedTable()
		model := map[string]map[uint64]grantM{} // key -> token -> grant
		rng := newRand(seed)
		var issued []uint64
		for step := range 3000 {
			key := fmt.Sprint("k", rng.IntN(4))
			owner := ""
			if n := rng.IntN(4); n > 0 {
				owner = fmt.Sprint("o", n)
			}
			tok := uint64(0)
			if len(issued) > 0 && rng.IntN(6) > 0 {
				tok = issued[rng.IntN(len(issued))]
			}
			permits := uint32(rng.IntN(3))
			var c Command
			switch rng.IntN(6) {
			case 0, 1:
				c = grantShared(key, permits, uint32(rng.IntN(100)), owner)
			case 2:
				c = release(key, tok)
			case 3:
				c = extend(key, tok, uint32(rng.IntN(100)))
			case 4:
				c = expire(key, tok)
			case 5:
				if rng.IntN(2) == 0 {
					tb.endEntry()
				} else {
					tb.endEntry()
					tb.checkpointed()
				}
				continue
			}
			// The model's answer.
			held := model[key]
			var want Result
			var mine uint64
			var kind uint32 // the holders' permits, 0 for exclusive
			for tk, g := range held {
				kind = g.permits
				if owner != "" && g.owner == owner {
					mine = tk
				}
			}
			switch c.Op {
			case OpGrant:
				switch {
				case len(held) == 0:
					want = Result{Code: Granted, Token: (tb.seq+1)<<ShardBits | 3}
				case mine != 0 && (kind == 0) == (c.Permits == 0):
					want = Result{Code: Regranted, Token: mine}
				case mine != 0:
					want = Result{Code: KindMismatch}
				case kind == 0 || c.Permits == 0:
					want = Result{Code: GrantRejected}
				case c.Permits != kind:
					want = Result{Code: PermitsMismatch}
				case uint32(len(held)) >= kind:
					want = Result{Code: GrantRejected}
				default:
					want = Result{Code: Granted, Token: (tb.seq+1)<<ShardBits | 3}
				}
				if want.Code == Granted {
					if model[key] == nil {
						model[key] = map[uint64]grantM{}
					}
					model[key][want.Token] = grantM{c.LeaseMs, owner, c.Permits}
					issued = append(issued, want.Token)
				}
			case OpRelease, OpExpire:
				_, ok := held[c.Token]
				switch {
				case c.Op == OpRelease && c.Token == 0 && len(held) > 0:
					want = Result{Code: Released}
					if kind == 0 {
						for tk := range held {
							want.Token = tk
						}
					}
					delete(model, key)
				case ok:
					want = Result{Code: Released, Token: c.Token}
					if c.Op == OpExpire {
						want.Code = Expired
					}
					delete(held, c.Token)
					if len(held) == 0 {
						delete(model, key)
					}
				case c.Op == OpRelease:
					want = Result{Code: NotHeld}
				default:
					want = Result{Code: Noop}
				}
			case OpExtend:
				if g, ok := held[c.Token]; ok {
					want = Result{Code: Extended, Token: c.Token}
					g.lease = c.LeaseMs
					held[c.Token] = g
				} else {
					want = Result{Code: NotHeld}
				}
			}
			if got := outcome(tb.apply(&c)); got != want {
				t.Fatalf("seed %d step %d %+v: got %+v, want %+v", seed, step, c, got, want)
			}
			checkOwners(t, tb)
			wantLocks := map[string]lockState{}
			for k, gs := range model {
				for tk, g := range gs {
					name := k
					if g.permits > 0 {
						name = sharedName(k, g.permits, tk)
					}
					wantLocks[name] = lockState{tk, g.lease, g.owner}
				}
			}
			if got := tableLocks(tb); !maps.Equal(got, wantLocks) {
				t.Fatalf("seed %d step %d: table %v, model %v", seed, step, got, wantLocks)
			}
		}
	}
}

// TestFreedPerCommand: Table.Freed tells apart two releases of every
// holder of one key in one entry, whose results name the same header slot
// (a row the checkpoint has is the key's whichever kind holds it).
func TestFreedPerCommand(t *testing.T) {
	tb := sharedTable()
	v := Table{tb}
	tb.applyBatch(Header{Proposer: 1}, []Command{grantShared("k", 3, 1, "")}, nil)
	tb.endEntry()
	tb.checkpointed() // the header is stored: freed, it stays a ghost
	res := tb.applyBatch(Header{Proposer: 1}, []Command{
		grantShared("k", 3, 1, "a"), release("k", 0), grantShared("k", 2, 1, ""), grantShared("k", 2, 1, ""), release("k", 0), release("k", 0),
	}, nil)
	if res[1].Slot != res[4].Slot || res[1].Code != Released || res[4].Code != Released || res[5].Code != NotHeld {
		t.Fatalf("results %+v", res)
	}
	if got := v.Freed(1); len(got) != 2 || got[1] != res[0].Slot {
		t.Fatalf("Freed(1) = %v, want the first grant's slot and %d", got, res[0].Slot)
	}
	if got := v.Freed(4); !slices.Equal(got, []uint32{res[2].Slot, res[3].Slot}) {
		t.Fatalf("Freed(4) = %v, want %v", got, []uint32{res[2].Slot, res[3].Slot})
	}
	if v.Freed(5) != nil {
		t.Fatal("Freed of a release that freed nothing")
	}
	tb.endEntry()
	checkOwners(t, tb)
}
