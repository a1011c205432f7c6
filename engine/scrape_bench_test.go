package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
	"github.com/baton-dev/baton/tools/harness"
)

// BenchmarkScrapeMillionLocks serves /metrics, /status and /healthz of a
// real single node (Start, its own data dir and ports) that holds
// 1,000,000 locks: none of them may cost more with a big table, since they
// read counters and never walk the keys. The locks are granted by proposing
// big batches of Grants straight to Raft, as another node's entries would
// arrive, which takes seconds instead of a million client round trips.
//
//	go test -run '^$' -bench ScrapeMillionLocks -benchtime 200x ./engine
func BenchmarkScrapeMillionLocks(b *testing.B) {
	const locks = 1_000_000
	n := startBenchNode(b)
	holdLocks(b, n, locks)
	if got := n.status().Held; got != locks {
		b.Fatalf("the node holds %d locks, want %d", got, locks)
	}
	h := n.HTTPHandler()
	for _, path := range []string{"/metrics", "/status", "/healthz"} {
		b.Run(path[1:], func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			for b.Loop() {
				w := discardResponse{header: http.Header{}}
				h.ServeHTTP(&w, req)
				if w.code != 0 && w.code != http.StatusOK {
					b.Fatalf("%s: %d", path, w.code)
				}
			}
		})
	}
}

// discardResponse is an http.ResponseWriter that keeps only the status.
type discardResponse struct {
	header http.Header
	code   int
}

func (d *discardResponse) Header() http.Header         { return d.header }
func (d *discardResponse) Write(p []byte) (int, error) { return io.Discard.Write(p) }
func (d *discardResponse) WriteHeader(code int)        { d.code = code }

// startBenchNode starts a single node of 4 shards and waits until it serves
// every shard; it is stopped when b ends.
func startBenchNode(b *testing.B) *Node {
	b.Helper()
	addrs := harness.FreeAddrs(b, 2)
	n, err := Start(Config{
		ID: 1, Peers: []Peer{{RaftAddr: addrs[0], ClientAddr: addrs[1]}}, DataDir: b.TempDir(), Shards: 4,
		Logger: slog.New(slog.DiscardHandler),
	})
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
func holdLocks(b *testing.B, n *Node, count int) {
	b.Helper()
	const perEntry = 10_000
	batches := make([]sm.Batch, len(n.shards))
	flush := func(s *shard) {
		batch := &batches[s.id-1]
		// Proposer 0 is no node's (proposerID is never 0): the entry
		// applies as a peer's would.
		rs, err := n.raft.Propose(n.sessions[s.id-1], batch.Seal(sm.Header{}), time.Minute)
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
