package main_test

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
	"github.com/baton-dev/baton/tools/chaos"
)

// clusterLoad is a load of acquire, extend, query and release cycles on a
// cluster while a test changes it (upgrades its nodes, its members),
// recorded on the wire for tools/chaos's checkers: workers cycle on keys
// of their own (upgradeClient.cycle), following MOVED and trying every
// address they were given.
type clusterLoad struct {
	rec     *chaos.Recorder
	workers []*upgradeClient
	cycles  atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// startLoad starts workers clients on addrs, each cycling on the keys
// keysOf gives it; the load stops when the test ends, if not before.
func startLoad(t *testing.T, addrs []string, rec *chaos.Recorder, workers int, keysOf func(worker int) []string) *clusterLoad {
	l := &clusterLoad{rec: rec, stop: make(chan struct{})}
	for i := range workers {
		w := newUpgradeClient(i+1, addrs, rec)
		w.keys = keysOf(w.id)
		l.workers = append(l.workers, w)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			w.cycle(l.stop, &l.cycles)
		}()
	}
	// Should the test fail half way, the workers stop before the nodes
	// are killed (cleanups run last-registered first).
	t.Cleanup(l.stopLoad)
	return l
}

// stopLoad stops the workers and waits for them.
func (l *clusterLoad) stopLoad() {
	l.once.Do(func() {
		close(l.stop)
		l.wg.Wait()
	})
}

// progress waits until the load completes progressCycles more cycles: the
// cluster serves in the phase the test is in.
func (l *clusterLoad) progress(t *testing.T, phase string) {
	t.Helper()
	from := l.cycles.Load()
	deadline := time.Now().Add(20 * time.Second)
	for l.cycles.Load() < from+progressCycles {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d cycles of the load in 20 s, want %d", phase, l.cycles.Load()-from, progressCycles)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check stops the load, has every worker query its keys (each must be
// free: its last acknowledged change was a release), and runs the
// checkers over the wire history of every connection, others' (a control
// client's) included: one answer per request, none late, tokens
// increasing per key, each key's history linearizable against the lock
// model (an acknowledged change lost shows there). It returns the
// history, for the test's own checks.
func (l *clusterLoad) check(t *testing.T, others ...*upgradeClient) []chaos.Op {
	t.Helper()
	l.stopLoad()
	for _, w := range l.workers {
		w.finalQueries()
	}
	l.rec.Finish()
	for _, w := range append(others, l.workers...) {
		w.close()
		for _, f := range w.findings {
			t.Errorf("client %d: %s", w.id, f)
		}
	}
	history := l.rec.History()
	var moved, unavailable, unanswered int
	for i := range history {
		switch o := &history[i]; {
		case !o.Answered:
			unanswered++
		case o.Status == codec.StatusMoved:
			moved++
		case o.Status == codec.StatusErr:
			unavailable++
		}
	}
	t.Logf("%d cycles, %d wire requests: %d answered MOVED, %d ERR, %d unanswered (their connection died, a node having stopped)",
		l.cycles.Load(), len(history), moved, unavailable, unanswered)
	checkStart := time.Now()
	outDir, err := os.MkdirTemp("", "load-check-")
	if err != nil {
		t.Fatal(err)
	}
	rep := chaos.Check(history, l.rec.Problems(), chaos.CheckConfig{AnswerBound: chaos.AnswerBound, OutDir: outDir, Timeout: time.Minute})
	t.Logf("checkers: %d ops over %d keys in %v", rep.Ops, len(rep.ByKey), time.Since(checkStart).Round(time.Millisecond))
	for _, v := range rep.Violations {
		t.Errorf("checker: %s", v)
	}
	if rep.Visualization != "" {
		t.Errorf("porcupine's visualization: %s", rep.Visualization)
	}
	if rep.OK() {
		os.RemoveAll(outDir)
	}
	return history
}

// workerKeys gives worker w of a load keysPerWorker keys, spread over the
// shards, named after prefix.
func workerKeys(t *testing.T, prefix string, keysPerWorker, shards int) func(w int) []string {
	return func(w int) []string {
		keys := make([]string, keysPerWorker)
		for j := range keys {
			keys[j] = keyOfShard(t, fmt.Sprintf("%s/w%d/%d/", prefix, w, j), uint64(j%shards+1), shards)
		}
		return keys
	}
}
