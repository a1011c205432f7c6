package statemachine

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

func openTestDB(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	db, err := OpenDB(dir)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// newTestDB opens a DB in a fresh temporary directory, closed at cleanup.
func newTestDB(t testing.TB) *pebble.DB {
	t.Helper()
	db := openTestDB(t, t.TempDir())
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openSM creates and opens shard's state machine over db.
func openSM(t testing.TB, db *pebble.DB, obs Observer, shard uint64) (*onDisk, uint64) {
	t.Helper()
	s := Factory(db, obs)(shard, 1).(*onDisk)
	applied, err := s.Open(make(chan struct{}))
	if err != nil {
		t.Fatalf("Open shard %d: %v", shard, err)
	}
	return s, applied
}

// syncSM writes and fsyncs s's checkpoint, as dragonboat's Sync does.
func syncSM(t testing.TB, s *onDisk) {
	t.Helper()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

func grant(key string, lease uint32) Command {
	return Command{Op: OpGrant, Key: []byte(key), LeaseMs: lease}
}

func release(key string, tok uint64) Command {
	return Command{Op: OpRelease, Key: []byte(key), Token: tok}
}

func extend(key string, tok uint64, lease uint32) Command {
	return Command{Op: OpExtend, Key: []byte(key), Token: tok, LeaseMs: lease}
}

func expire(key string, tok uint64) Command {
	return Command{Op: OpExpire, Key: []byte(key), Token: tok}
}

// encode builds one entry's bytes.
func encode(h Header, cmds ...Command) []byte {
	var b Batch
	for _, c := range cmds {
		b.Append(c)
	}
	return slices.Clone(b.Seal(h))
}

func entry(index uint64, cmds ...Command) sm.Entry {
	return sm.Entry{Index: index, Cmd: encode(Header{Proposer: 7, Seq: index}, cmds...)}
}

// update applies ents (cloned, so that callers can reuse them) and returns
// the per-entry Result.Value.
func update(t testing.TB, s *onDisk, ents ...sm.Entry) []uint64 {
	t.Helper()
	in := slices.Clone(ents)
	out, err := s.Update(in)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	vals := make([]uint64, len(out))
	for i, e := range out {
		vals[i] = e.Result.Value
	}
	return vals
}

// applied is one Observer.Applied call, copied.
type applied struct {
	shard, index uint64
	h            Header
	cmds         []Command
	results      []Result
}

// recorder is an Observer that keeps copies of what it was told.
type recorder struct {
	mu      sync.Mutex
	resets  map[uint64]map[string]Lock // shard -> the locks of its last Reset
	applied []applied
}

func newRecorder() *recorder { return &recorder{resets: map[uint64]map[string]Lock{}} }

func (r *recorder) Reset(shard uint64, each func(fn func(Lock))) {
	locks := map[string]Lock{}
	each(func(l Lock) {
		l.Key = bytes.Clone(l.Key)
		locks[string(l.Key)] = l
	})
	r.mu.Lock()
	r.resets[shard] = locks
	r.mu.Unlock()
}

func (r *recorder) Applied(shard, index uint64, h Header, cmds []Command, results []Result) {
	a := applied{shard: shard, index: index, h: h}
	if len(results) > 0 { // nil for a barrier, to compare easily
		a.results = slices.Clone(results)
	}
	for _, c := range cmds {
		c.Key = bytes.Clone(c.Key)
		a.cmds = append(a.cmds, c)
	}
	r.mu.Lock()
	r.applied = append(r.applied, a)
	r.mu.Unlock()
}

func (r *recorder) calls() []applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied)
}

func (r *recorder) lastReset(shard uint64) map[string]Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resets[shard]
}

// scan returns every key and value in db in [lo, hi) (all of it for nil
// bounds) as "key=value" lines, for whole-table comparisons.
func scan(t testing.TB, db *pebble.DB, lo, hi []byte) []string {
	t.Helper()
	it := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, fmt.Sprintf("%x=%x", it.Key(), it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scanShard returns the shard's table and meta rows.
func scanShard(t testing.TB, db *pebble.DB, shard uint64) []string {
	lo, hi := shardKey(tablePrefix, shard), shardKey(tablePrefix, shard+1)
	m := shardKey(metaPrefix, shard)
	out := scan(t, db, lo[:], hi[:])
	return append(out, scan(t, db, m[:], append(m[:], 0))...)
}

// locks returns the state machine's in-memory table as key -> row.
func locks(s *onDisk) map[string]row {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]row{}
	for k, i := range s.t.slot {
		out[k] = s.t.rows[i]
	}
	return out
}
