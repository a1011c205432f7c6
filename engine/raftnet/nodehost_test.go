package raftnet

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/engine/internal/nodehosttest"
	"github.com/baton-dev/baton/tools/harness"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// countingFactory counts the snapshot chunks its transport receives.
type countingFactory struct {
	Factory
	chunks atomic.Int64
}

func (f *countingFactory) Create(cfg config.NodeHostConfig, onBatch raftio.MessageHandler, onChunk raftio.ChunkHandler) raftio.ITransport {
	return f.Factory.Create(cfg, onBatch, func(c pb.Chunk) bool {
		f.chunks.Add(1)
		return onChunk(c)
	})
}

// TestNodeHostsOverRaftnet: three NodeHosts replicate a log over this
// transport, and a replica that starts after the log was compacted catches
// up from a snapshot streamed to it in chunks.
func TestNodeHostsOverRaftnet(t *testing.T) {
	addrs := harness.FreeAddrs(t, 3)
	members := map[uint64]string{1: addrs[0], 2: addrs[1], 3: addrs[2]}
	dir := t.TempDir()
	factories := make([]*countingFactory, 3)
	start := func(id uint64) *dragonboat.NodeHost {
		t.Helper()
		factories[id-1] = &countingFactory{}
		nh := nodehosttest.Start(t, config.NodeHostConfig{
			NodeHostDir:    filepath.Join(dir, fmt.Sprint(id)),
			RTTMillisecond: 5,
			RaftAddress:    members[id],
			Expert:         config.ExpertConfig{TransportFactory: factories[id-1]},
		}, members, config.Config{ReplicaID: id, ShardID: 1, ElectionRTT: 10, HeartbeatRTT: 1, SnapshotEntries: 20, CompactionOverhead: 5})
		t.Cleanup(nh.Close)
		return nh
	}
	nh1, _ := start(1), start(2)

	const n = 200
	for i := 1; i <= n; i++ {
		nodehosttest.Propose(t, nh1, 1, i)
	}
	want := nodehosttest.Read(t, nh1, 1)
	if want[0] != n {
		t.Fatalf("replica 1 applied %d entries, want %d", want[0], n)
	}

	nh3 := start(3)
	nodehosttest.WaitFor(t, "replica 3 catching up", func() bool {
		v, err := nh3.StaleRead(1, nil)
		return err == nil && v.([2]uint64) == want
	})
	if factories[2].chunks.Load() == 0 {
		t.Fatal("replica 3 caught up without a snapshot: the test did not exercise chunks")
	}
}
