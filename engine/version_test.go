package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// TestLowestLevel: the version a shard may be raised to is the lowest its
// voters reported; a voter without a report counts as 1 (a build from
// before reports), this node as its own build.
func TestLowestLevel(t *testing.T) {
	const me = 2
	tests := []struct {
		name    string
		reports map[uint64]uint64
		voters  []uint64
		want    uint64
	}{
		{"alone", nil, []uint64{me}, sm.FeatureLevel},
		{"all reported", map[uint64]uint64{1: sm.FeatureLevel, 3: sm.FeatureLevel}, []uint64{1, me, 3}, sm.FeatureLevel},
		{"one never reported", map[uint64]uint64{1: sm.FeatureLevel}, []uint64{1, me, 3}, 1},
		{"one older", map[uint64]uint64{1: sm.FeatureLevel, 3: 1}, []uint64{1, me, 3}, 1},
		{"one newer", map[uint64]uint64{1: sm.FeatureLevel + 1, 3: sm.FeatureLevel}, []uint64{1, me, 3}, sm.FeatureLevel},
		{"a report of a node that is no voter", map[uint64]uint64{1: sm.FeatureLevel, 4: 1}, []uint64{1, me}, sm.FeatureLevel},
		{"this node's own stale report", map[uint64]uint64{me: 1, 1: sm.FeatureLevel}, []uint64{1, me}, sm.FeatureLevel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &shard{node: &Node{cfg: Config{ID: me}}, levels: map[uint64]uint64{}}
			for id, l := range tc.reports {
				s.levelApplied(sm.Header{Proposer: id, Report: true, Level: l})
			}
			if got := s.lowestLevel(tc.voters); got != tc.want {
				t.Fatalf("lowestLevel = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestClusterVersionRaisedAndTooOld, on a real node: the node reports its
// level and raises every shard to it by itself; a raise above its build
// (as a newer member would propose) stops it with a reason, and the data
// dir it leaves is refused at the next start with one line that names the
// version.
func TestClusterVersionRaisedAndTooOld(t *testing.T) {
	var dir string
	n := startTestNode(t, func(c *Config) { dir = c.DataDir })
	waitFor(t, "every shard raised to this build's level", func() bool {
		return n.status().ClusterVersion == sm.FeatureLevel
	})
	for _, s := range n.shards {
		s.mu.Lock()
		reported := s.levels[n.cfg.ID]
		s.mu.Unlock()
		if reported != sm.FeatureLevel {
			t.Fatalf("shard %d has this node's report as %d", s.id, reported)
		}
	}

	s := n.shards[1]
	if !n.propose(s, sm.Header{Proposer: n.cfg.ID, Raise: true, Level: sm.FeatureLevel + 1}, "raise") {
		t.Fatal("the raise did not apply")
	}
	select {
	case err := <-n.Failed():
		if !errors.Is(err, sm.ErrTooOld) || !strings.Contains(err.Error(), fmt.Sprintf("cluster version %d", sm.FeatureLevel+1)) {
			t.Fatalf("failed with %q, want ErrTooOld naming the version", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a raise above this build did not stop the node")
	}
	if got := n.status().ClusterVersion; got != sm.FeatureLevel {
		t.Fatalf("cluster version %d, want the lowest shard's, %d", got, sm.FeatureLevel)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := n.cfg
	cfg.DataDir = dir
	again, err := Start(cfg)
	if err == nil {
		_ = again.Stop(ctx)
		t.Fatal("a node started on a data dir raised above its build")
	}
	if !errors.Is(err, sm.ErrTooOld) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), fmt.Sprintf("shard 2 is at cluster version %d", sm.FeatureLevel+1)) {
		t.Fatalf("start refused with %q, want one line naming shard 2 and version %d", err, sm.FeatureLevel+1)
	}
}
