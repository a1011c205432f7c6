package seglog

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// syncFS counts the syncs of the files it creates for writing, and can hold
// the next one until the test lets it go.
type syncFS struct {
	vfs.FS
	mu      sync.Mutex
	syncs   int
	hold    bool
	started chan struct{}
	release chan struct{}
}

type syncFile struct {
	vfs.File
	fs *syncFS
}

// Create and ReuseForWrite wrap segment files only: the spares zero-filled
// in the background are synced at any time.
func (fs *syncFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	if err != nil || !strings.HasSuffix(name, segmentSuffix) {
		return f, err
	}
	return &syncFile{f, fs}, nil
}

func (fs *syncFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname)
	if err != nil || !strings.HasSuffix(newname, segmentSuffix) {
		return f, err
	}
	return &syncFile{f, fs}, nil
}

// holdNext makes the next sync wait for release after closing started.
func (fs *syncFS) holdNext() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.hold = true
	fs.started = make(chan struct{})
	fs.release = make(chan struct{})
}

func (fs *syncFS) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.syncs
}

func (f *syncFile) Sync() error {
	f.fs.mu.Lock()
	f.fs.syncs++
	hold, started, release := f.fs.hold, f.fs.started, f.fs.release
	f.fs.hold = false
	f.fs.mu.Unlock()
	if hold {
		close(started)
		<-release
	}
	return f.File.Sync()
}

// Saves that need a sync while another goroutine syncs wait for the next
// sync, and share it: four concurrent saves of four step workers, arriving
// during a sync, are made durable by one more.
func TestGroupCommit(t *testing.T) {
	fs := &syncFS{FS: vfs.NewMem()}
	db := openSized(t, fs, 1<<20)
	saveOne := func(shardID, workerID uint64) error {
		return db.SaveRaftState([]pb.Update{{ShardID: shardID, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1},
			EntriesToSave: makeEntries(1, 1, 3)}}, workerID)
	}
	fs.holdNext()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- saveOne(1, 1)
	}()
	<-fs.started // shard 1's save is syncing
	before := fs.count()
	for s := uint64(2); s <= 5; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- saveOne(s, s)
		}()
	}
	// The four saves are written (the index shows them) and wait for a
	// sync; none can start one while shard 1's is under way.
	for s := uint64(2); s <= 5; s++ {
		for lowestEntry(db, s, 1) == 0 {
			runtime.Gosched()
		}
	}
	if n := fs.count(); n != before {
		t.Fatalf("%d syncs started during another", n-before)
	}
	close(fs.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := fs.count() - before; n != 1 {
		t.Fatalf("%d syncs for four saves that waited together, want 1", n)
	}
	if s, u := db.saves.Counts(); s != 5 || u != 0 {
		t.Fatalf("%d synced and %d unsynced saves", s, u)
	}
	// And a commit-only save syncs nothing.
	before = fs.count()
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: 3}})
	if n := fs.count() - before; n != 0 {
		t.Fatalf("a commit-only save synced %d times", n)
	}
}

// A power loss right after an unsynced record that made the writer switch
// segments: the switch synced the old segment, so what it held survives,
// and the new segment's checkpoint knows where the old one ends.
func TestPowerLossAcrossASegmentSwitch(t *testing.T) {
	const size = 4 << 10
	fs := vfs.NewStrictMem()
	db := openSized(t, fs, size)
	save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1}, EntriesToSave: bigEntries(1, 1, 1, 100)})
	first := db.active
	commit := uint64(0)
	for db.active == first {
		commit++
		// Commit-only, not synced, until one does not fit.
		save(t, db, pb.Update{ShardID: 1, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1, Commit: commit}})
	}
	if s, u := db.saves.Counts(); s != 1 || u != commit {
		t.Fatalf("%d synced and %d unsynced saves, want 1 and %d", s, u, commit)
	}
	db = powerLoss(t, fs, db).(*LogDB)
	// All but the record that went to the new segment were synced by the
	// switch.
	st := readState(t, db, 1, 1, 0).State
	if st.Term != 1 || st.Vote != 1 || st.Commit < commit-1 || st.Commit > commit {
		t.Fatalf("state %+v after the power loss, %d commit-only saves", st, commit)
	}
	equal(t, "entries", indexes(iterate(t, db, 1, 1, 1, 10, 1<<30)), []uint64{1})
}
