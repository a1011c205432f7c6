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

	want := BackupInfo{Shards: 3, Locks: 3001, Epoch: 0, RestoreEpoch: 1}
	if info, err := CheckBackup(bytes.NewReader(data)); err != nil || !reflect.DeepEqual(info, want) {
		t.Fatalf("CheckBackup: %+v, %v; want %+v", info, err, want)
	}
	db := newTestDB(t)
	info, err := RestoreBackup(db, bytes.NewReader(data))
	if err != nil || !reflect.DeepEqual(info, want) {
		t.Fatalf("RestoreBackup: %+v, %v; want %+v", info, err, want)
	}
	for i, s := range src {
		id := uint64(i + 1)
		obs := newRecorder()
		dst, applied := openSM(t, db, obs, id)
		if applied != 0 || dst.t.seq != 1<<epochShift || dst.t.fence != 0 {
			t.Fatalf("shard %d: opened at %d with seq %d, fence %d; want 0, %d (epoch 1), 0", id, applied, dst.t.seq, dst.t.fence, uint64(1)<<epochShift)
		}
		if !reflect.DeepEqual(locks(dst), locks(s)) {
			t.Fatalf("shard %d: restored table differs", id)
		}
		if got := obs.lastReset(id); len(got) != len(locks(s)) {
			t.Fatalf("shard %d: Reset told %d locks", id, len(got))
		}
		// Tokens go on in the next restore epoch, above every token of
		// the backup (released ones included: shard 2's "b") and every
		// token the backed-up shards can issue after it.
		update(t, dst, entry(1, grant("next", 1)))
		if tok := locks(dst)["next"].token; tok != (1<<epochShift+1)<<ShardBits|id || TokenEpoch(tok) != 1 {
			t.Fatalf("shard %d: next token %d (epoch %d), seq was %d", id, tok, TokenEpoch(tok), s.t.seq)
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
	if got := locks(dst); !reflect.DeepEqual(got, want) || dst.t.seq != 1<<epochShift {
		t.Fatalf("restored %v with seq %d; want %v with seq 1<<%d", got, dst.t.seq, want, epochShift)
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

// TestRestoreTokenEpoch: a token's epoch is its seq's, its top EpochBits bits.
func TestRestoreTokenEpoch(t *testing.T) {
	if epochShift != 46 || MaxEpoch != 255 {
		t.Fatalf("epochShift %d, MaxEpoch %d: the docs say 46 and 255", epochShift, MaxEpoch)
	}
	for _, tc := range []struct {
		seq, shard uint64
		epoch      uint8
	}{
		{1, 1, 0},
		{1<<epochShift - 1, MaxShards, 0},
		{1 << epochShift, 1, 1},
		{1<<epochShift + 1, 7, 1},
		{3<<epochShift + 12345, 2, 3},
		{MaxEpoch << epochShift, 1, MaxEpoch},
		{1<<(64-ShardBits) - 1, MaxShards, MaxEpoch},
	} {
		tok := tc.seq<<ShardBits | tc.shard
		if got := TokenEpoch(tok); got != tc.epoch || uint64(got) != seqEpoch(tc.seq) {
			t.Errorf("seq %#x: token %#x is of epoch %d (seq's %d), want %d", tc.seq, tok, got, seqEpoch(tc.seq), tc.epoch)
		}
	}
}

// TestRestoreEpoch: a restore starts every shard at the first seq of the
// epoch above the highest of the backup's shards, whatever their epochs;
// the held locks keep their tokens; a backup of a cluster in the last
// epoch is refused by CheckBackup and RestoreBackup, and a refused restore
// leaves the lock table empty, rows of the shards before the refused one
// included.
func TestRestoreEpoch(t *testing.T) {
	// held is a lock of shard at seq: its token is the seq's own.
	held := func(key string, shard, seq uint64) []Lock {
		return []Lock{{Key: []byte(key), Token: seq<<ShardBits | shard, LeaseMs: 1000}}
	}
	// shards frames one part per seq, shard i+1's holding a lock issued at
	// seq, or none at seq 0 or at a seq no token can have.
	shards := func(seqs ...uint64) []byte {
		var parts []part
		for i, seq := range seqs {
			id := uint64(i + 1)
			var l []Lock
			if seq > 0 && seq < 1<<(64-ShardBits) {
				l = held(fmt.Sprintf("k%d", id), id, seq)
			}
			parts = append(parts, part{uint64(len(l)), encodeSnapshot(snapVersionNoOwners, id, 9, seq, l)})
		}
		return buildBackup(t, parts...)
	}
	for _, tc := range []struct {
		name   string
		seqs   []uint64
		epoch  int // the backup's; the restore starts epoch+1
		refuse bool
	}{
		{"fresh cluster", []uint64{5, 0, 3}, 0, false},
		{"nothing ever granted", []uint64{0, 0}, 0, false},
		{"the last seq of epoch 0", []uint64{1<<epochShift - 1}, 0, false},
		{"restored once, some shards idle since", []uint64{1 << epochShift, 1<<epochShift + 40}, 1, false},
		{"shards in different epochs", []uint64{5, 3<<epochShift + 7, 1 << epochShift}, 3, false},
		{"the highest epoch last", []uint64{2 << epochShift, 9, 6<<epochShift + 1}, 6, false},
		{"epoch 254: the last restore", []uint64{3, 255<<epochShift - 1}, 254, false},
		{"epoch 255", []uint64{MaxEpoch << epochShift}, 0, true},
		{"epoch 255 after a good shard", []uint64{17, MaxEpoch<<epochShift + 5, 2}, 0, true},
		{"a seq beyond 54 bits", []uint64{4, 1 << 60}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := shards(tc.seqs...)
			db := newTestDB(t)
			cinfo, cerr := CheckBackup(bytes.NewReader(data))
			info, err := RestoreBackup(db, bytes.NewReader(data))
			if tc.refuse {
				for what, err := range map[string]error{"CheckBackup": cerr, "RestoreBackup": err} {
					if !errors.Is(err, ErrEpochsExhausted) || isBadBackup(err) || !strings.Contains(err.Error(), "restore epoch") {
						t.Fatalf("%s: %v, want ErrEpochsExhausted", what, err)
					}
				}
				if rows := scan(t, db, nil, nil); len(rows) != 0 {
					t.Fatalf("a refused restore left %d rows", len(rows))
				}
				return
			}
			want := BackupInfo{Shards: len(tc.seqs), Locks: info.Locks, Epoch: tc.epoch, RestoreEpoch: tc.epoch + 1}
			if cerr != nil || err != nil || !reflect.DeepEqual(info, want) || !reflect.DeepEqual(cinfo, want) {
				t.Fatalf("CheckBackup %+v, %v; RestoreBackup %+v, %v; want %+v", cinfo, cerr, info, err, want)
			}
			start := uint64(tc.epoch+1) << epochShift
			for i, seq := range tc.seqs {
				id := uint64(i + 1)
				s, _ := openSM(t, db, nil, id)
				if s.t.seq != start {
					t.Fatalf("shard %d (seq %#x): restored with seq %#x, want %#x", id, seq, s.t.seq, start)
				}
				key := fmt.Sprintf("k%d", id)
				if seq > 0 && locks(s)[key].token != seq<<ShardBits|id {
					t.Fatalf("shard %d: %s holds %+v, want token %#x", id, key, locks(s)[key], seq<<ShardBits|id)
				}
				update(t, s, entry(1, grant("next", 1)))
				tok := locks(s)["next"].token
				if tok != (start+1)<<ShardBits|id || int(TokenEpoch(tok)) != tc.epoch+1 {
					t.Fatalf("shard %d: first token %#x (epoch %d), want %#x", id, tok, TokenEpoch(tok), (start+1)<<ShardBits|id)
				}
				// Above every token the backed-up cluster's shards could
				// issue until they left their epoch.
				if last := (uint64(tc.epoch+1)<<epochShift-1)<<ShardBits | MaxShards; tok <= last {
					t.Fatalf("shard %d: first token %#x, not above %#x", id, tok, last)
				}
			}
		})
	}
}

// TestRestoreTwiceInARow: A backed up, A grants on; B restored from the
// backup, B grants, B backed up, B grants on; C restored from B's backup.
// B's tokens are above every token A issued, before its backup or after,
// and C's above every token of B: each restore starts the next epoch.
func TestRestoreTwiceInARow(t *testing.T) {
	const shards = 3
	// grantAll grants n keys named prefix/shard/i on each shard of c and
	// returns the highest token granted, checking that each token is above
	// floor.
	grantAll := func(t *testing.T, c []*onDisk, index uint64, prefix string, n int, floor uint64) uint64 {
		t.Helper()
		top := uint64(0)
		for i, s := range c {
			var cmds []Command
			for j := range n {
				cmds = append(cmds, grant(fmt.Sprintf("%s/%d/%d", prefix, i+1, j), 1000), release(fmt.Sprintf("%s/%d/%d", prefix, i+1, j), 0))
			}
			cmds = append(cmds, grant(fmt.Sprintf("%s/%d/held", prefix, i+1), 1000))
			update(t, s, entry(index, cmds...))
			tok := locks(s)[fmt.Sprintf("%s/%d/held", prefix, i+1)].token
			if tok <= floor {
				t.Fatalf("shard %d: token %#x (epoch %d), not above %#x (epoch %d)", i+1, tok, TokenEpoch(tok), floor, TokenEpoch(floor))
			}
			top = max(top, tok)
		}
		return top
	}
	restore := func(t *testing.T, data []byte, epoch int) []*onDisk {
		t.Helper()
		db := newTestDB(t)
		info, err := RestoreBackup(db, bytes.NewReader(data))
		if err != nil || info.Epoch != epoch-1 || info.RestoreEpoch != epoch {
			t.Fatalf("RestoreBackup: %+v, %v; want epoch %d", info, err, epoch)
		}
		var c []*onDisk
		for id := uint64(1); id <= shards; id++ {
			s, _ := openSM(t, db, nil, id)
			c = append(c, s)
		}
		return c
	}

	var a []*onDisk
	for id := uint64(1); id <= shards; id++ {
		s, _ := openSM(t, newTestDB(t), nil, id)
		a = append(a, s)
	}
	grantAll(t, a, 1, "a", 5+len(a), 0)
	backupA := backupOf(t, a...)
	topA := grantAll(t, a, 2, "a-after", 50, 0) // never seen by the backup

	b := restore(t, backupA, 1)
	topB := grantAll(t, b, 1, "b", 3, topA)
	backupB := backupOf(t, b...)
	topB = max(topB, grantAll(t, b, 2, "b-after", 50, topA))

	c := restore(t, backupB, 2)
	topC := grantAll(t, c, 1, "c", 1, topB)
	if TokenEpoch(topA) != 0 || TokenEpoch(topB) != 1 || TokenEpoch(topC) != 2 {
		t.Fatalf("epochs %d, %d, %d of A's, B's and C's tokens; want 0, 1, 2", TokenEpoch(topA), TokenEpoch(topB), TokenEpoch(topC))
	}
	// C holds what B held at its backup, with B's tokens.
	for i := range c {
		key := fmt.Sprintf("b/%d/held", i+1)
		if got, want := locks(c[i])[key], locks(b[i])[key]; got != want {
			t.Fatalf("C's %s: %+v, B's %+v", key, got, want)
		}
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
