package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/baton-dev/baton/backup"
)

// captureOf is the capture function of WriteBackup over state machines,
// shards[id-1] being shard id's, as the engine's StaleRead is over its
// replicas.
func captureOf(shards ...*onDisk) func(uint64) (*ShardBackup, error) {
	return func(id uint64) (*ShardBackup, error) {
		v, err := shards[id-1].Lookup(BackupQuery{})
		if err != nil {
			return nil, err
		}
		return v.(*ShardBackup), nil
	}
}

// backupOf is a backup file of the shards' tables.
func backupOf(t testing.TB, shards ...*onDisk) []byte {
	t.Helper()
	var buf bytes.Buffer
	info, err := WriteBackup(&buf, len(shards), captureOf(shards...))
	if err != nil {
		t.Fatal(err)
	}
	if info.Bytes != int64(buf.Len()) || info.Shards != len(shards) {
		t.Fatalf("WriteBackup says %+v, wrote %d bytes", info, buf.Len())
	}
	return buf.Bytes()
}

// backupSources are three shards, one per stream version: shard 1 with
// owners (version 2), shard 2 with a fence (version 3) and a token counter
// above its held token, shard 3 empty (version 1).
func backupSources(t *testing.T) []*onDisk {
	s1 := filled(t, 1, 3000)
	s2, _ := openSM(t, newTestDB(t), nil, 2)
	update(t, s2, entry(1, grant("a", 100), grant("b", 200), release("b", 0)), fenceEntry(2, 9))
	s3, _ := openSM(t, newTestDB(t), nil, 3)
	return []*onDisk{s1, s2, s3}
}

func TestBackupRoundTrip(t *testing.T) {
	src := backupSources(t)
	data := backupOf(t, src...)

	// Each part is the stream SaveSnapshot writes of the same table.
	r, err := backup.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	versions := []byte{snapVersion, snapVersionFence, snapVersionNoOwners}
	for i, s := range src {
		p, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		part, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if want := saveSnapshot(t, s); !bytes.Equal(part, want) {
			t.Errorf("shard %d: the backup's part (%d bytes, version %d) is not the snapshot stream (%d bytes, version %d)",
				i+1, len(part), part[4], len(want), want[4])
		}
		if part[4] != versions[i] {
			t.Errorf("shard %d: part of version %d, want %d", i+1, part[4], versions[i])
		}
		if p.Locks != uint64(len(locks(s))) {
			t.Errorf("shard %d: frame says %d locks", i+1, p.Locks)
		}
	}

	if info, err := CheckBackup(bytes.NewReader(data)); err != nil || info.Shards != 3 || info.Locks != 3001 {
		t.Fatalf("CheckBackup: %+v, %v", info, err)
	}
	db := newTestDB(t)
	info, err := RestoreBackup(db, bytes.NewReader(data))
	if err != nil || info.Shards != 3 || info.Locks != 3001 {
		t.Fatalf("RestoreBackup: %+v, %v", info, err)
	}
	for i, s := range src {
		id := uint64(i + 1)
		obs := newRecorder()
		dst, applied := openSM(t, db, obs, id)
		if applied != 0 || dst.t.seq != s.t.seq || dst.t.fence != 0 {
			t.Fatalf("shard %d: opened at %d with seq %d, fence %d; want 0, %d, 0", id, applied, dst.t.seq, dst.t.fence, s.t.seq)
		}
		if !reflect.DeepEqual(locks(dst), locks(s)) {
			t.Fatalf("shard %d: restored table differs", id)
		}
		if got := obs.lastReset(id); len(got) != len(locks(s)) {
			t.Fatalf("shard %d: Reset told %d locks", id, len(got))
		}
		// Tokens go on above every token of the backup, released ones
		// included (shard 2's "b").
		update(t, dst, entry(1, grant("next", 1)))
		if tok := locks(dst)["next"].token; tok != (s.t.seq+1)<<ShardBits|id {
			t.Fatalf("shard %d: next token %d, seq was %d", id, tok, s.t.seq)
		}
	}
	// An owner's retry finds its grant, and the restored table takes new
	// batches from any proposer (fence 0).
	dst, _ := openSM(t, db, nil, 1)
	update(t, dst, entryBy(1, 12345, grantBy("key/000042", 7, "owner-42")))
	if got, want := locks(dst)["key/000042"], locks(src[0])["key/000042"]; got != want {
		t.Fatalf("retry changed the lock: %+v, was %+v", got, want)
	}
}

// TestBackupIsPointInTime: a shard's part is its table when Lookup captured
// it, whatever applied after.
func TestBackupIsPointInTime(t *testing.T) {
	s, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, s, entry(1, grant("a", 1), grantBy("b", 2, "o")))
	v, err := s.Lookup(BackupQuery{})
	if err != nil {
		t.Fatal(err)
	}
	captured := v.(*ShardBackup)
	want := locks(s)
	update(t, s, entry(2, release("a", 0), grant("c", 3)), fenceEntry(3, 9))
	syncSM(t, s)

	var buf bytes.Buffer
	if _, err := WriteBackup(&buf, 1, func(uint64) (*ShardBackup, error) { return captured, nil }); err != nil {
		t.Fatal(err)
	}
	db := newTestDB(t)
	if _, err := RestoreBackup(db, &buf); err != nil {
		t.Fatal(err)
	}
	dst, _ := openSM(t, db, nil, 1)
	if got := locks(dst); !reflect.DeepEqual(got, want) || dst.t.seq != 2 {
		t.Fatalf("restored %v with seq %d; want %v with seq 2", got, dst.t.seq, want)
	}
	if captured.shard != 1 || len(captured.locks) != 2 {
		t.Fatalf("captured shard %d, %d locks", captured.shard, len(captured.locks))
	}
}

// TestBackupDuringUpdates: captures taken while Update applies (race
// detector on) each see one applied index, with its seq and its table.
func TestBackupDuringUpdates(t *testing.T) {
	s, _ := openSM(t, newTestDB(t), nil, 1)
	update(t, s, entry(1, grant("k/0", 1)))
	const entries = 300
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			v, err := s.Lookup(BackupQuery{})
			if err != nil {
				errc <- err
				return
			}
			// Entry i grants k/i and releases k/i-1: one lock, whose
			// token's seq is the applied index.
			b := v.(*ShardBackup)
			if len(b.locks) != 1 || b.meta.seq != b.meta.applied || b.locks[0].token != b.meta.seq<<ShardBits|1 ||
				b.locks[0].key != fmt.Sprintf("k/%d", b.meta.applied-1) {
				errc <- fmt.Errorf("captured %+v", b)
				return
			}
		}
	}()
	for i := uint64(2); i <= entries; i++ {
		update(t, s, entry(i, grant(fmt.Sprintf("k/%d", i-1), 1), release(fmt.Sprintf("k/%d", i-2), 0)))
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

// part is one frame of a backup file built by hand.
type part struct {
	locks uint64
	data  []byte
}

// buildBackup frames parts (shards 1, 2, ...) into a backup file.
func buildBackup(t testing.TB, parts ...part) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := backup.NewWriter(&buf, len(parts))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		err := w.Part(backup.Part{Shard: uint64(i + 1), Locks: p.locks, Length: uint64(len(p.data))},
			func(w io.Writer) error { _, err := w.Write(p.data); return err })
		if err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestRestoreRejectsBadBackups: a bad file is an error from CheckBackup and
// RestoreBackup, and a failed restore leaves no table: no meta, so Open
// finds every shard empty (and drops the rows of the shards written before
// the bad one).
func TestRestoreRejectsBadBackups(t *testing.T) {
	src := backupSources(t)
	good := backupOf(t, src...)
	stream1 := saveSnapshot(t, src[0])
	tok := uint64(1<<ShardBits | 1)
	one := []Lock{{Key: []byte("k"), Token: tok, LeaseMs: 1}}
	valid := encodeSnapshot(snapVersionNoOwners, 1, 5, 1, one)
	tooMany := binary.LittleEndian.AppendUint32(append([]byte(backup.Magic), backup.Version), MaxShards+1)
	tests := []struct {
		name, want string
		data       []byte
	}{
		{"truncated", "truncated", good[:len(good)/2]},
		{"flipped byte", "", func() []byte {
			d := bytes.Clone(good)
			d[len(d)/3] ^= 1
			return d
		}()},
		{"not a backup", "not a baton backup", stream1},
		{"more shards than a node can have", "1024 shards", tooMany},
		{"part of another shard", "snapshot is of shard 2", buildBackup(t, part{1, encodeSnapshot(snapVersionNoOwners, 2, 5, 1, nil)})},
		{"part not a stream", "not a baton snapshot", buildBackup(t, part{0, []byte("hello, world, and more bytes than a header")})},
		{"part cut short", "truncated", buildBackup(t, part{1, valid[:len(valid)-5]})},
		{"bytes after the stream", "bytes after the table", buildBackup(t, part{1, append(bytes.Clone(valid), 0)})},
		{"frame counts other locks", "2 in the backup's frame", buildBackup(t, part{2, valid})},
		{"second shard bad", "snapshot is of shard 1", buildBackup(t, part{1, valid}, part{1, valid})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := CheckBackup(bytes.NewReader(tc.data)); !isBadBackup(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckBackup: %v, want a bad backup saying %q", err, tc.want)
			}
			db := newTestDB(t)
			if _, err := RestoreBackup(db, bytes.NewReader(tc.data)); !isBadBackup(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RestoreBackup: %v, want a bad backup saying %q", err, tc.want)
			}
			if shard, found, err := anyMeta(db); err != nil || found {
				t.Fatalf("a failed restore left the meta of shard %d (%v)", shard, err)
			}
			for id := uint64(1); id <= 3; id++ {
				s, applied := openSM(t, db, nil, id)
				if applied != 0 || len(locks(s)) != 0 || s.t.seq != 0 {
					t.Fatalf("shard %d after a failed restore: applied %d, %d locks, seq %d", id, applied, len(locks(s)), s.t.seq)
				}
			}
			lo, hi := shardKey(tablePrefix, 1), shardKey(tablePrefix, 4)
			if rows := scan(t, db, lo[:], hi[:]); len(rows) != 0 {
				t.Fatalf("%d rows survived Open", len(rows))
			}
		})
	}
}

func isBadBackup(err error) bool {
	return errors.Is(err, backup.ErrBad) || errors.Is(err, ErrBadSnapshot)
}

// TestRestoreRefusesATable: a lock table with a shard in it is not
// restored into, and stays as it was.
func TestRestoreRefusesATable(t *testing.T) {
	data := backupOf(t, backupSources(t)...)
	db := newTestDB(t)
	s, _ := openSM(t, db, nil, 3)
	update(t, s, entry(1, grant("mine", 1)))
	syncSM(t, s)
	before := scan(t, db, nil, nil)
	_, err := RestoreBackup(db, bytes.NewReader(data))
	if err == nil || !strings.Contains(err.Error(), "already has shard 3") {
		t.Fatalf("RestoreBackup into a table with shard 3: %v", err)
	}
	if after := scan(t, db, nil, nil); !reflect.DeepEqual(before, after) {
		t.Fatal("a refused restore changed the table")
	}
}

func TestWriteBackupErrors(t *testing.T) {
	src := backupSources(t)
	capture := captureOf(src...)
	boom := errors.New("no leader")
	failOn := func(shard uint64) func(uint64) (*ShardBackup, error) {
		return func(id uint64) (*ShardBackup, error) {
			if id == shard {
				return nil, boom
			}
			return capture(id)
		}
	}
	// Nothing is written before the first shard is captured.
	var buf bytes.Buffer
	info, err := WriteBackup(&buf, 3, failOn(1))
	if !errors.Is(err, boom) || info.Bytes != 0 || buf.Len() != 0 {
		t.Fatalf("shard 1 failing: %v, %d bytes", err, buf.Len())
	}
	// A later failure leaves a file every reader refuses.
	buf.Reset()
	info, err = WriteBackup(&buf, 3, failOn(2))
	if !errors.Is(err, boom) || info.Bytes == 0 || info.Bytes != int64(buf.Len()) {
		t.Fatalf("shard 2 failing: %v, %+v, %d bytes", err, info, buf.Len())
	}
	if _, err := CheckBackup(&buf); !errors.Is(err, backup.ErrBad) {
		t.Fatalf("CheckBackup of a backup cut short: %v", err)
	}
	// A capture of the wrong shard.
	if _, err := WriteBackup(io.Discard, 2, func(uint64) (*ShardBackup, error) { return capture(2) }); err == nil {
		t.Fatal("shard 2's table taken for shard 1")
	}
	if _, err := WriteBackup(io.Discard, 0, capture); err == nil {
		t.Fatal("a backup of 0 shards")
	}

	// Lookup: a closed state machine, and a query of another type.
	if err := src[2].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := src[2].Lookup(BackupQuery{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("backup of a closed shard: %v", err)
	}
	if _, err := src[0].Lookup("k"); err == nil {
		t.Fatal("Lookup of a string")
	}
}

// BenchmarkCaptureBackup: a backup of a shard of a million locks (20-byte
// keys, no owners). "held" is what Update waits for, the copy under the
// table's read lock; "capture" is the whole of Lookup(BackupQuery{}), with
// the allocation of the copy and its sort; "encode" is one of the two
// encodings of the part (WriteBackup counts its length first).
func BenchmarkCaptureBackup(b *testing.B) {
	const n = 1_000_000
	s, _ := openSM(b, newTestDB(b), nil, 1)
	var batch Batch
	for i := range n {
		batch.Append(Command{Op: OpGrant, Key: fmt.Appendf(nil, "bench/lock/%010d", i), LeaseMs: 10000})
		if batch.Len() == 10000 {
			idx := uint64(i/10000 + 1)
			if _, err := s.Update([]sm.Entry{{Index: idx, Cmd: bytes.Clone(batch.Seal(Header{Proposer: 1, Seq: idx}))}}); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	if len(locks(s)) != n {
		b.Fatal("locks not granted")
	}
	msPerOp := func(b *testing.B) { b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op") }
	b.Run("held", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			buf := s.backupBuffer()
			b.StartTimer()
			if _, err := s.copyLocked(buf); err != nil {
				b.Fatal(err)
			}
		}
		msPerOp(b)
	})
	b.Run("capture", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.captureBackup(); err != nil {
				b.Fatal(err)
			}
		}
		msPerOp(b)
	})
	c, _ := s.captureBackup()
	b.Run("encode", func(b *testing.B) {
		var size int64
		for b.Loop() {
			var err error
			if size, err = c.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		msPerOp(b)
		b.ReportMetric(float64(size)/n, "B/lock")
	})
}
