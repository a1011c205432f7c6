// Package nodehosttest runs real dragonboat NodeHosts in tests: a NodeHost
// with one replica of a small state machine whose state tells whether two
// replicas applied the same log, and proposals and reads retried the way
// dragonboat asks of its callers. The Raft log stores' shared tests
// (engine/internal/logdbtest) and the transport's (engine/raftnet) start
// their NodeHosts with it, each with its own configuration (the store
// under test, or the transport).
package nodehosttest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// Timeout bounds each wait of this package (retries, WaitFor): a slow
// machine (the race detector, parallel packages) needs seconds for what
// takes milliseconds otherwise, and only a failing test waits it out.
const Timeout = 30 * time.Second

// countingSM is a small in-memory state machine: it counts the entries it
// applies and folds their commands into a hash, so two replicas (or one
// before and after a restart) that applied the same log agree on both.
type countingSM struct {
	count, hash uint64
}

// NewCountingSM returns a state machine that counts the entries it applies
// and folds their commands into a hash; a lookup (Read) returns both, as
// a [2]uint64. It is a dragonboat state machine factory.
func NewCountingSM(shardID, replicaID uint64) sm.IStateMachine { return &countingSM{} }

func (s *countingSM) Update(e sm.Entry) (sm.Result, error) {
	h := fnv.New64a()
	_, _ = h.Write(e.Cmd)
	s.count++
	s.hash = s.hash*31 + h.Sum64()
	return sm.Result{Value: s.count}, nil
}

func (s *countingSM) Lookup(any) (any, error) { return [2]uint64{s.count, s.hash}, nil }

func (s *countingSM) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return binary.Write(w, binary.BigEndian, [2]uint64{s.count, s.hash})
}

func (s *countingSM) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	var v [2]uint64
	if err := binary.Read(r, binary.BigEndian, &v); err != nil {
		return err
	}
	s.count, s.hash = v[0], v[1]
	return nil
}

func (s *countingSM) Close() error { return nil }

// Start starts a NodeHost with cfg and on it the replica rc of a counting
// state machine (NewCountingSM), with the initial members given (none to
// restart or join). The caller closes the NodeHost: tests that restart
// one close it themselves.
func Start(t *testing.T, cfg config.NodeHostConfig, members map[uint64]string, rc config.Config) *dragonboat.NodeHost {
	t.Helper()
	nh, err := dragonboat.NewNodeHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := nh.StartReplica(members, false, NewCountingSM, rc); err != nil {
		nh.Close()
		t.Fatal(err)
	}
	return nh
}

// Propose proposes the i-th command to the shard and returns what it
// applied as (the counting state machine's entry count), retrying while
// dragonboat drops it.
func Propose(t *testing.T, nh *dragonboat.NodeHost, shardID uint64, i int) uint64 {
	t.Helper()
	var value uint64
	retry(t, fmt.Sprintf("proposal %d", i), func(ctx context.Context) error {
		res, err := nh.SyncPropose(ctx, nh.GetNoOPSession(shardID), fmt.Appendf(nil, "command %d", i))
		value = res.Value
		return err
	}, dropped)
	return value
}

// Read reads the shard's counting state machine, linearizably: its entry
// count and hash. It is retried while dragonboat drops it or times out.
func Read(t *testing.T, nh *dragonboat.NodeHost, shardID uint64) [2]uint64 {
	t.Helper()
	var v any
	retry(t, "read", func(ctx context.Context) (err error) {
		v, err = nh.SyncRead(ctx, shardID, nil)
		return err
	}, timedOutOrDropped)
	return v.([2]uint64)
}

// WaitFor waits until cond holds, checking it every few milliseconds, for
// what dragonboat does in the background.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, Timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dropped reports whether dragonboat dropped a request without acting on
// it (no leader known yet, a leader change, back pressure), so that sending
// it again cannot apply it twice.
func dropped(err error) bool {
	return errors.Is(err, dragonboat.ErrShardNotReady) || errors.Is(err, dragonboat.ErrSystemBusy)
}

// timedOutOrDropped is dropped, or a request dragonboat gave up on: a read
// may be tried again after that (a proposal may not: it may have applied).
// A slow machine can delay the leader's confirmation of a read beyond
// dragonboat's own timeout.
func timedOutOrDropped(err error) bool {
	return dropped(err) || errors.Is(err, dragonboat.ErrTimeout)
}

// retry runs op until it succeeds or fails with an error again does not
// accept, for at most Timeout.
func retry(t *testing.T, what string, op func(context.Context) error, again func(error) bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return
		}
		if !again(err) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
