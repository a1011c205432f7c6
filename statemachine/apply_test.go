package statemachine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func TestApplyRules(t *testing.T) {
	const shard = 3
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	type step struct {
		cmd   Command
		want  Result
		after map[string]lockState // the whole table after the step
	}
	held := func(kv ...any) map[string]lockState {
		m := map[string]lockState{}
		for i := 0; i < len(kv); i += 3 {
			m[kv[i].(string)] = lockState{token: kv[i+1].(uint64), leaseMs: uint32(kv[i+2].(int))}
		}
		return m
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"grant free then held", []step{
			{grant("a", 100), Result{Code: Granted, Token: tok(1)}, held("a", tok(1), 100)},
			{grant("a", 200), Result{Code: GrantRejected, Token: 0}, held("a", tok(1), 100)},
			{grant("b", 300), Result{Code: Granted, Token: tok(2)}, held("a", tok(1), 100, "b", tok(2), 300)},
		}},
		{"release without token", []step{
			{release("a", 0), Result{Code: NotHeld, Token: 0}, held()},
			{grant("a", 100), Result{Code: Granted, Token: tok(1)}, held("a", tok(1), 100)},
			{release("a", 0), Result{Code: Released, Token: tok(1)}, held()},
			{release("a", 0), Result{Code: NotHeld, Token: 0}, held()},
		}},
		{"release with token", []step{
			{grant("a", 100), Result{Code: Granted, Token: tok(1)}, held("a", tok(1), 100)},
			{release("a", tok(2)), Result{Code: NotHeld, Token: 0}, held("a", tok(1), 100)},
			{release("a", tok(1)), Result{Code: Released, Token: tok(1)}, held()},
			{release("a", tok(1)), Result{Code: NotHeld, Token: 0}, held()},
			{grant("a", 100), Result{Code: Granted, Token: tok(2)}, held("a", tok(2), 100)},
			{release("a", tok(1)), Result{Code: NotHeld, Token: 0}, held("a", tok(2), 100)},
		}},
		{"extend", []step{
			{extend("a", tok(1), 5), Result{Code: NotHeld, Token: 0}, held()},
			{grant("a", 100), Result{Code: Granted, Token: tok(1)}, held("a", tok(1), 100)},
			{extend("a", tok(1), 500), Result{Code: Extended, Token: tok(1)}, held("a", tok(1), 500)},
			{extend("a", tok(9), 7), Result{Code: NotHeld, Token: 0}, held("a", tok(1), 500)},
			{extend("a", 0, 7), Result{Code: NotHeld, Token: 0}, held("a", tok(1), 500)},
		}},
		{"expire", []step{
			{expire("a", tok(1)), Result{Code: Noop, Token: 0}, held()},
			{grant("a", 100), Result{Code: Granted, Token: tok(1)}, held("a", tok(1), 100)},
			{expire("a", tok(2)), Result{Code: Noop, Token: 0}, held("a", tok(1), 100)},
			{expire("a", tok(1)), Result{Code: Expired, Token: tok(1)}, held()},
			{expire("a", tok(1)), Result{Code: Noop, Token: 0}, held()},
		}},
		{"unknown op", []step{
			{Command{Op: 9, Key: []byte("a")}, Result{Code: Noop, Token: 0}, held()},
		}},
		{"slots are reused", []step{
			{grant("a", 1), Result{Code: Granted, Token: tok(1)}, held("a", tok(1), 1)},
			{grant("b", 2), Result{Code: Granted, Token: tok(2)}, held("a", tok(1), 1, "b", tok(2), 2)},
			{release("a", 0), Result{Code: Released, Token: tok(1)}, held("b", tok(2), 2)},
			{grant("c", 3), Result{Code: Granted, Token: tok(3)}, held("b", tok(2), 2, "c", tok(3), 3)},
			{extend("b", tok(2), 4), Result{Code: Extended, Token: tok(2)}, held("b", tok(2), 4, "c", tok(3), 3)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(shard, 0, 0)
			for i, st := range tc.steps {
				if got := outcome(tb.apply(&st.cmd)); got != st.want {
					t.Fatalf("step %d %+v: got %+v, want %+v", i, st.cmd, got, st.want)
				}
				tb.endEntry()
				if now := tableLocks(tb); !maps.Equal(now, st.after) {
					t.Fatalf("step %d: table %v, want %v", i, now, st.after)
				}
			}
			if len(tb.rows)-len(tb.free) != tb.index.n || tb.index.n != tb.len() {
				t.Errorf("slab has %d rows, %d free, index %d, held %d", len(tb.rows), len(tb.free), tb.index.n, tb.len())
			}
			if tb.owners != nil {
				t.Errorf("grants without owner made an owner index: %v", tb.owners)
			}
		})
	}
}

func TestApplyOwners(t *testing.T) {
	const shard = 3
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	type step struct {
		cmd   Command
		want  Result
		after map[string]lockState // the whole table after the step
	}
	long := strings.Repeat("o", MaxOwnerLen)
	tests := []struct {
		name  string
		steps []step
	}{
		{"retry by the owner is regranted", []step{
			{grantBy("a", 100, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			// The lease stays 100 and no token is issued (the next grant is seq 2).
			{grantBy("a", 999, "o1"), Result{Code: Regranted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{grantBy("a", 100, "o1"), Result{Code: Regranted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{grantBy("b", 5, "o1"), Result{Code: Granted, Token: tok(2)}, map[string]lockState{"a": {tok(1), 100, "o1"}, "b": {tok(2), 5, "o1"}}},
		}},
		{"another owner or none is rejected", []step{
			{grantBy("a", 100, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{grantBy("a", 100, "o2"), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{grantBy("a", 100, "o"), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{grantBy("a", 100, "o1x"), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{grant("a", 100), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
		}},
		{"a holder without owner matches no owner", []step{
			{grant("a", 100), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, ""}}},
			{grantBy("a", 100, "o1"), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(1), 100, ""}}},
			{grant("a", 100), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(1), 100, ""}}},
		}},
		{"release clears the owner", []step{
			{grantBy("a", 100, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{release("a", 0), Result{Code: Released, Token: tok(1)}, map[string]lockState{}},
			{grantBy("a", 200, "o2"), Result{Code: Granted, Token: tok(2)}, map[string]lockState{"a": {tok(2), 200, "o2"}}},
			{grantBy("a", 200, "o1"), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(2), 200, "o2"}}},
			{release("a", tok(2)), Result{Code: Released, Token: tok(2)}, map[string]lockState{}},
			// The same owner again, after its grant ended: a new grant.
			{grantBy("a", 300, "o2"), Result{Code: Granted, Token: tok(3)}, map[string]lockState{"a": {tok(3), 300, "o2"}}},
		}},
		{"expire clears the owner", []step{
			{grantBy("a", 100, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{expire("a", tok(2)), Result{Code: Noop, Token: 0}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{expire("a", tok(1)), Result{Code: Expired, Token: tok(1)}, map[string]lockState{}},
			{grant("a", 7), Result{Code: Granted, Token: tok(2)}, map[string]lockState{"a": {tok(2), 7, ""}}},
			{grantBy("a", 7, "o1"), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"a": {tok(2), 7, ""}}},
		}},
		{"extend keeps the owner", []step{
			{grantBy("a", 100, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 100, "o1"}}},
			{extend("a", tok(1), 500), Result{Code: Extended, Token: tok(1)}, map[string]lockState{"a": {tok(1), 500, "o1"}}},
			{grantBy("a", 5, "o1"), Result{Code: Regranted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 500, "o1"}}},
		}},
		{"owners of reused slots", []step{
			{grantBy("a", 1, "oa"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 1, "oa"}}},
			{release("a", 0), Result{Code: Released, Token: tok(1)}, map[string]lockState{}},
			// b takes a's slot: a's owner must not come with it.
			{grant("b", 2), Result{Code: Granted, Token: tok(2)}, map[string]lockState{"b": {tok(2), 2, ""}}},
			{grantBy("b", 2, "oa"), Result{Code: GrantRejected, Token: 0}, map[string]lockState{"b": {tok(2), 2, ""}}},
			{grantBy("c", 3, long), Result{Code: Granted, Token: tok(3)}, map[string]lockState{"b": {tok(2), 2, ""}, "c": {tok(3), 3, long}}},
			{grantBy("c", 3, long), Result{Code: Regranted, Token: tok(3)}, map[string]lockState{"b": {tok(2), 2, ""}, "c": {tok(3), 3, long}}},
		}},
		{"owner on other ops is ignored", []step{
			{grantBy("a", 1, "o1"), Result{Code: Granted, Token: tok(1)}, map[string]lockState{"a": {tok(1), 1, "o1"}}},
			{Command{Op: OpExtend, Key: []byte("a"), Token: tok(1), LeaseMs: 9, Owner: []byte("o2")}, Result{Code: Extended, Token: tok(1)}, map[string]lockState{"a": {tok(1), 9, "o1"}}},
			{Command{Op: OpRelease, Key: []byte("a"), Owner: []byte("o2")}, Result{Code: Released, Token: tok(1)}, map[string]lockState{}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(shard, 0, 0)
			for i, st := range tc.steps {
				seq := tb.seq
				if got := outcome(tb.apply(&st.cmd)); got != st.want {
					t.Fatalf("step %d %+v: got %+v, want %+v", i, st.cmd, got, st.want)
				}
				if st.want.Code == Regranted && tb.seq != seq {
					t.Fatalf("step %d: Regranted moved seq from %d to %d", i, seq, tb.seq)
				}
				checkOwners(t, tb)
				if now := tableLocks(tb); !maps.Equal(now, st.after) {
					t.Fatalf("step %d: table %v, want %v", i, now, st.after)
				}
			}
		})
	}
}

// TestLockWithoutOwnerCostsWhatItDid shows that owners cost nothing to a
// lock that has none: the row is the size it was (token and lease), no
// owner index exists, and a grant allocates nothing (the key goes to the
// arena), as before owners (when it allocated the key's string).
func TestLockWithoutOwnerCostsWhatItDid(t *testing.T) {
	//lint:ignore U1000 only its size matters
	type rowBeforeOwners struct {
		token   uint64
		leaseMs uint32
	}
	if got, was := unsafe.Sizeof(row{}), unsafe.Sizeof(rowBeforeOwners{}); got != was {
		t.Errorf("row is %d bytes, was %d", got, was)
	}
	tb := newTable(1, 0, 16)
	for i := range 1000 {
		c := grant(fmt.Sprint("k", i%50), 1)
		tb.apply(&c)
		if i%3 == 0 {
			c = release(fmt.Sprint("k", i%50), 0)
			tb.apply(&c)
		}
	}
	if tb.owners != nil {
		t.Errorf("locks without owner made an owner index of %d", len(tb.owners))
	}
	// TestApplyAllocations: an ownerless grant allocates nothing. One with
	// an owner allocates the owner's string, and only that.
	g, r := grantBy("some/key", 10, "owner-0123456789abcdef"), release("some/key", 0)
	allocs := testing.AllocsPerRun(1000, func() {
		tb.apply(&g)
		tb.apply(&r)
		tb.endEntry()
	})
	if allocs != 1 {
		t.Errorf("grant+release with an owner allocates %v times, want 1", allocs)
	}
	checkOwners(t, tb)
}

func TestApplyAllocations(t *testing.T) {
	tb := newTable(1, 0, 16)
	g, e, r := grant("some/key", 10), extend("some/key", 0, 20), release("some/key", 0)
	allocs := testing.AllocsPerRun(1000, func() {
		res := tb.apply(&g)
		e.Token = res.Token
		tb.apply(&e)
		tb.apply(&e)
		tb.apply(&r)
		tb.endEntry()
	})
	if allocs != 0 { // the key goes to the arena, the row to the slab
		t.Errorf("grant+extend+release allocates %v times, want 0", allocs)
	}
}

func TestChangedSinceCheckpoint(t *testing.T) {
	tb := newTable(1, 0, 0)
	// What the checkpoint holds.
	tb.seq = 3
	for i, k := range []string{"kept", "extended", "released", "regranted"} {
		tb.insert([]byte(k), uint64(i+1)<<ShardBits|1, 10, nil, rowStored)
	}
	tb.insert([]byte("owned"), 5<<ShardBits|1, 10, []byte("me"), rowStored)
	tb.seq = 5
	tok := func(k string) uint64 { r, _ := tb.get([]byte(k)); return r.Token }
	for _, c := range []Command{
		grant("kept", 5),          // rejected: no change
		grantBy("owned", 5, "me"), // regranted: no change
		extend("extended", tok("extended"), 20),
		release("released", 0),
		release("regranted", 0),
		grant("regranted", 5),
		grant("fresh", 5),
		grant("brief", 5),
		release("brief", 0),
		release("never", 0), // not held: no change
	} {
		tb.apply(&c)
	}
	// true: the checkpoint has a row for the key (to overwrite or delete).
	// "brief" is free, as in the checkpoint: unchanged.
	want := map[string]bool{"extended": true, "released": true, "regranted": true, "fresh": false}
	if got := changedKeys(tb); !maps.Equal(got, want) {
		t.Fatalf("changed = %v, want %v", got, want)
	}
}

// TestApplyFence checks applyBatch's rule: before any fence every batch
// applies; after a fence only its proposer's batches do, and any other
// proposer's batch is answered Fenced, every command, with the table (rows,
// owners, token counter, changed set) as it was; a later fence switches;
// a hand-off request changes nothing, the fence included.
func TestApplyFence(t *testing.T) {
	const shard = 3
	const a, b, c = 0xa, 0xb, 0xc
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	fenceOf := func(p uint64) Header { return Header{Proposer: p, Fence: true} }
	by := func(p uint64) Header { return Header{Proposer: p} }
	handOffBy := func(p uint64) Header { return Header{Proposer: p, HandOff: true} }
	fenced := func(n int) []Result { return slices.Repeat([]Result{{Code: Fenced}}, n) }
	type step struct {
		h     Header
		cmds  []Command
		want  []Result // nil: no commands
		fence uint64   // the table's fence after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"before any fence every batch applies", []step{
			{by(a), []Command{grant("x", 1)}, []Result{{Code: Granted, Token: tok(1)}}, 0},
			{by(b), []Command{grant("y", 2), release("x", 0)}, []Result{{Code: Granted, Token: tok(2)}, {Code: Released, Token: tok(1)}}, 0},
			{by(0), []Command{grantBy("x", 3, "o")}, []Result{{Code: Granted, Token: tok(3)}}, 0},
			{by(c), nil, nil, 0},
		}},
		{"a fence keeps other proposers out", []step{
			{by(b), []Command{grantBy("x", 1, "o"), grant("y", 1)}, []Result{{Code: Granted, Token: tok(1)}, {Code: Granted, Token: tok(2)}}, 0},
			{fenceOf(a), nil, nil, a},
			// Every op of b, each of which would change the table.
			{by(b), []Command{grant("z", 5), grantBy("x", 5, "o"), release("x", 0), extend("y", tok(2), 9), expire("y", tok(2))}, fenced(5), a},
			{by(0), []Command{grant("z", 5)}, fenced(1), a},
			{by(b), nil, nil, a},
			// a's batches apply, and the token counter did not move for b.
			{by(a), []Command{grant("z", 5), release("x", tok(1))}, []Result{{Code: Granted, Token: tok(3)}, {Code: Released, Token: tok(1)}}, a},
		}},
		{"a later fence switches", []step{
			{fenceOf(a), nil, nil, a},
			{by(a), []Command{grant("x", 1)}, []Result{{Code: Granted, Token: tok(1)}}, a},
			{fenceOf(b), nil, nil, b},
			{by(a), []Command{release("x", 0), grant("y", 1)}, fenced(2), b},
			{by(b), []Command{grant("y", 1), release("x", 0)}, []Result{{Code: Granted, Token: tok(2)}, {Code: Released, Token: tok(1)}}, b},
			// A proposer fencing again keeps the table its own.
			{fenceOf(b), nil, nil, b},
			{by(b), []Command{grant("x", 1)}, []Result{{Code: Granted, Token: tok(3)}}, b},
			{fenceOf(a), nil, nil, a},
			{by(b), []Command{release("x", 0)}, fenced(1), a},
			{by(a), []Command{release("x", 0)}, []Result{{Code: Released, Token: tok(3)}}, a},
		}},
		{"a hand-off request changes nothing", []step{
			{handOffBy(2), nil, nil, 0},
			{by(b), []Command{grant("x", 1)}, []Result{{Code: Granted, Token: tok(1)}}, 0},
			{fenceOf(a), nil, nil, a},
			// Not a fence, whatever its proposer: a's batches still apply.
			{handOffBy(a), nil, nil, a},
			{handOffBy(b), nil, nil, a},
			{by(a), []Command{release("x", 0)}, []Result{{Code: Released, Token: tok(1)}}, a},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(shard, 0, 0)
			for i, st := range tc.steps {
				before, seq, changed := tableLocks(tb), tb.seq, changedKeys(tb)
				got := outcomes(tb.applyBatch(st.h, st.cmds, nil))
				if !slices.Equal(got, st.want) {
					t.Fatalf("step %d %+v: results %+v, want %+v", i, st.h, got, st.want)
				}
				if tb.fence != st.fence {
					t.Fatalf("step %d: fence %x, want %x", i, tb.fence, st.fence)
				}
				checkOwners(t, tb)
				if len(st.cmds) > 0 && st.want[0].Code != Fenced {
					continue
				}
				// A fence, a batch without commands and a Fenced batch
				// change no lock.
				if now := tableLocks(tb); !maps.Equal(now, before) || tb.seq != seq || !maps.Equal(changedKeys(tb), changed) {
					t.Fatalf("step %d: table %v, seq %d, changed %v; was %v, %d, %v", i, now, tb.seq, changedKeys(tb), before, seq, changed)
				}
			}
		})
	}
}
