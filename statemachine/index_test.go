package statemachine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// checkTable checks the table's index, arena and slab against want (key ->
// token of every held key): every key is found at a row that names it and
// holds its token, nothing else is found, and the counts agree.
func checkTable(t *testing.T, tb *table, want map[string]uint64) {
	t.Helper()
	for k, tok := range want {
		i, ok := tb.heldSlot([]byte(k))
		if !ok || string(tb.keyOf(i)) != k || tb.token(i) != tok {
			t.Fatalf("key %q: slot %d found %v, want token %d", k, i, ok, tok)
		}
	}
	if tb.len() != len(want) || tb.index.n != len(want) {
		t.Fatalf("%d held, %d in the index, want %d", tb.len(), tb.index.n, len(want))
	}
	if n := len(tb.rows) - len(tb.free) - len(tb.freed); n != len(want) {
		t.Fatalf("%d rows in use, want %d", n, len(want))
	}
	n := 0
	for _, e := range tb.index.entries {
		if e != 0 {
			n++
		}
	}
	if n != tb.index.n {
		t.Fatalf("index has %d entries, counts %d", n, tb.index.n)
	}
	if size := len(tb.index.entries); size > minIndex && 16*tb.index.n < 3*size {
		t.Fatalf("index of %d entries for %d keys: not shrunk", size, tb.index.n)
	}
}

// The index and the arena under grants and releases of keys of every
// length, in random order: what is held is found, what is not is not, and
// the memory follows what is held.
func TestIndexChurn(t *testing.T) {
	tests := []struct {
		name   string
		keys   int
		rounds int
		keyOf  func(i int) string
	}{
		{"short keys", 2000, 20000, func(i int) string { return fmt.Sprint(i) }},
		{"every length", 500, 10000, func(i int) string {
			k := fmt.Sprintf("%d/", i)
			return k + strings.Repeat("y", max(0, (i*7)%MaxKeyLen-len(k)))
		}},
		{"longest keys", 300, 5000, func(i int) string {
			k := fmt.Sprintf("%d/", i)
			return k + strings.Repeat("x", MaxKeyLen-len(k))
		}},
		{"one key", 1, 1000, func(int) string { return "k" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.keys)))
			tb := newTable(1, 0, 0)
			want := map[string]uint64{}
			for r := range tc.rounds {
				k := tc.keyOf(rng.IntN(tc.keys))
				if len(k) > MaxKeyLen {
					t.Fatalf("test key of %d bytes", len(k))
				}
				var c Command
				if _, held := want[k]; held {
					c = release(k, 0)
					delete(want, k)
				} else {
					c = grant(k, 1)
				}
				res := tb.apply(&c)
				if res.Code == Granted {
					want[k] = res.Token
				}
				if r%7 == 0 {
					tb.endEntry()
				}
				if r%1000 == 0 {
					checkTable(t, tb, want)
				}
			}
			tb.endEntry()
			checkTable(t, tb, want)
			for k := range want {
				c := release(k, 0)
				tb.apply(&c)
			}
			tb.endEntry()
			checkTable(t, tb, nil)
		})
	}
}

// Freed key bytes are reclaimed: a table that churns through many more keys
// than it holds keeps an arena of about what it holds, each chunk but the
// tail at least half live.
func TestArenaStaysBounded(t *testing.T) {
	tb := newTable(1, 0, 0)
	const held = 5000
	want := map[string]uint64{}
	for i := range 200000 {
		k := fmt.Sprintf("churn/%09d", i)
		c := grant(k, 1)
		want[k] = tb.apply(&c).Token
		if i >= held {
			// Release a random older key, so that holes are everywhere.
			old := fmt.Sprintf("churn/%09d", i-held+rand.IntN(held/2))
			if _, ok := want[old]; !ok {
				old = fmt.Sprintf("churn/%09d", i-held)
			}
			if _, ok := want[old]; ok {
				c = release(old, 0)
				tb.apply(&c)
				delete(want, old)
			}
		}
		tb.endEntry()
	}
	checkTable(t, tb, want)
	capacity, live := tb.keys.bytes()
	if wantLive := len(want) * (1 + len("churn/000000000")); live != wantLive {
		t.Fatalf("arena counts %d live bytes, want %d", live, wantLive)
	}
	if capacity > 2*live+maxChunk {
		t.Fatalf("arena of %d bytes for %d live", capacity, live)
	}
	for c, b := range tb.keys.chunks {
		if b != nil && int32(c) != tb.keys.tail && 2*int(tb.keys.live[c]) < len(b) {
			t.Fatalf("chunk %d: %d of %d bytes live, not compacted", c, tb.keys.live[c], len(b))
		}
	}
}

// Keys whose homes collide (47 keys in the smallest index, 64 entries:
// long runs, some wrapping past the end) are told apart by their bytes,
// and removing any of them, in any order, leaves the rest findable: the
// backward shift keeps every run intact.
func TestIndexCollisions(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tb := newTable(1, 0, 0)
		want := map[string]uint64{}
		var keys []string
		for i := range 47 {
			k := fmt.Sprint("c", i)
			c := grant(k, 1)
			want[k] = tb.apply(&c).Token
			keys = append(keys, k)
		}
		if len(tb.index.entries) != minIndex {
			t.Fatalf("index of %d entries, want %d", len(tb.index.entries), minIndex)
		}
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys {
			c := release(k, 0)
			if tb.apply(&c).Code != Released {
				t.Fatalf("seed %d: release %s: not found", seed, k)
			}
			delete(want, k)
			tb.endEntry()
			checkTable(t, tb, want)
			if _, ok := tb.find([]byte(k)); ok {
				t.Fatalf("seed %d: %s found after its release", seed, k)
			}
		}
	}
}

// The index grows as keys come and shrinks as they go, and a key found
// before a resize is found after it.
func TestIndexGrowsAndShrinks(t *testing.T) {
	tb := newTable(1, 0, 0)
	want := map[string]uint64{}
	sizes := map[int]bool{}
	for i := range 50000 {
		k := fmt.Sprint("g", i)
		c := grant(k, 1)
		want[k] = tb.apply(&c).Token
		sizes[len(tb.index.entries)] = true
	}
	checkTable(t, tb, want)
	if len(tb.index.entries) != 1<<17 || len(sizes) != 12 {
		t.Fatalf("index of %d entries after %d sizes, want 131072 after 12", len(tb.index.entries), len(sizes))
	}
	for i := range 49990 {
		k := fmt.Sprint("g", i)
		c := release(k, 0)
		tb.apply(&c)
		delete(want, k)
	}
	tb.endEntry()
	checkTable(t, tb, want)
	if len(tb.index.entries) != minIndex {
		t.Fatalf("index of %d entries for %d keys", len(tb.index.entries), len(want))
	}
}

// A result names the row of its key, and a row freed by an entry is not
// reused before the entry ends: within one entry a slot names one key.
func TestResultSlots(t *testing.T) {
	tb := newTable(1, 0, 0)
	v := Table{tb}
	res := tb.applyBatch(Header{Proposer: 1}, []Command{grant("a", 1), grant("b", 2)}, nil)
	tb.endEntry()
	a, b := res[0].Slot, res[1].Slot
	if s, ok := v.Find([]byte("a")); !ok || s != a || string(v.Key(a)) != "a" || v.Token(a) != res[0].Token || v.LeaseMs(a) != 1 {
		t.Fatalf("a: slot %d found %v, result slot %d", s, ok, a)
	}
	res = tb.applyBatch(Header{Proposer: 1}, []Command{release("a", 0), grant("c", 3), extend("b", v.Token(b), 9)}, nil)
	if res[0].Slot != a || res[1].Slot == a || res[2].Slot != b {
		t.Fatalf("slots %+v: a was %d, b %d", res, a, b)
	}
	if v.Held(a) || v.Len() != 2 {
		t.Fatalf("a's row still held, or %d held", v.Len())
	}
	tb.endEntry()
	res = tb.applyBatch(Header{Proposer: 1}, []Command{grant("d", 1)}, nil)
	if res[0].Slot != a {
		t.Fatalf("d got slot %d, want a's %d once the entry that freed it ended", res[0].Slot, a)
	}
}

// FuzzTableAgainstMap applies a stream of commands, entry ends and
// checkpoints, decoded from the input, to a table and to a map, and checks
// that they agree after every step: held keys and tokens, the changed set
// against what the last checkpoint holds, and the index, arena and slab
// counts.
func FuzzTableAgainstMap(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 3, 0, 4, 2, 1, 5})
	f.Add([]byte{0, 9, 0, 9, 1, 9, 4, 0, 9, 1, 9, 4, 0, 9})
	f.Fuzz(func(t *testing.T, in []byte) {
		tb := newTable(1, 0, 0)
		held := map[string]uint64{}
		stored := map[string]bool{} // what the last checkpoint holds
		key := func(b byte) string {
			// 16 keys, short and long, some sharing prefixes.
			n := int(b % 16)
			return fmt.Sprintf("k%02d/", n) + strings.Repeat("z", (n*37)%(MaxKeyLen-4))
		}
		for len(in) >= 2 {
			op, k := in[0]%6, key(in[1])
			in = in[2:]
			switch op {
			case 0:
				c := grant(k, 1)
				r := tb.apply(&c)
				if _, ok := held[k]; ok != (r.Code == GrantRejected) {
					t.Fatalf("grant %s: %v, held %v", k, r.Code, ok)
				}
				if r.Code == Granted {
					held[k] = r.Token
				}
			case 1, 2:
				c := release(k, 0)
				if op == 2 {
					c = expire(k, held[k])
				}
				r := tb.apply(&c)
				if _, ok := held[k]; ok != (r.Code == Released || r.Code == Expired) {
					t.Fatalf("release %s: %v, held %v", k, r.Code, ok)
				}
				delete(held, k)
			case 3:
				c := extend(k, held[k], 2)
				tb.apply(&c)
			case 4:
				tb.endEntry()
			case 5:
				tb.endEntry()
				tb.checkpointed()
				stored = map[string]bool{}
				for k := range held {
					stored[k] = true
				}
			}
			got := tableLocks(tb)
			if len(got) != len(held) {
				t.Fatalf("table holds %d, model %d", len(got), len(held))
			}
			for k, tok := range held {
				if got[k].token != tok {
					t.Fatalf("%s: token %d, model %d", k, got[k].token, tok)
				}
			}
			for k, was := range changedKeys(tb) {
				if was != stored[k] {
					t.Fatalf("%s changed, stored %v, but the checkpoint has it: %v", k, was, stored[k])
				}
			}
			for k := range stored {
				if _, ok := held[k]; !ok {
					if _, ch := changedKeys(tb)[k]; !ch {
						t.Fatalf("%s released since the checkpoint, not changed", k)
					}
				}
			}
			if n := len(tb.rows) - len(tb.free) - len(tb.freed); n != tb.index.n {
				t.Fatalf("%d rows in use, %d in the index", n, tb.index.n)
			}
		}
	})
}
