package raftnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// sumSM adds up the numbers its entries carry; replicas that applied the
// same log agree on count and sum.
type sumSM struct{ count, sum uint64 }

func (s *sumSM) Update(e sm.Entry) (sm.Result, error) {
	s.count++
	s.sum += binary.LittleEndian.Uint64(e.Cmd)
	return sm.Result{Value: s.count}, nil
}

func (s *sumSM) Lookup(any) (any, error) { return [2]uint64{s.count, s.sum}, nil }

func (s *sumSM) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return binary.Write(w, binary.LittleEndian, [2]uint64{s.count, s.sum})
}

func (s *sumSM) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	var v [2]uint64
	if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
		return err
	}
	s.count, s.sum = v[0], v[1]
	return nil
}

func (s *sumSM) Close() error { return nil }

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
		nh, err := dragonboat.NewNodeHost(config.NodeHostConfig{
			NodeHostDir:    filepath.Join(dir, fmt.Sprint(id)),
			RTTMillisecond: 5,
			RaftAddress:    members[id],
			Expert:         config.ExpertConfig{TransportFactory: factories[id-1]},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nh.Close)
		rc := config.Config{ReplicaID: id, ShardID: 1, ElectionRTT: 10, HeartbeatRTT: 1, SnapshotEntries: 20, CompactionOverhead: 5}
		if err := nh.StartReplica(members, false, func(uint64, uint64) sm.IStateMachine { return &sumSM{} }, rc); err != nil {
			t.Fatal(err)
		}
		return nh
	}
	nh1, _ := start(1), start(2)

	const n = 200
	var want uint64
	for i := range uint64(n) {
		want += i * 3
		cmd := binary.LittleEndian.AppendUint64(nil, i*3)
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := nh1.SyncPropose(ctx, nh1.GetNoOPSession(1), cmd)
			cancel()
			if err == nil {
				break
			}
			if !errors.Is(err, dragonboat.ErrShardNotReady) && !errors.Is(err, dragonboat.ErrSystemBusy) || time.Now().After(deadline) {
				t.Fatalf("proposal %d: %v", i, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	nh3 := start(3)
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := nh3.StaleRead(1, nil)
		if err == nil && v.([2]uint64) == [2]uint64{n, want} {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 3 has %v (%v), want %d entries summing to %d", v, err, n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := factories[2].chunks.Load(); got == 0 {
		t.Fatal("replica 3 caught up without a snapshot: the test did not exercise chunks")
	}
}
