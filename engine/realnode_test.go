package engine

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
	"github.com/baton-dev/baton/tools/harness"
)

// A real single node, for the tests and benchmarks that need Raft and the
// state machine beneath the engine.

// startTestNode starts a single node of 4 shards (its Config changed by
// edit, if not nil) and waits until it serves every shard; it is stopped
// when b ends.
func startTestNode(b testing.TB, edit func(*Config)) *Node {
	b.Helper()
	addrs := harness.FreeAddrs(b, 2)
	cfg := Config{
		ID: 1, Peers: []Peer{{RaftAddr: addrs[0], ClientAddr: addrs[1]}}, DataDir: b.TempDir(), Shards: 4,
		Logger: slog.New(slog.DiscardHandler),
	}
	if edit != nil {
		edit(&cfg)
	}
	n, err := Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = n.Stop(ctx)
	})
	deadline := time.Now().Add(30 * time.Second)
	for !n.status().Healthy || !allServing(n) {
		if time.Now().After(deadline) {
			b.Fatalf("the node does not serve every shard after 30s: %v", n.problems())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

func allServing(n *Node) bool {
	for _, s := range n.status().Shards {
		if !s.Serving {
			return false
		}
	}
	return true
}

// holdLocks grants count locks of a day's lease, spread over the shards by
// their keys, in entries of 10,000 Grants, and returns once all applied.
func holdLocks(b testing.TB, n *Node, count int) {
	b.Helper()
	const perEntry = 10_000
	batches := make([]sm.Batch, len(n.shards))
	flush := func(s *shard) {
		batch := &batches[s.id-1]
		// The node's own proposer, so that its fence admits the entry, with
		// seq 0, which none of its proposals has: it answers no request.
		rs, err := n.raft.Propose(n.sessions[s.id-1], batch.Seal(sm.Header{Proposer: n.proposerID}), time.Minute)
		if err != nil {
			b.Fatalf("propose: %v", err)
		}
		if r := <-rs.ResultC(); !r.Completed() {
			b.Fatalf("an entry of %d Grants did not apply", batch.Len())
		}
		rs.Release()
		batch.Reset()
	}
	for i := range count {
		key := fmt.Appendf(nil, "held/%d", i)
		s := n.shardFor(key)
		batches[s.id-1].Append(sm.Command{Op: sm.OpGrant, Key: key, LeaseMs: codec.MaxLeaseMs})
		if batches[s.id-1].Len() == perEntry {
			flush(s)
		}
	}
	for _, s := range n.shards {
		if batches[s.id-1].Len() > 0 {
			flush(s)
		}
	}
}
