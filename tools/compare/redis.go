package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/baton-dev/baton/bench"
	"github.com/redis/go-redis/v9"
)

// unlockScript deletes the key only if it still holds our value: the
// compare-and-delete that makes a late unlock harmless, Redis's stand-in
// for a fencing check on release.
var unlockScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// redisCallTimeout bounds every call (a pipeline is one call).
const redisCallTimeout = 10 * time.Second

func newRedisClient(addr string, conns int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		PoolSize:     conns,
		MinIdleConns: conns,
		DialTimeout:  5 * time.Second,
		ReadTimeout:  redisCallTimeout,
		WriteTimeout: redisCallTimeout,
		// No retries: a failed call is counted, not hidden.
		MaxRetries: -1,
	})
}

// runRedis measures lock cycles with the single-instance Redis lock: acquire
// is SET key value NX PX lease, release is the compare-and-delete script.
// Each of conns workers holds one connection of the pool.
//
// Uncontended: a worker acquires depth keys of its own in one pipeline,
// then releases those granted in a second one (depth 1: a command at a
// time): batches, baton bench's --shape batch, the only shape go-redis's
// Pipeline sends, since Exec returns once every answer is in. The acquire latency is the
// first pipeline's round trip (go-redis shows no answer before the
// last), the cycle's both; the result's RoundUs has each pipeline's, as
// baton bench --shape batch reports its rounds. In open
// loop a pipeline carries the cycles of the schedule that are due when it
// is sent (at least one, at most depth), and each cycle's latencies count
// from its intended start.
//
// Contended: every worker loops on the same key; Redis has no wait queue,
// so a worker whose SET fails sends it again at once (a spin, the fastest a
// Redis lock can change hands, and with no order between the clients). The
// acquire latency runs from the first attempt (open loop: the cycle's
// intended start) to the one that succeeds.
func runRedis(ctx context.Context, o *driveOpts) (*bench.Result, error) {
	rdb := newRedisClient(o.endpoints[0], o.conns)
	defer rdb.Close()
	lctx, cancel := context.WithTimeout(ctx, redisCallTimeout)
	err := unlockScript.Load(lctx, rdb).Err()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("redis: load the unlock script: %w", err)
	}
	prefix := fmt.Sprintf("compare:%d:", time.Now().UnixNano())
	leaseMs := o.lease.Milliseconds()
	perSlot := max(1, o.keys/(o.conns*o.depth))
	return runWorkers(ctx, o, o.conns, func(ctx context.Context, id int, c clock) *tally {
		if o.workload == workloadContended {
			return redisContended(ctx, rdb, prefix+"c", id, leaseMs, c)
		}
		return redisUncontended(ctx, rdb, prefix+"u:", id, o.depth, perSlot, leaseMs, c)
	}), nil
}

func redisUncontended(ctx context.Context, rdb *redis.Client, prefix string, id, depth, perSlot int, leaseMs int64, c clock) *tally {
	t := newTally()
	keys := make([]string, depth)
	vals := make([]string, depth)
	held := make([]bool, depth)
	sets := make([]*redis.Cmd, depth)
	dels := make([]*redis.Cmd, depth)
	starts := make([]time.Time, 0, depth)
	for n := 0; ; n++ {
		// Closed loop: depth cycles, all starting now. Open loop: every
		// cycle of the schedule that is due, up to depth, each with its
		// intended start.
		if starts = c.starts(id, depth, starts); len(starts) == 0 {
			return t
		}
		batch := len(starts)
		for s := range batch {
			keys[s] = slotKey(prefix, id*depth+s, perSlot, n)
			vals[s] = strconv.Itoa(id) + "/" + strconv.Itoa(s) + "/" + strconv.Itoa(n)
		}
		cctx, cancel := context.WithTimeout(ctx, redisCallTimeout)
		pipe := rdb.Pipeline()
		for s := range batch {
			sets[s] = pipe.Do(cctx, "set", keys[s], vals[s], "nx", "px", leaseMs)
		}
		sent := time.Now()
		_, _ = pipe.Exec(cctx)
		granted := time.Now()
		anyHeld := false
		for s := range batch {
			held[s] = sets[s].Err() == nil
			if !held[s] {
				t.errs["set: "+redisErrKind(sets[s].Err())]++
			}
			anyHeld = anyHeld || held[s]
		}
		if !anyHeld {
			cancel()
			t.recordRound(c, sent, granted, time.Time{}, time.Time{})
			continue
		}
		pipe = rdb.Pipeline()
		for s := range batch {
			if held[s] {
				dels[s] = unlockScript.EvalSha(cctx, pipe, []string{keys[s]}, vals[s])
			}
		}
		relSent := time.Now()
		_, _ = pipe.Exec(cctx)
		cancel()
		done := time.Now()
		t.recordRound(c, sent, granted, relSent, done)
		for s := range batch {
			if !held[s] {
				continue
			}
			if n, err := dels[s].Int(); err != nil || n != 1 {
				t.errs["unlock: "+redisErrKind(err)]++
				continue
			}
			t.record(c, starts[s], granted, done)
		}
	}
}

func redisContended(ctx context.Context, rdb *redis.Client, key string, id int, leaseMs int64, c clock) *tally {
	t := newTally()
	c.serial(id, t, func(n int) (time.Time, string, bool) {
		val := strconv.Itoa(id) + "/" + strconv.Itoa(n)
		got := false
		for time.Now().Before(c.end) && ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, redisCallTimeout)
			err := rdb.Do(cctx, "set", key, val, "nx", "px", leaseMs).Err()
			cancel()
			if err == nil {
				got = true
				break
			}
			if !errors.Is(err, redis.Nil) { // Nil: held by another, try again
				return time.Time{}, "set: " + redisErrKind(err), true
			}
		}
		if !got {
			return time.Time{}, "", false
		}
		granted := time.Now()
		cctx, cancel := context.WithTimeout(ctx, redisCallTimeout)
		n, err := unlockScript.Run(cctx, rdb, []string{key}, val).Int()
		cancel()
		if err != nil || n != 1 {
			return granted, "unlock: " + redisErrKind(err), true
		}
		return granted, "", true
	})
	return t
}

// redisErrKind names a failed SET or unlock: redis.Nil (the key was held,
// or for the unlock, no longer ours) reads as "nil".
func redisErrKind(err error) string {
	switch {
	case err == nil:
		return "not ours"
	case errors.Is(err, redis.Nil):
		return "nil"
	}
	return errKind(err)
}

// redisReady waits until the server at addr answers PING.
func redisReady(ctx context.Context, addr string) error {
	rdb := newRedisClient(addr, 1)
	defer rdb.Close()
	var last error
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		last = rdb.Ping(pctx).Err()
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redis at %s: %v", addr, last)
}
