package statemachine

import (
	"maps"
	"testing"
)

func TestApplyRules(t *testing.T) {
	const shard = 3
	tok := func(seq uint64) uint64 { return seq<<ShardBits | shard }
	type step struct {
		cmd   Command
		want  Result
		after map[string]row // the whole table after the step
	}
	held := func(kv ...any) map[string]row {
		m := map[string]row{}
		for i := 0; i < len(kv); i += 3 {
			m[kv[i].(string)] = row{token: kv[i+1].(uint64), leaseMs: uint32(kv[i+2].(int))}
		}
		return m
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"grant free then held", []step{
			{grant("a", 100), Result{Granted, tok(1)}, held("a", tok(1), 100)},
			{grant("a", 200), Result{GrantRejected, 0}, held("a", tok(1), 100)},
			{grant("b", 300), Result{Granted, tok(2)}, held("a", tok(1), 100, "b", tok(2), 300)},
		}},
		{"release without token", []step{
			{release("a", 0), Result{NotHeld, 0}, held()},
			{grant("a", 100), Result{Granted, tok(1)}, held("a", tok(1), 100)},
			{release("a", 0), Result{Released, tok(1)}, held()},
			{release("a", 0), Result{NotHeld, 0}, held()},
		}},
		{"release with token", []step{
			{grant("a", 100), Result{Granted, tok(1)}, held("a", tok(1), 100)},
			{release("a", tok(2)), Result{NotHeld, 0}, held("a", tok(1), 100)},
			{release("a", tok(1)), Result{Released, tok(1)}, held()},
			{release("a", tok(1)), Result{NotHeld, 0}, held()},
			{grant("a", 100), Result{Granted, tok(2)}, held("a", tok(2), 100)},
			{release("a", tok(1)), Result{NotHeld, 0}, held("a", tok(2), 100)},
		}},
		{"extend", []step{
			{extend("a", tok(1), 5), Result{NotHeld, 0}, held()},
			{grant("a", 100), Result{Granted, tok(1)}, held("a", tok(1), 100)},
			{extend("a", tok(1), 500), Result{Extended, tok(1)}, held("a", tok(1), 500)},
			{extend("a", tok(9), 7), Result{NotHeld, 0}, held("a", tok(1), 500)},
			{extend("a", 0, 7), Result{NotHeld, 0}, held("a", tok(1), 500)},
		}},
		{"expire", []step{
			{expire("a", tok(1)), Result{Noop, 0}, held()},
			{grant("a", 100), Result{Granted, tok(1)}, held("a", tok(1), 100)},
			{expire("a", tok(2)), Result{Noop, 0}, held("a", tok(1), 100)},
			{expire("a", tok(1)), Result{Expired, tok(1)}, held()},
			{expire("a", tok(1)), Result{Noop, 0}, held()},
		}},
		{"unknown op", []step{
			{Command{Op: 9, Key: []byte("a")}, Result{Noop, 0}, held()},
		}},
		{"slots are reused", []step{
			{grant("a", 1), Result{Granted, tok(1)}, held("a", tok(1), 1)},
			{grant("b", 2), Result{Granted, tok(2)}, held("a", tok(1), 1, "b", tok(2), 2)},
			{release("a", 0), Result{Released, tok(1)}, held("b", tok(2), 2)},
			{grant("c", 3), Result{Granted, tok(3)}, held("b", tok(2), 2, "c", tok(3), 3)},
			{extend("b", tok(2), 4), Result{Extended, tok(2)}, held("b", tok(2), 4, "c", tok(3), 3)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(shard, 0, 0)
			for i, st := range tc.steps {
				if got := tb.apply(&st.cmd); got != st.want {
					t.Fatalf("step %d %+v: got %+v, want %+v", i, st.cmd, got, st.want)
				}
				now := map[string]row{}
				for k, j := range tb.slot {
					now[k] = tb.rows[j]
				}
				if !maps.Equal(now, st.after) {
					t.Fatalf("step %d: table %v, want %v", i, now, st.after)
				}
			}
			if len(tb.rows)-len(tb.free) != len(tb.slot) {
				t.Errorf("slab has %d rows, %d free, map %d", len(tb.rows), len(tb.free), len(tb.slot))
			}
		})
	}
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
	})
	if allocs != 1 { // the key string the map keeps
		t.Errorf("grant+extend+release allocates %v times, want 1", allocs)
	}
}

func TestChangedSinceCheckpoint(t *testing.T) {
	tb := newTable(1, 0, 0)
	// What the checkpoint holds.
	tb.seq = 3
	for i, k := range []string{"kept", "extended", "released", "regranted"} {
		tb.insert([]byte(k), row{token: uint64(i+1)<<ShardBits | 1, leaseMs: 10})
	}
	tok := func(k string) uint64 { r, _ := tb.get([]byte(k)); return r.token }
	for _, c := range []Command{
		grant("kept", 5), // rejected: no change
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
	if !maps.Equal(tb.changed, want) {
		t.Fatalf("changed = %v, want %v", tb.changed, want)
	}
}
