package engine

import (
	"fmt"
	"sync"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
)

// A node that joins (batond --join) knows its id and its own addresses,
// and nothing of the cluster: not even how many shards it has, which it
// needs to start a replica of each. So its first start runs in two
// steps: learnShards starts its replica of shard 1 alone, as a learner,
// on a NodeHost of its own, until the cluster's leader, which reaches it
// at its Raft address once `baton member add` is done, has brought that
// replica the membership directory that lists it; it records the
// directory's shard count in the data dir, closes that NodeHost, and the
// node starts as every node does, with every shard (joining the ones it
// has not started yet). A later start reads the count from the data dir.

// joinTimeout bounds the wait for the cluster's leader to reach a node
// that joins.
const joinTimeout = 5 * time.Minute

// learnShards learns the cluster's shard count through shard 1, and sets
// n.cfg.Shards to it.
func (n *Node) learnShards() error {
	nh, err := newNodeHost(n.nodeHostConfig(false))
	if err != nil {
		return fmt.Errorf("start raft on %s: %w", n.cfg.raftListen(), err)
	}
	defer nh.Close()
	obs := &joinObserver{id: n.cfg.ID, found: make(chan *directory, 1)}
	join := !nh.HasNodeInfo(1, n.cfg.ID)
	if err := nh.StartOnDiskReplica(nil, join, sm.Factory(n.db, obs), n.replicaConfig(1, true)); err != nil {
		return fmt.Errorf("start shard 1: %w", err)
	}
	n.log.Info("joining: waiting for the cluster's leader to reach this node", "id", n.cfg.ID, "raft", n.cfg.self().RaftAddr)
	select {
	case d := <-obs.found:
		if err := n.dir.update(func(s *settings) { s.Shards = d.Shards }); err != nil {
			return fmt.Errorf("data dir %s: %w", n.cfg.DataDir, err)
		}
		n.cfg.Shards = d.Shards
		n.log.Info("joining: the cluster reached this node", "shards", d.Shards, "members", d.list())
		return nil
	case <-time.After(joinTimeout):
		return fmt.Errorf("no leader of the cluster reached this node at %s within %s: add it first (baton member add %s) and check that the members can reach that address",
			n.cfg.self().RaftAddr, joinTimeout, n.cfg.self())
	}
}

// joinObserver watches shard 1's table for the first directory that
// lists the node that joins.
type joinObserver struct {
	id    uint64
	mu    sync.Mutex // the table's lock (Locker)
	table sm.Table
	found chan *directory // the directory, once
	sent  bool
}

func (o *joinObserver) Locker(uint64) sync.Locker { return &o.mu }

func (o *joinObserver) Reset(_ uint64, t sm.Table) {
	o.table = t
	o.check()
}

func (o *joinObserver) Applied(_, _ uint64, h sm.Header, _ []sm.Command, _ []sm.Result) {
	if h.Directory {
		o.check()
	}
}

// check sends the table's directory if it lists the node.
func (o *joinObserver) check() {
	v, blob := o.table.Directory()
	if o.sent || v == 0 {
		return
	}
	d, err := decodeDirectory(blob, v)
	if err != nil || d.Shards < 1 {
		return
	}
	if _, ok := d.member(o.id); !ok {
		return
	}
	o.sent = true
	o.found <- d
}
