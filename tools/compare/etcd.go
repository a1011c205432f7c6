package main

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/bench"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcdCallTimeout bounds each Lock and Unlock: a lock that takes longer is
// counted as an error and the worker goes on.
const etcdCallTimeout = 10 * time.Second

// newEtcdClient connects to endpoints with the official client; its own
// logging is off, errors are counted instead.
func newEtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// runEtcd measures lock cycles through concurrency.Mutex, the lock recipe
// that ships with etcd's Go client: a cycle is Lock then Unlock on a
// session of the worker's own. The slots are conns*depth long-lived workers;
// the depth workers of a connection share its client (gRPC multiplexes
// their calls on one HTTP/2 connection, etcd's form of pipelining) and, in
// open loop, its schedule.
// Uncontended workers use keys of their own; contended ones all lock the
// same key, and the Mutex queues them by creation revision (FIFO).
func runEtcd(ctx context.Context, o *driveOpts) (*bench.Result, error) {
	clients := make([]*clientv3.Client, o.conns)
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range clients {
		c, err := newEtcdClient(o.endpoints)
		if err != nil {
			return nil, fmt.Errorf("etcd client: %w", err)
		}
		clients[i] = c
	}
	slots := o.conns * o.depth
	perSlot := max(1, o.keys/slots)
	prefix := fmt.Sprintf("/compare/%d/", time.Now().UnixNano())
	ttl := max(1, int(o.lease/time.Second))
	return runWorkers(ctx, o, slots, func(ctx context.Context, id int, c clock) *tally {
		t := newTally()
		// The session's lease lives until the run's hard end at most.
		sess, err := concurrency.NewSession(clients[id%o.conns], concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			t.errs["session: "+errKind(err)]++
			return t
		}
		// Close revokes the lease (bounded by the TTL); a lease it cannot
		// revoke runs out by itself.
		defer sess.Close()
		// The depth slots of a connection share its schedule, as the
		// cycle slots of a baton bench connection do.
		c.serial(id%o.conns, t, func(n int) (time.Time, string, bool) {
			key := prefix + "c"
			if o.workload == workloadUncontended {
				key = slotKey(prefix+"u/", id, perSlot, n)
			}
			m := concurrency.NewMutex(sess, key)
			lctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
			err := m.Lock(lctx)
			cancel()
			granted := time.Now()
			if err != nil {
				return granted, "lock: " + errKind(err), true
			}
			uctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
			err = m.Unlock(uctx)
			cancel()
			if err != nil {
				return granted, "unlock: " + errKind(err), true
			}
			return granted, "", true
		})
		return t
	}), nil
}

// etcdLeader waits until the cluster at endpoints has a leader and returns
// the leader's client endpoint, so that the load goes straight to it as
// baton's goes to its leader.
func etcdLeader(ctx context.Context, endpoints []string) (string, error) {
	c, err := newEtcdClient(endpoints)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var last error
	for ctx.Err() == nil {
		for _, ep := range endpoints {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, ep)
			cancel()
			if err != nil {
				last = err
				continue
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				// A write proves the cluster commits, not only elects.
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := c.Put(pctx, "/compare/ready", "1")
				cancel()
				if err == nil {
					return ep, nil
				}
				last = err
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "", fmt.Errorf("no etcd leader at %v: %v", endpoints, last)
}
