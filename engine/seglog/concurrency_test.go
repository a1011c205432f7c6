package seglog

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Step workers save and remove entries on small segments, so that segments
// switch and retire all the time, while readers read the same replicas'
// entries: a read never fails, and what it returns is consecutive and
// what was saved (run with -race).
func TestReadsDuringRetirement(t *testing.T) {
	db := openSized(t, vfs.NewMem(), 4<<10)
	const workers, rounds = 4, 150
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	// saved[w] ticks after each of worker w's saves: its reader reads
	// once per save, alongside the next.
	saved := make([]chan struct{}, workers+1)
	for w := range saved {
		saved[w] = make(chan struct{}, rounds)
	}
	for w := uint64(1); w <= workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(saved[w])
			for i := uint64(1); i <= rounds; i++ {
				if err := db.SaveRaftState([]pb.Update{{ShardID: w, ReplicaID: 1, State: pb.State{Term: 1, Vote: 1},
					EntriesToSave: bigEntries(1, i, i, 100+int(i%7)*30)}}, w); err != nil {
					errs <- err
					return
				}
				saved[w] <- struct{}{}
				if i%10 == 0 {
					if err := db.RemoveEntriesTo(w, 1, i-5); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	var readers sync.WaitGroup
	for w := uint64(1); w <= workers; w++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for range saved[w] {
				low := lowestEntry(db, w, 1)
				if low == 0 {
					continue
				}
				ents, _, err := db.IterateEntries(nil, 0, w, 1, low, math.MaxUint64, math.MaxUint64)
				if err != nil {
					errs <- err
					return
				}
				for k, e := range ents {
					want := bigEntries(1, e.Index, e.Index, 100+int(e.Index%7)*30)[0]
					if e.Index != low+uint64(k) || !bytes.Equal(e.Cmd, want.Cmd) {
						errs <- fmt.Errorf("shard %d: entry %d of a read from %d is index %d, %d bytes", w, k, low, e.Index, len(e.Cmd))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	created, recycled := segmentFiles(db)
	if recycled == 0 {
		t.Fatalf("%d segments created, none recycled: the test needs retirement", created)
	}
	for w := uint64(1); w <= workers; w++ {
		equal(t, "entries left", indexes(iterate(t, db, w, 1, rounds-4, math.MaxUint64, math.MaxUint64)), span(rounds-4, rounds))
	}
}
