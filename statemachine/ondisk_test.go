package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// workload generates entries over a small key space so that commands
// collide, using tokens the table really issued (and some it did not).
type workload struct {
	rng    *rand.Rand
	tokens []uint64
	index  uint64
	// shared adds shared Grants (of 1 to 3 permits, so that permits
	// differ and keys fill up) and raises to LevelShared to the mix.
	shared bool
}

func (w *workload) key() string { return fmt.Sprintf("k%d", w.rng.IntN(40)) }

// owner is one of a few owners, or none, so that retries happen.
func (w *workload) owner() string {
	if n := w.rng.IntN(4); n > 0 {
		return fmt.Sprint("o", n)
	}
	return ""
}

func (w *workload) token() uint64 {
	if len(w.tokens) == 0 || w.rng.IntN(8) == 0 {
		return w.rng.Uint64N(1 << 20)
	}
	return w.tokens[w.rng.IntN(len(w.tokens))]
}

func (w *workload) entries() []sm.Entry {
	ents := make([]sm.Entry, 1+w.rng.IntN(4))
	for i := range ents {
		w.index++
		ents[i].Index = w.index
		// Two proposers, so that fences keep batches out.
		proposer := 1 + w.rng.Uint64N(2)
		switch n := w.rng.IntN(20); {
		case n == 0: // dragonboat may hand over an empty entry
			continue
		case n == 1:
			ents[i].Cmd = []byte{1, 2, 3} // malformed
			continue
		case n == 2:
			ents[i].Cmd = encode(Header{Proposer: proposer, Seq: w.index, Fence: true})
			continue
		case w.shared && n == 3 && w.rng.IntN(4) == 0:
			ents[i].Cmd = encode(Header{Proposer: 1, Raise: true, Level: LevelShared})
			continue
		}
		cmds := make([]Command, w.rng.IntN(30))
		for j := range cmds {
			switch w.rng.IntN(5) {
			case 0, 1:
				cmds[j] = grantBy(w.key(), w.rng.Uint32N(100000), w.owner())
				if w.shared && w.rng.IntN(3) > 0 {
					cmds[j].Permits = 1 + w.rng.Uint32N(3)
				}
			case 2:
				tok := w.token()
				if w.rng.IntN(4) == 0 {
					tok = 0
				}
				cmds[j] = release(w.key(), tok)
			case 3:
				cmds[j] = extend(w.key(), w.token(), w.rng.Uint32N(100000))
			case 4:
				cmds[j] = expire(w.key(), w.token())
			}
		}
		ents[i].Cmd = encode(Header{Proposer: proposer, Seq: w.index}, cmds...)
	}
	return ents
}

func (w *workload) learn(calls []applied) {
	for _, a := range calls {
		for _, r := range a.results {
			if r.Code == Granted {
				w.tokens = append(w.tokens, r.Token)
			}
		}
	}
}

func TestReplicasAgree(t *testing.T) {
	obsA, obsB := newRecorder(), newRecorder()
	dbA, dbB := newTestDB(t), newTestDB(t)
	a, _ := openSM(t, dbA, obsA, 5)
	b, _ := openSM(t, dbB, obsB, 5)
	w := &workload{rng: rand.New(rand.NewPCG(1, 2))}
	learned := 0
	for range 300 {
		ents := w.entries()
		va, vb := update(t, a, ents...), update(t, b, ents...)
		if !slices.Equal(va, vb) {
			t.Fatalf("results differ: %v vs %v", va, vb)
		}
		calls := obsA.calls()
		w.learn(calls[learned:])
		learned = len(calls)
	}
	if !reflect.DeepEqual(obsA.calls(), obsB.calls()) {
		t.Fatal("observers were told different things")
	}
	syncSM(t, a)
	syncSM(t, b)
	if ta, tb := scan(t, dbA, nil, nil), scan(t, dbB, nil, nil); !slices.Equal(ta, tb) {
		t.Fatalf("tables differ:\n%v\n%v", ta, tb)
	}
	if !reflect.DeepEqual(locks(a), locks(b)) {
		t.Fatal("in-memory tables differ")
	}
	checkMirror(t, a)
	// The workload must have exercised every outcome to mean anything.
	seen := map[Code]bool{}
	for _, c := range obsA.calls() {
		for _, r := range c.results {
			seen[r.Code] = true
		}
	}
	for c := Granted; c <= Fenced; c++ {
		if !seen[c] {
			t.Errorf("workload never produced code %d", c)
		}
	}
}

// checkMirror verifies that a checkpoint stores exactly the in-memory table.
func checkMirror(t *testing.T, s *onDisk) {
	t.Helper()
	syncSM(t, s)
	fresh, _ := openSM(t, s.db, nil, s.shard)
	checkOwners(t, s.t)
	checkOwners(t, fresh.t)
	if !reflect.DeepEqual(locks(s), locks(fresh)) {
		t.Fatalf("memory and pebble disagree:\n%v\n%v", locks(s), locks(fresh))
	}
	if s.t.seq != fresh.t.seq || s.t.fence != fresh.t.fence || s.t.level != fresh.t.level {
		t.Fatalf("memory has seq %d, fence %d, level %d; pebble %d, %d, %d",
			s.t.seq, s.t.fence, s.t.level, fresh.t.seq, fresh.t.fence, fresh.t.level)
	}
	if s.t.dirVersion != fresh.t.dirVersion || !bytes.Equal(s.t.dir, fresh.t.dir) || (fresh.t.dir == nil) != (fresh.t.dirVersion == 0) {
		t.Fatalf("memory has directory %d %q; pebble %d %q", s.t.dirVersion, s.t.dir, fresh.t.dirVersion, fresh.t.dir)
	}
}

func TestUpdateResultsAndObserver(t *testing.T) {
	obs := newRecorder()
	s, index := openSM(t, newTestDB(t), obs, 1)
	if index != 0 {
		t.Fatalf("new shard opened at index %d", index)
	}
	ents := []sm.Entry{
		entry(1, grant("a", 10), grant("b", 20), grant("a", 30)),
		{Index: 2},                        // empty: skipped
		{Index: 3, Cmd: []byte("broken")}, // malformed: skipped
		entry(4),                          // barrier
		entry(5, release("a", 0), expire("b", 2<<ShardBits|1)),
	}
	if got, want := update(t, s, ents...), []uint64{3, 0, 0, 0, 2}; !slices.Equal(got, want) {
		t.Fatalf("Result.Value = %v, want %v", got, want)
	}
	calls := obs.calls()
	want := []applied{
		{1, 1, Header{Proposer: 7, Seq: 1}, []Command{grant("a", 10), grant("b", 20), grant("a", 30)},
			[]Result{{Code: Granted, Token: 1<<ShardBits | 1}, {Code: Granted, Token: 2<<ShardBits | 1}, {Code: GrantRejected, Token: 0}}},
		{1, 4, Header{Proposer: 7, Seq: 4}, nil, nil},
		{1, 5, Header{Proposer: 7, Seq: 5}, []Command{release("a", 0), expire("b", 2<<ShardBits|1)},
			[]Result{{Code: Released, Token: 1<<ShardBits | 1}, {Code: Expired, Token: 2<<ShardBits | 1}}},
	}
	for i := range want {
		want[i].cmds = normalizeAll(want[i].cmds)
	}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("observer got\n%+v\nwant\n%+v", calls, want)
	}
	// Each entry's size in the log, which the engine bounds the log by.
	obs.mu.Lock()
	sizes := slices.Clone(obs.sizes)
	obs.mu.Unlock()
	if want := []int{len(ents[0].Cmd), len(ents[3].Cmd), len(ents[4].Cmd)}; !slices.Equal(sizes, want) {
		t.Fatalf("Header.Size told %v, want the entries' sizes %v", sizes, want)
	}
	syncSM(t, s)
	if got, _, _ := s.readMeta(); got.applied != 5 {
		t.Errorf("meta applied = %d, want 5", got.applied)
	}
}

// TestUpdateFence applies a log with fences: the observer is told of each
// fence (no commands, Fence set) and of every batch the fence keeps out,
// with every result Fenced, and such a batch changes nothing.
func TestUpdateFence(t *testing.T) {
	const a, b = 0xa, 0xb
	tok := func(seq uint64) uint64 { return seq<<ShardBits | 1 }
	obs := newRecorder()
	db := newTestDB(t)
	s, _ := openSM(t, db, obs, 1)
	ents := []sm.Entry{
		entryBy(1, b, grant("x", 10)), // no fence yet: applies
		fenceEntry(2, a),
		entryBy(3, b, grant("y", 20), release("x", 0), extend("x", tok(1), 5)), // kept out
		entryBy(4, a, grant("y", 30), extend("x", tok(1), 40)),
		entryBy(5, b), // no commands: nothing to keep out
		fenceEntry(6, b),
		entryBy(7, a, release("y", 0)), // kept out
		entryBy(8, b, release("y", 0)),
	}
	if got, want := update(t, s, ents...), []uint64{1, 0, 3, 2, 0, 0, 1, 1}; !slices.Equal(got, want) {
		t.Fatalf("Result.Value = %v, want %v", got, want)
	}
	fenced := []Result{{Code: Fenced}, {Code: Fenced}, {Code: Fenced}}
	want := []applied{
		{1, 1, Header{Proposer: b, Seq: 1}, []Command{grant("x", 10)}, []Result{{Code: Granted, Token: tok(1)}}},
		{1, 2, Header{Proposer: a, Seq: 2, Fence: true}, nil, nil},
		{1, 3, Header{Proposer: b, Seq: 3}, []Command{grant("y", 20), release("x", 0), extend("x", tok(1), 5)}, fenced},
		{1, 4, Header{Proposer: a, Seq: 4}, []Command{grant("y", 30), extend("x", tok(1), 40)},
			[]Result{{Code: Granted, Token: tok(2)}, {Code: Extended, Token: tok(1)}}},
		{1, 5, Header{Proposer: b, Seq: 5}, nil, nil},
		{1, 6, Header{Proposer: b, Seq: 6, Fence: true}, nil, nil},
		{1, 7, Header{Proposer: a, Seq: 7}, []Command{release("y", 0)}, fenced[:1]},
		{1, 8, Header{Proposer: b, Seq: 8}, []Command{release("y", 0)}, []Result{{Code: Released, Token: tok(2)}}},
	}
	for i := range want {
		want[i].cmds = normalizeAll(want[i].cmds)
	}
	if calls := obs.calls(); !reflect.DeepEqual(calls, want) {
		t.Fatalf("observer got\n%+v\nwant\n%+v", calls, want)
	}
	if got := locks(s); !maps.Equal(got, map[string]lockState{"x": {tok(1), 40, ""}}) || s.t.seq != 2 || s.t.fence != b {
		t.Fatalf("table %v, seq %d, fence %x", got, s.t.seq, s.t.fence)
	}
	checkMirror(t, s)
}

func normalizeAll(cmds []Command) []Command {
	var out []Command
	for _, c := range cmds {
		out = append(out, normalize(c))
	}
	return out
}

func TestObserverSeesTheAppliedTable(t *testing.T) {
	var s *onDisk
	var seen LookupResult
	obs := &funcObserver{applied: func(shard, index uint64) {
		// The engine answers clients from here: a read must agree.
		r, err := s.Lookup(LookupKey("a"))
		if err != nil {
			t.Error(err)
		}
		seen = r.(LookupResult)
	}}
	s, _ = openSM(t, newTestDB(t), obs, 1)
	update(t, s, entry(1, grant("a", 1)))
	if !seen.Held || seen.Token != 1<<ShardBits|1 {
		t.Fatalf("observer's Lookup saw %+v", seen)
	}
}

type funcObserver struct {
	applied func(shard, index uint64)
	table   sync.Mutex
}

func (f *funcObserver) Locker(uint64) sync.Locker { return &f.table }
func (f *funcObserver) Reset(uint64, Table)       {}
func (f *funcObserver) Applied(shard, index uint64, _ Header, _ []Command, _ []Result) {
	f.applied(shard, index)
}

func TestIdempotentCommands(t *testing.T) {
	tok := uint64(1<<ShardBits | 1)
	tests := []struct {
		name  string
		cmd   Command
		first Code
		again Code
	}{
		{"expire", expire("a", tok), Expired, Noop},
		{"release with token", release("a", tok), Released, NotHeld},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := newRecorder()
			db := newTestDB(t)
			s, _ := openSM(t, db, obs, 1)
			update(t, s, entry(1, grant("a", 10), grant("b", 10)))
			e := entry(2, tc.cmd)
			update(t, s, e)
			syncSM(t, s)
			before := scanShard(t, db, 1)
			e.Index = 3 // a duplicate proposal lands at a later index
			update(t, s, e)
			syncSM(t, s)
			after := scanShard(t, db, 1)
			calls := obs.calls()
			if got := calls[1].results[0].Code; got != tc.first {
				t.Errorf("first: %d, want %d", got, tc.first)
			}
			if got := calls[2].results[0]; got != (Result{Code: tc.again}) {
				t.Errorf("again: %+v, want code %d", got, tc.again)
			}
			// Only the meta's applied index may change.
			if !slices.Equal(before[:len(before)-1], after[:len(after)-1]) {
				t.Errorf("table changed:\n%v\n%v", before, after)
			}
			if _, held := locks(s)["b"]; !held {
				t.Error("the other key was touched")
			}
		})
	}
}

func TestReopenContinues(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir)
	s, _ := openSM(t, db, nil, 9)
	var maxTok uint64
	for i := uint64(1); i <= 20; i++ {
		update(t, s, entry(i, grant(fmt.Sprint("k", i), uint32(i)), release(fmt.Sprint("k", i-1), 0)))
	}
	update(t, s, entry(21, grantBy("mine", 77, "owner-1")))
	for _, r := range locks(s) {
		maxTok = max(maxTok, r.token)
	}
	maxTok = max(maxTok, 20<<ShardBits|9)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(LookupKey("k20")); !errors.Is(err, ErrClosed) {
		t.Errorf("Lookup after Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openTestDB(t, dir)
	defer db.Close()
	obs := newRecorder()
	s, applied := openSM(t, db, obs, 9)
	if applied != 21 {
		t.Fatalf("Open returned %d, want 21", applied)
	}
	mine := Lock{Key: []byte("mine"), Token: 21<<ShardBits | 9, LeaseMs: 77, Owner: []byte("owner-1")}
	if got := obs.lastReset(9); len(got) != 2 || got["k20"].Token != 20<<ShardBits|9 || got["k20"].LeaseMs != 20 ||
		got["k20"].Owner != nil || !reflect.DeepEqual(got["mine"], mine) {
		t.Fatalf("Reset told %v", got)
	}
	update(t, s, entry(22, grant("new", 1), grantBy("mine", 1, "owner-1"), grantBy("mine", 1, "owner-2")))
	res := obs.calls()[0].results
	if res[0].Token <= max(maxTok, mine.Token) {
		t.Fatalf("token after reopen %d, not above %d", res[0].Token, max(maxTok, mine.Token))
	}
	if res[1] != (Result{Code: Regranted, Token: mine.Token}) || res[2] != (Result{Code: GrantRejected}) {
		t.Fatalf("retries after reopen: %+v", res[1:])
	}
	if got := locks(s)["mine"]; got != (lockState{mine.Token, 77, "owner-1"}) {
		t.Fatalf("after the retry: %+v", got)
	}
}

func TestShardsShareADB(t *testing.T) {
	db := newTestDB(t)
	obs := newRecorder()
	s1, _ := openSM(t, db, obs, 1)
	s2, _ := openSM(t, db, obs, 2)
	update(t, s1, entry(1, grant("a", 1), grant("b", 1)))
	update(t, s2, entry(1, grant("a", 2)))
	update(t, s2, entry(2, grant("b", 2), release("a", 0)))
	if r, _ := s1.Lookup(LookupKey("a")); !r.(LookupResult).Held {
		t.Error("shard 2's release freed shard 1's key")
	}
	if r, _ := s2.Lookup(LookupKey("a")); r.(LookupResult).Held {
		t.Error("shard 2 still holds a")
	}
	tokens := map[uint64]bool{}
	for _, c := range obs.calls() {
		for _, r := range c.results {
			if r.Code != Granted {
				continue
			}
			if tokens[r.Token] {
				t.Errorf("token %d issued twice", r.Token)
			}
			tokens[r.Token] = true
			if r.Token&MaxShards != c.shard {
				t.Errorf("shard %d issued token %d", c.shard, r.Token)
			}
		}
	}
	// Reopening each shard sees only its own rows.
	syncSM(t, s1)
	syncSM(t, s2)
	r1, _ := openSM(t, db, nil, 1)
	r2, _ := openSM(t, db, nil, 2)
	if len(locks(r1)) != 2 || len(locks(r2)) != 1 {
		t.Errorf("reopened shards hold %v and %v", locks(r1), locks(r2))
	}
}

func TestOpenRejectsBadShardID(t *testing.T) {
	db := newTestDB(t)
	for _, id := range []uint64{0, MaxShards + 1, 1 << 40} {
		if _, err := Factory(db, nil)(id, 1).Open(nil); err == nil {
			t.Errorf("shard %d opened", id)
		}
	}
	if _, err := Factory(db, nil)(MaxShards, 1).Open(nil); err != nil {
		t.Errorf("shard %d: %v", MaxShards, err)
	}
}

func TestOpenDropsRowsWithoutMeta(t *testing.T) {
	db := newTestDB(t)
	s, _ := openSM(t, db, nil, 4)
	update(t, s, entry(1, grant("a", 1)))
	other, _ := openSM(t, db, nil, 5)
	update(t, other, entry(1, grant("a", 1)))
	syncSM(t, s)
	syncSM(t, other)
	// What a crash in the middle of RecoverFromSnapshot leaves behind.
	if err := db.Delete(s.metaKey[:], nil); err != nil {
		t.Fatal(err)
	}
	obs := newRecorder()
	s, applied := openSM(t, db, obs, 4)
	if applied != 0 || len(locks(s)) != 0 || len(obs.lastReset(4)) != 0 {
		t.Fatalf("opened at %d with %v", applied, locks(s))
	}
	if rows := scanShard(t, db, 4); len(rows) != 0 {
		t.Fatalf("rows left: %v", rows)
	}
	if rows := scanShard(t, db, 5); len(rows) != 2 {
		t.Fatalf("other shard: %v", rows)
	}
}

func TestLookup(t *testing.T) {
	s, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, s, entry(1, grant("a", 42), grantBy("o", 7, "me")))
	tests := []struct {
		q    any
		want any
		err  bool
	}{
		{LookupKey("a"), LookupResult{Held: true, Token: 1<<ShardBits | 1, LeaseMs: 42}, false},
		{LookupKey("o"), LookupResult{Held: true, Token: 2<<ShardBits | 1, LeaseMs: 7, Owner: "me"}, false},
		{LookupKey("b"), LookupResult{}, false},
		{[]byte("a"), nil, true},
		{"a", nil, true},
	}
	for _, tc := range tests {
		got, err := s.Lookup(tc.q)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Lookup(%#v) = %#v, %v", tc.q, got, err)
		}
	}
}

// TestConcurrentLookup runs Lookup against Update and RecoverFromSnapshot, as
// dragonboat may; run with -race.
func TestConcurrentLookup(t *testing.T) {
	db := newTestDB(t)
	s, _ := openSM(t, db, nil, 1)
	src, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, src, entry(1, grant("x", 1)))
	snap := saveSnapshot(t, src)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Lookup(LookupKey("k1")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := uint64(1); i <= 200; i++ {
		update(t, s, entry(i, grant("k1", 1), release("k1", 0), grant("k1", 2)))
	}
	if err := s.RecoverFromSnapshot(bytesReader(snap), nil); err != nil {
		t.Error(err)
	}
	close(stop)
	wg.Wait()
}

// TestCheckpoint checks what pebble holds between checkpoints: a crash
// (a second state machine opened over the same DB without Close) finds the
// last checkpoint, and applying the log from its index rebuilds the table.
func TestCheckpoint(t *testing.T) {
	db := newTestDB(t)
	s, _ := openSM(t, db, nil, 2)
	log := []sm.Entry{
		entry(1, grantBy("a", 10, "oa"), grant("b", 20), grantBy("c", 30, "oc")),
		entry(2, release("a", 0), extend("b", 2<<ShardBits|2, 25), grantBy("c", 1, "oc")),
	}
	update(t, s, log...)
	crashed := func() (*onDisk, uint64) {
		fresh, applied := openSM(t, db, nil, 2)
		var replay []sm.Entry
		for _, e := range log {
			if e.Index > applied {
				replay = append(replay, e)
			}
		}
		update(t, fresh, replay...)
		if !reflect.DeepEqual(locks(fresh), locks(s)) {
			t.Fatalf("replayed from %d: %v, want %v", applied, locks(fresh), locks(s))
		}
		return fresh, applied
	}
	if _, applied := crashed(); applied != 0 {
		t.Fatalf("no checkpoint yet, but Open returned %d", applied)
	}

	syncSM(t, s)
	log = append(log, entry(3, release("b", 0), grantBy("a", 1, "ob"), grantBy("tmp", 1, "ot")), entry(4, release("tmp", 0)))
	update(t, s, log[2:]...)
	if _, applied := crashed(); applied != 2 {
		t.Fatalf("checkpoint at 2, but Open returned %d", applied)
	}
	syncSM(t, s)
	if rows := scanShard(t, db, 2); len(rows) != 3 { // a, c and the meta
		t.Fatalf("checkpoint holds %v", rows)
	}
	if _, applied := crashed(); applied != 4 {
		t.Fatalf("checkpoint at 4, but Open returned %d", applied)
	}

	// Enough changed keys make Update write a checkpoint of its own.
	var cmds []Command
	for i := range checkpointKeys {
		cmds = append(cmds, grant(fmt.Sprint("many/", i), 1))
	}
	log = append(log, entry(5, cmds...))
	update(t, s, log[4])
	if m, _, _ := s.readMeta(); m.applied != 5 || s.t.dirty != 0 {
		t.Fatalf("after %d changed keys: meta at %d, %d keys still changed", checkpointKeys, m.applied, s.t.dirty)
	}
	crashed()

	// So do enough commands, however few keys they change.
	cmds = cmds[:0]
	for range checkpointCommands / 2 {
		cmds = append(cmds, grant("busy", 1), release("busy", 0))
	}
	log = append(log, entry(6, cmds...))
	update(t, s, log[5])
	if m, _, _ := s.readMeta(); m.applied != 6 {
		t.Fatalf("after %d commands: meta at %d", checkpointCommands, m.applied)
	}
}

// TestRowLayout checks the checkpoint's rows byte for byte: a lock without
// owner is the 12 bytes it was before owners existed, one with an owner
// has it after them; Open refuses a value of any other length.
func TestRowLayout(t *testing.T) {
	db := newTestDB(t)
	s, _ := openSM(t, db, nil, 1)
	update(t, s, entry(1, grant("a", 0x0304), grantBy("b", 5, "me")))
	syncSM(t, s)
	want := []string{
		"740000000161=" + "0104000000000000" + "04030000", // 't' shard 1 "a" -> token 1<<10|1, lease
		"740000000162=" + "0108000000000000" + "05000000" + "6d65",
		"6d00000001=" + "0100000000000000" + "0200000000000000" + "0000000000000000", // meta: applied 1, seq 2, no fence
	}
	if got := scanShard(t, db, 1); !slices.Equal(got, want) {
		t.Fatalf("rows\n%v\nwant\n%v", got, want)
	}
	update(t, s, fenceEntry(2, 0x0102030405060708))
	syncSM(t, s)
	want[2] = "6d00000001=" + "0200000000000000" + "0200000000000000" + "0807060504030201" // applied 2, seq 2, fence
	if got := scanShard(t, db, 1); !slices.Equal(got, want) {
		t.Fatalf("rows after a fence\n%v\nwant\n%v", got, want)
	}
	for _, n := range []int{rowLen - 1, rowLen + MaxOwnerLen + 1} {
		v := make([]byte, n) // n >= 8: a valid token, a bad length
		binary.LittleEndian.PutUint64(v, 1<<ShardBits|1)
		k := shardKey(tablePrefix, 1)
		if err := db.Set(append(k[:], 'c'), v, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := Factory(db, nil)(1, 1).Open(nil); err == nil || !strings.Contains(err.Error(), "corrupt row") {
			t.Errorf("Open of a %d-byte row: %v", n, err)
		}
	}
}

// TestMetaFence: the fence is part of the checkpoint's meta, so it
// survives a clean restart and a crash (the log from the checkpoint's index
// applies its fences again); a meta written before the fence existed
// (16 bytes) opens with no fence, and a meta of any other length is
// refused.
func TestMetaFence(t *testing.T) {
	const a, b = 0xa, 0xb
	dir := t.TempDir()
	db := openTestDB(t, dir)
	s, _ := openSM(t, db, nil, 3)
	update(t, s, fenceEntry(1, a), entryBy(2, a, grant("k", 1)))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTestDB(t, dir)
	defer db.Close()
	s, applied := openSM(t, db, nil, 3)
	if applied != 2 || s.t.fence != a {
		t.Fatalf("reopened at %d with fence %x, want 2, %x", applied, s.t.fence, a)
	}
	// The fence keeps b out after the restart as before it.
	obs := newRecorder()
	s.obs = obs
	update(t, s, entryBy(3, b, release("k", 0)))
	if r := obs.calls()[0].results; !slices.Equal(r, []Result{{Code: Fenced}}) {
		t.Fatalf("b after the restart: %+v", r)
	}

	// A crash after b's fence, before any checkpoint: the checkpoint has
	// a's fence, and the log applied again from its index brings b's.
	syncSM(t, s)
	log := []sm.Entry{fenceEntry(4, b), entryBy(5, b, release("k", 0))}
	update(t, s, log...)
	crashed, applied := openSM(t, db, nil, 3)
	if applied != 3 || crashed.t.fence != a {
		t.Fatalf("crashed at %d with fence %x, want 3, %x", applied, crashed.t.fence, a)
	}
	update(t, crashed, log...)
	if crashed.t.fence != b || !reflect.DeepEqual(locks(crashed), locks(s)) {
		t.Fatalf("replayed: fence %x, %v; want %x, %v", crashed.t.fence, locks(crashed), b, locks(s))
	}

	// The meta as the release before the fence wrote it, and lengths no
	// release wrote.
	key := shardKey(metaPrefix, 3)
	for _, n := range []int{0, 8, metaLenBeforeFence - 1, metaLenBeforeFence, metaLenBeforeFence + 1, metaLen - 1, metaLen, metaLen + 1, metaLenVersioned + 1} {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(i + 1) // applied 0x0807060504030201, seq 0x100f0e..., fence 0x181716...
		}
		if err := db.Set(key[:], v, nil); err != nil {
			t.Fatal(err)
		}
		got, found, err := Factory(db, nil)(3, 1).(*onDisk).readMeta()
		switch n {
		case metaLenBeforeFence, metaLen:
			want := meta{applied: 0x0807060504030201, seq: 0x100f0e0d0c0b0a09, level: levelNone}
			if n == metaLen {
				want.fence = 0x1817161514131211
			}
			if err != nil || !found || got != want {
				t.Errorf("%d-byte meta: %+v, %v, %v; want %+v", n, got, found, err, want)
			}
			if o, applied := openSM(t, db, nil, 3); applied != want.applied || o.t.seq != want.seq || o.t.fence != want.fence {
				t.Errorf("%d-byte meta: opened at %x, seq %x, fence %x", n, applied, o.t.seq, o.t.fence)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("meta is %d bytes", n)) {
				t.Errorf("%d-byte meta: %+v, %v", n, got, err)
			}
			if _, err := Factory(db, nil)(3, 1).Open(nil); err == nil {
				t.Errorf("Open with a %d-byte meta succeeded", n)
			}
		}
	}
}
