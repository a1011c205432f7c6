package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// TestLeaderKilledAfterCommit: the leader of a 3-node cluster is killed
// while a stream of acquires is in flight, with 30 s leases. An acquire
// whose grant committed but whose answer died with the leader is retried
// with its owner and gets that grant back from the new leader: every
// acquire is answered within an election and a second, none waits for a
// lease to run out, and no token is issued twice.
func TestLeaderKilledAfterCommit(t *testing.T) {
	t.Parallel()
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2})
	leader := settledLeader(t, nodes, "after-commit/0")
	c := clusterClient(t, nodes)

	const workers = 8
	var (
		mu      sync.Mutex
		tokens  = map[uint64]string{}
		slowest time.Duration
		grants  atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && i < 10000; i++ {
				key := fmt.Sprintf("after-commit/%d/%d", w, i) // nobody else wants it
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				start := time.Now()
				l, err := c.Acquire(ctx, key, 30*time.Second, WaitForever)
				took := time.Since(start)
				if err != nil {
					cancel()
					t.Errorf("acquire %s after %v: %v", key, took, err)
					return
				}
				mu.Lock()
				if other, dup := tokens[l.Token()]; dup {
					t.Errorf("token %d issued to %s and to %s", l.Token(), other, key)
				}
				tokens[l.Token()] = key
				slowest = max(slowest, took)
				mu.Unlock()
				grants.Add(1)
				_ = l.Release(ctx) // NOTHELD is possible across the failover
				cancel()
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); grants.Load() < 200 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	leader.Kill()
	killed, killedAt := grants.Load(), time.Now()
	for deadline := killedAt.Add(20 * time.Second); grants.Load() < killed+200 && time.Now().Before(deadline) && !t.Failed(); {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if after := grants.Load() - killed; after < 200 {
		t.Fatalf("%d grants in 20 s after the kill", after)
	}
	// An election is 10 to 20 ticks of 20 ms; a second on top, and as much
	// again for a busy machine running the race detector.
	if slowest > 2500*time.Millisecond {
		t.Fatalf("the slowest acquire took %v: a retry waited for something (a lease is 30 s)", slowest)
	}
	t.Logf("%d grants, the slowest acquire %v", grants.Load(), slowest)
}
