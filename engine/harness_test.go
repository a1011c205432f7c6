package engine

import (
	"bytes"
	"sync"
	"testing"

	dbsm "github.com/lni/dragonboat/v4/statemachine"

	sm "github.com/baton-dev/baton/statemachine"
)

// The shard tests drive a real lock table: each test shard has the state
// machine of shard 1 behind it, on a pebble DB of the test's own, which
// applies what the shard proposes (apply) and tells the shard as it would
// in a node (Node.Applied, under the shard's lock). The outcomes a test
// names are what it expects the table to answer; apply fails the test if
// the table answers otherwise.

// testTable is the state machine behind a test shard.
type testTable struct {
	t     testing.TB
	sm    dbsm.IOnDiskStateMachine
	obs   *seeingObserver
	index uint64
}

// seeingObserver is the node as the state machine's observer, which also
// keeps the results of the last entry, and can be made blind for a while:
// the table changes, the shard is not told (see applyUnseen).
type seeingObserver struct {
	*Node
	blind bool
	last  []sm.Result
}

func (o *seeingObserver) Applied(shardID, index uint64, h sm.Header, cmds []sm.Command, results []sm.Result) {
	o.last = append(o.last[:0], results...)
	if !o.blind {
		o.Node.Applied(shardID, index, h, cmds, results)
	}
}

var (
	testTablesMu sync.Mutex
	testTables   = map[*shard]*testTable{}
)

// attachTable opens the state machine of s (its node's only shard) on a new
// DB; it is closed when the test ends.
func attachTable(t testing.TB, s *shard) {
	t.Helper()
	db, err := sm.OpenDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	obs := &seeingObserver{Node: s.node}
	m := sm.Factory(db, obs)(s.id, 1)
	if _, err := m.Open(nil); err != nil {
		t.Fatal(err)
	}
	tt := &testTable{t: t, sm: m, obs: obs}
	testTablesMu.Lock()
	testTables[s] = tt
	testTablesMu.Unlock()
	t.Cleanup(func() {
		m.Close()
		testTablesMu.Lock()
		delete(testTables, s)
		testTablesMu.Unlock()
	})
}

func tableOf(s *shard) *testTable {
	testTablesMu.Lock()
	defer testTablesMu.Unlock()
	return testTables[s]
}

// apply applies p, the shard's proposal, to the table, which tells the
// shard; want are the outcomes the test expects of p's commands (their
// codes are compared; their tokens are the test's guess, and what the shard
// answered with the table's is for the test to check).
func apply(s *shard, p *proposal, cmds []sm.Command, want ...sm.Result) {
	applyEntry(s, p.data, want...)
}

// applyEntry applies one entry's bytes to s's table, as apply does.
func applyEntry(s *shard, data []byte, want ...sm.Result) {
	tt := tableOf(s)
	tt.t.Helper()
	tt.index++
	tt.obs.last = tt.obs.last[:0]
	if _, err := tt.sm.Update([]dbsm.Entry{{Index: tt.index, Cmd: data}}); err != nil {
		tt.t.Fatalf("update: %v", err)
	}
	got := tt.obs.last
	if len(got) != len(want) {
		tt.t.Fatalf("the table answered %+v, the test expects %+v", got, want)
	}
	for i := range want {
		if got[i].Code != want[i].Code {
			tt.t.Fatalf("the table answered %+v, the test expects %+v", got, want)
		}
	}
}

// applyUnseen applies an entry to s's table without telling s: what s
// has not seen yet.
func applyUnseen(s *shard, data []byte) {
	tt := tableOf(s)
	tt.obs.blind = true
	defer func() { tt.obs.blind = false }()
	tt.index++
	if _, err := tt.sm.Update([]dbsm.Entry{{Index: tt.index, Cmd: data}}); err != nil {
		tt.t.Fatalf("update: %v", err)
	}
}

// entryOf is the entry of a batch of cmds by proposer (a fence if fence).
func entryOf(proposer, seq uint64, fence bool, cmds ...sm.Command) []byte {
	var b sm.Batch
	for _, c := range cmds {
		b.Append(c)
	}
	return b.Seal(sm.Header{Proposer: proposer, Seq: seq, Fence: fence})
}

// recoverTable replaces s's table by one holding locks (their tokens must
// be of shard 1, and seq the counter past them), as a snapshot recovery
// would: through the real stream.
func recoverTable(t *testing.T, s *shard, locks ...sm.Lock) {
	t.Helper()
	db, err := sm.OpenDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := sm.Factory(db, nil)(s.id, 1)
	if _, err := src.Open(nil); err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// Grants until each lock's token is issued; the others released.
	var index uint64
	for _, l := range locks {
		for {
			index++
			key := l.Key
			ents := []dbsm.Entry{{Index: index, Cmd: entryOf(1, index, false, sm.Command{Op: sm.OpGrant, Key: key, LeaseMs: l.LeaseMs})}}
			if _, err := src.Update(ents); err != nil {
				t.Fatal(err)
			}
			r, _ := src.Lookup(sm.LookupKey(key))
			if r.(sm.LookupResult).Token == l.Token {
				break
			}
			if r.(sm.LookupResult).Token > l.Token {
				t.Fatalf("token %d of %s cannot be issued in order", l.Token, key)
			}
			index++
			ents = []dbsm.Entry{{Index: index, Cmd: entryOf(1, index, false, sm.Command{Op: sm.OpRelease, Key: key})}}
			if _, err := src.Update(ents); err != nil {
				t.Fatal(err)
			}
		}
	}
	snap, err := src.Lookup(sm.BackupQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := snap.(*sm.ShardBackup).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := tableOf(s).sm.RecoverFromSnapshot(&buf, nil); err != nil {
		t.Fatal(err)
	}
}

// holderOf is the token and lease deadline of key's holder in s's view (0,
// 0 when free).
func holderOf(s *shard, key string) (token uint64, deadline int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, held := s.table.Find([]byte(key))
	if !held {
		return 0, 0
	}
	return s.table.Token(slot), s.leases.deadlineOf(slot)
}
