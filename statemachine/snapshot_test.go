package statemachine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func saveSnapshot(t testing.TB, s *onDisk) []byte {
	t.Helper()
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.SaveSnapshot(ctx, &buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// filled returns a shard holding n locks after some churn.
func filled(t *testing.T, shard uint64, n int) *onDisk {
	t.Helper()
	s, _ := openSM(t, newTestDB(t), nil, shard)
	var idx uint64
	for i := 0; i < n; i += 100 {
		var cmds []Command
		for j := i; j < min(i+100, n); j++ {
			cmds = append(cmds, grant(fmt.Sprintf("key/%06d", j), uint32(j)), grant(fmt.Sprintf("gone/%d", j), 1))
			cmds = append(cmds, release(fmt.Sprintf("gone/%d", j), 0))
		}
		idx++
		update(t, s, entry(idx, cmds...))
	}
	return s
}

func TestSnapshotRoundTrip(t *testing.T) {
	src := filled(t, 3, 10000)
	data := saveSnapshot(t, src)
	if again := saveSnapshot(t, src); !bytes.Equal(data, again) {
		t.Fatal("two snapshots of the same state differ")
	}

	obs := newRecorder()
	dst, _ := openSM(t, newTestDB(t), obs, 3)
	if err := dst.RecoverFromSnapshot(bytesReader(data), make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if a, b := scanShard(t, src.db, 3), scanShard(t, dst.db, 3); !slices.Equal(a, b) {
		t.Fatalf("tables differ after recovery (%d vs %d rows)", len(a), len(b))
	}
	if !reflect.DeepEqual(locks(src), locks(dst)) {
		t.Fatal("in-memory tables differ")
	}
	if dst.applied != src.applied || dst.t.seq != src.t.seq {
		t.Fatalf("applied/seq %d/%d, want %d/%d", dst.applied, dst.t.seq, src.applied, src.t.seq)
	}
	if got := obs.lastReset(3); len(got) != 10000 || got["key/000042"].LeaseMs != 42 {
		t.Fatalf("Reset told %d locks", len(got))
	}
	checkMirror(t, dst)
	// Tokens continue above every token of the source.
	update(t, dst, entry(src.applied+1, grant("next", 1)))
	if tok := locks(dst)["next"].token; tok != (src.t.seq+1)<<ShardBits|3 {
		t.Fatalf("next token %d", tok)
	}
	// The applied index survives a checkpoint and a reopen too.
	syncSM(t, dst)
	if _, applied := openSM(t, dst.db, nil, 3); applied != src.applied+1 {
		t.Fatalf("reopened at %d", applied)
	}
}

func TestSnapshotIsPointInTime(t *testing.T) {
	s, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, s, entry(1, grant("a", 1)))
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, entry(2, release("a", 0), grant("b", 1)))
	var buf bytes.Buffer
	if err := s.SaveSnapshot(ctx, &buf, nil); err != nil {
		t.Fatal(err)
	}
	dst, _ := openSM(t, newTestDB(t), nil, 1)
	if err := dst.RecoverFromSnapshot(&buf, nil); err != nil {
		t.Fatal(err)
	}
	if got := locks(dst); len(got) != 1 || got["a"].token == 0 || dst.applied != 1 || dst.t.seq != 1 {
		t.Fatalf("recovered %v at %d", got, dst.applied)
	}
}

func TestRecoverReplacesShardOnly(t *testing.T) {
	src := filled(t, 2, 50)
	data := saveSnapshot(t, src)

	db := newTestDB(t)
	dst, _ := openSM(t, db, nil, 2)
	update(t, dst, entry(1, grant("stale", 1), grant("key/000001", 999)))
	neighbours := map[uint64]*onDisk{}
	for _, id := range []uint64{1, 3} {
		n, _ := openSM(t, db, nil, id)
		update(t, n, entry(1, grant("key/000001", 5), grant("stale", 5)))
		neighbours[id] = n
	}
	before1, before3 := scanShard(t, db, 1), scanShard(t, db, 3)

	if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
		t.Fatal(err)
	}
	if a, b := scanShard(t, src.db, 2), scanShard(t, db, 2); !slices.Equal(a, b) {
		t.Fatalf("shard 2 is not the snapshot's:\n%v\n%v", a, b)
	}
	if _, held := locks(dst)["stale"]; held {
		t.Error("a key the snapshot does not have survived in memory")
	}
	if !slices.Equal(before1, scanShard(t, db, 1)) || !slices.Equal(before3, scanShard(t, db, 3)) {
		t.Error("recovery touched another shard")
	}
}

func TestRecoverRejectsBadStreams(t *testing.T) {
	src := filled(t, 1, 300)
	data := saveSnapshot(t, src)
	flip := func(i int) []byte {
		d := bytes.Clone(data)
		d[i] ^= 0x40
		return d
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"header only", data[:snapHeaderLen]},
		{"cut in a record", data[:len(data)/2]},
		{"cut before the trailer", data[:len(data)-13]},
		{"cut in the count", data[:len(data)-6]},
		{"cut in the checksum", data[:len(data)-1]},
		{"bad magic", flip(0)},
		{"bad version", flip(4)},
		{"other shard", flip(5)},
		{"flipped seq", flip(17)},
		{"flipped key byte", flip(snapHeaderLen + 3)},
		{"flipped record in the middle", flip(len(data) / 2)},
		{"flipped count", flip(len(data) - 6)},
		{"flipped checksum", flip(len(data) - 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := newRecorder()
			dst, _ := openSM(t, newTestDB(t), obs, 1)
			update(t, dst, entry(1, grant("mine", 1)))
			before := scanShard(t, dst.db, 1)
			err := dst.RecoverFromSnapshot(bytesReader(tc.data), nil)
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("err = %v, want ErrBadSnapshot", err)
			}
			if after := scanShard(t, dst.db, 1); !slices.Equal(before, after) {
				t.Error("a rejected snapshot changed the table")
			}
			if got := locks(dst); len(got) != 1 {
				t.Errorf("a rejected snapshot changed memory: %v", got)
			}
		})
	}
	// Every truncation is caught, not just the ones above.
	dst, _ := openSM(t, newTestDB(t), nil, 1)
	for n := 0; n < len(data); n += 7 {
		if err := dst.RecoverFromSnapshot(bytesReader(data[:n]), nil); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(data), err)
		}
	}
}

func TestSnapshotStop(t *testing.T) {
	s := filled(t, 1, 10)
	stopped := make(chan struct{})
	close(stopped)
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSnapshot(ctx, io.Discard, stopped); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Errorf("SaveSnapshot: %v", err)
	}
	if len(s.snaps) != 0 {
		t.Error("SaveSnapshot kept its pebble snapshot")
	}
	data := saveSnapshot(t, s)
	if err := s.RecoverFromSnapshot(bytesReader(data), stopped); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Errorf("RecoverFromSnapshot: %v", err)
	}
}

func TestSaveSnapshotReportsWriteErrors(t *testing.T) {
	s := filled(t, 1, 5000)
	ctx, _ := s.PrepareSnapshot()
	err := s.SaveSnapshot(ctx, failingWriter{}, nil)
	if !errors.Is(err, sm.ErrSnapshotStreaming) {
		t.Fatalf("err = %v", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, sm.ErrSnapshotStreaming }

func TestCloseReleasesPreparedSnapshot(t *testing.T) {
	s := filled(t, 1, 10)
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(s.snaps) != 0 || ctx.(*snapCtx).snap != nil {
		t.Fatal("Close kept the pebble snapshot")
	}
	if err := s.SaveSnapshot(ctx, io.Discard, nil); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Fatalf("SaveSnapshot after Close: %v", err)
	}
}
