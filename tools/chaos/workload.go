package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/client"
)

// Bounds of the workload's requests. Leases are short so that expiry and
// hand-off happen all the time, under faults too; waits are finite so that
// no call can wait without bound.
const (
	minLease = 300 * time.Millisecond
	maxLease = 2000 * time.Millisecond
	minWait  = 50 * time.Millisecond
	maxWait  = 2000 * time.Millisecond
	// callSlack is added to a call's own wait to make its context: a call
	// may retry through an election or a node's restart.
	callSlack = 10 * time.Second
	// holdShare bounds how much of its lease a holder works before it
	// releases: long enough that a lease cut short would show.
	holdShare = 0.8
	// maxOpsPerWorker bounds a worker's loop whatever the clock does.
	maxOpsPerWorker = 1_000_000
	// recentTokens is how many of its past tokens a worker keeps for stale
	// releases.
	recentTokens = 8
	// probeLease and probeEvery shape the prober: a try-lock and a release
	// of an uncontended key about every probeEvery.
	probeLease = 500 * time.Millisecond
	probeEvery = 20 * time.Millisecond
	// unavailableBackoff is a worker's pause after a call that found no
	// server (every node down, as in a restart of all): such a call fails
	// at once, and without a pause the workers would spin and starve the
	// nodes that are starting.
	unavailableBackoff = 50 * time.Millisecond
	// maxEventsPerWorker bounds each worker's event log (see CallEvent).
	// A 30-minute run logs some 20,000 events per worker and 100,000 for
	// the prober; the bound only stops a runaway loop from eating memory.
	maxEventsPerWorker = 1 << 18
)

// CallGrace is how late past its context's deadline a client call may
// return before the run reports it: the client gives up when its context
// ends, but a busy machine (and the race detector) delays that a little.
const CallGrace = 3 * time.Second

// WorkloadConfig says what a Workload does.
type WorkloadConfig struct {
	Keys []string
	// ProbeKeys are the prober's keys, which no worker touches; none means
	// no prober.
	ProbeKeys []string
	Workers   int
	Clients   []*client.Client // workers use them round-robin
	Resource  *Resource
	Clock     func() time.Duration // the recorder's Since
	Seed      uint64               // each worker draws from its own generator seeded from it
	// Generation is how long one set of keys is used: then Keys and
	// ProbeKeys are replaced by new names on the same shards (keys.go).
	// 0 means never.
	Generation time.Duration
	// SharedKeys are the shared workers' keys (shared.go), used by
	// SharedWorkers more workers; none means no shared worker.
	SharedKeys    []string
	SharedWorkers int
}

// Workload is the client side of a chaos run: Workers goroutines that
// acquire, try, extend, release, skip releases and query the Keys through
// the Clients, and write to the fenced Resource while they hold a lock.
// Every call has a context with a deadline; each worker counts what it did
// and checks that every call returned within its bound.
//
// A prober, one more goroutine, takes and releases the ProbeKeys in turn
// all the time. Nobody else wants them, so its grants stop only when the
// service cannot grant: they are what the run's availability figures
// measure, since the workers' own grants also pause whenever their few
// keys are all held.
type Workload struct {
	cfg     WorkloadConfig
	keys    *keyRing
	stop    chan struct{}
	wg      sync.WaitGroup
	workers []*worker
}

// StartWorkload starts the workers; Stop ends them.
func StartWorkload(cfg WorkloadConfig) *Workload {
	w := &Workload{cfg: cfg, keys: newKeyRing(cfg.Generation, cfg.Clock), stop: make(chan struct{})}
	for i := range cfg.Workers {
		wk := &worker{
			id:   i + 1,
			cfg:  &w.cfg,
			keys: w.keys,
			cl:   cfg.Clients[i%len(cfg.Clients)],
			rng:  rand.New(rand.NewPCG(cfg.Seed, uint64(i+1))),
			stop: w.stop,
			ops:  make(map[string]int),
		}
		w.workers = append(w.workers, wk)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			wk.run()
		}()
	}
	for i := range cfg.SharedWorkers {
		if len(cfg.SharedKeys) == 0 {
			break
		}
		id := cfg.Workers + i + 1
		wk := &worker{
			id:     id,
			cfg:    &w.cfg,
			keys:   w.keys,
			cl:     cfg.Clients[id%len(cfg.Clients)],
			rng:    rand.New(rand.NewPCG(cfg.Seed, uint64(id))),
			stop:   w.stop,
			ops:    make(map[string]int),
			shared: true,
		}
		w.workers = append(w.workers, wk)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			wk.run()
		}()
	}
	if len(cfg.ProbeKeys) > 0 {
		p := &worker{
			id:   0,
			cfg:  &w.cfg,
			keys: w.keys,
			cl:   cfg.Clients[0],
			stop: w.stop,
			ops:  make(map[string]int),
		}
		w.workers = append(w.workers, p)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			p.probe()
		}()
	}
	return w
}

// Stop tells the workers to stop after the call each one is in (a holder
// releases first) and waits for them up to timeout. It reports false when
// some still ran then; their calls are bounded, so closing the clients ends
// them (see Wait).
func (w *Workload) Stop(timeout time.Duration) bool {
	close(w.stop)
	return w.Wait(timeout)
}

// Wait waits for the workers, after Stop, up to timeout; false when some
// still run.
func (w *Workload) Wait(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// KeysUsed returns every key the workload used, of every generation,
// sorted.
func (w *Workload) KeysUsed() []string { return w.keys.used() }

// WorkloadStats is what the workers did, once they stopped.
type WorkloadStats struct {
	// Ops counts calls by "kind outcome", e.g. "acquire ok", "try timeout".
	Ops map[string]int
	// LateCalls are calls that returned after their bound: one line each.
	LateCalls []string
	// Unexpected are errors the workload never expects (a bad request, an
	// internal error): one line each, as they are clues.
	Unexpected []string
}

// Stats sums the workers' counts. Call it after the workers stopped.
func (w *Workload) Stats() WorkloadStats {
	s := WorkloadStats{Ops: make(map[string]int)}
	for _, wk := range w.workers {
		wk.mu.Lock()
		for k, n := range wk.ops {
			s.Ops[k] += n
		}
		s.LateCalls = append(s.LateCalls, wk.late...)
		s.Unexpected = append(s.Unexpected, wk.unexpected...)
		wk.mu.Unlock()
	}
	return s
}

// Events returns every worker's client-level events (the prober's too), in
// Call order, and how many were left out because a worker's log was full.
// Call it after the workers stopped.
func (w *Workload) Events() (events []CallEvent, dropped int) {
	for _, wk := range w.workers {
		wk.mu.Lock()
		events = append(events, wk.events...)
		dropped += wk.dropped
		wk.mu.Unlock()
	}
	slices.SortStableFunc(events, func(a, b CallEvent) int { return cmp.Compare(a.Call, b.Call) })
	return events, dropped
}

// String renders the counts sorted by kind, for the summary.
func (s WorkloadStats) String() string {
	keys := make([]string, 0, len(s.Ops))
	for k := range s.Ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, s.Ops[k])
	}
	return b.String()
}

// worker is one goroutine of the workload. Its generator is its own, so
// that its choices depend on the seed alone (their timing cannot); the
// prober, which chooses nothing, has none.
type worker struct {
	id   int
	cfg  *WorkloadConfig
	keys *keyRing
	cl   *client.Client
	rng  *rand.Rand
	stop <-chan struct{}
	// shared: a shared worker, on the SharedKeys (drawShared).
	shared bool

	recent      []recentToken // past grants, for stale releases
	unavailable bool          // the last call found no server

	mu         sync.Mutex // guards what Stats and Events read
	ops        map[string]int
	late       []string
	unexpected []string
	events     []CallEvent // up to maxEventsPerWorker
	dropped    int         // events past that bound
}

// recentToken is a grant a worker held once.
type recentToken struct {
	key   string
	token uint64
}

func (wk *worker) stopped() bool {
	select {
	case <-wk.stop:
		return true
	default:
		return false
	}
}

func (wk *worker) run() {
	for range maxOpsPerWorker {
		if wk.stopped() {
			return
		}
		if wk.unavailable {
			wk.pause(unavailableBackoff)
		}
		var p plan
		if wk.shared {
			p = wk.drawShared()
		} else {
			p = wk.draw()
		}
		switch p.kind {
		case "acquire", "try", "shared", "shared-try", "writer":
			wk.acquire(p)
		case "query":
			wk.query(p.key)
		case "stale-release":
			wk.staleRelease(p)
		}
	}
}

// plan is every choice of one op of a worker, drawn at once whatever the
// op turns out to need, so that a worker's n-th op is the same for a seed
// however the earlier ones went.
type plan struct {
	kind      string // acquire, try, query or stale-release
	key       string
	wait      time.Duration // acquire
	lease     time.Duration
	work      time.Duration // how long the holder works, in two halves
	extend    bool          // half way through, to newLease
	newLease  time.Duration
	skip      bool // no release: the lease runs out
	lateWrite bool // with skip: write once more, lateBy after the sure interval
	lateBy    time.Duration
	stale     int // stale-release: which remembered token
}

// draw draws the next op's plan.
func (wk *worker) draw() plan {
	r := wk.rng
	p := plan{
		key:       wk.keys.now(wk.cfg.Keys[r.IntN(len(wk.cfg.Keys))]),
		wait:      randDuration(r, minWait, maxWait),
		lease:     randDuration(r, minLease, maxLease),
		extend:    r.IntN(100) < 30,
		newLease:  randDuration(r, minLease, maxLease),
		skip:      r.IntN(100) < 20,
		lateWrite: r.IntN(100) < 50,
		lateBy:    randDuration(r, 0, 200*time.Millisecond),
		stale:     r.IntN(recentTokens),
	}
	p.work = time.Duration(r.Float64() * holdShare * float64(p.lease))
	switch n := r.IntN(100); {
	case n < 45:
		p.kind = "acquire"
	case n < 70:
		p.kind, p.wait = "try", client.NoWait
	case n < 88:
		p.kind = "query"
	default:
		p.kind = "stale-release"
	}
	return p
}

// drawShared draws a shared worker's next op: mostly one of the key's
// SharedPermits shared holds (waiting or a try), now and then the key
// alone (a writer, which waits for every shared holder to leave), or a
// query. Its holds write nothing to the fenced resource, which is for
// exclusive holders.
func (wk *worker) drawShared() plan {
	p := wk.draw()
	p.key = wk.keys.now(wk.cfg.SharedKeys[wk.rng.IntN(len(wk.cfg.SharedKeys))])
	switch n := wk.rng.IntN(100); {
	case n < 50:
		p.kind = "shared"
	case n < 70:
		p.kind, p.wait = "shared-try", client.NoWait
	case n < 82:
		p.kind = "writer"
	default:
		p.kind = "query"
	}
	return p
}

// probe is the prober's loop (see Workload): a try-lock and a release, in
// one bounded call, of each probe key in turn.
func (wk *worker) probe() {
	keys := wk.cfg.ProbeKeys
	for i := range maxOpsPerWorker {
		if wk.stopped() {
			return
		}
		ev := CallEvent{Kind: "probe", Key: wk.keys.now(keys[i%len(keys)]), Lease: probeLease, Wait: client.NoWait}
		wk.call(&ev, callSlack, func(ctx context.Context) error {
			lock, err := wk.cl.TryAcquire(ctx, ev.Key, probeLease)
			if err != nil {
				return err
			}
			ev.Token, ev.Owner = lock.Token(), lock.Owner()
			return lock.Release(ctx)
		})
		wk.pause(probeEvery)
	}
}

// randDuration draws uniformly from [lo, hi], in whole milliseconds as the
// wire carries them.
func randDuration(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	ms := lo.Milliseconds() + rng.Int64N(hi.Milliseconds()-lo.Milliseconds()+1)
	return time.Duration(ms) * time.Millisecond
}

// call runs one client call under a context bounded by bound, counts its
// outcome under ev.Kind, checks that it returned in time and logs ev, with
// its times and outcome filled in. fn may fill in what only the call learns
// (a grant's token and owner). It returns the call's time on the
// recorder's clock (before fn ran) and its error.
func (wk *worker) call(ev *CallEvent, bound time.Duration, fn func(ctx context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := wk.cfg.Clock()
	err := fn(ctx)
	end := wk.cfg.Clock()
	took := end - start
	wk.mu.Lock()
	defer wk.mu.Unlock()
	outcome := outcomeOf(err)
	wk.unavailable = outcome == "unavailable"
	wk.ops[ev.Kind+" "+outcome]++
	if took > bound+CallGrace {
		wk.late = append(wk.late, fmt.Sprintf("worker %d: %s called at %v returned after %v, its context's bound is %v (%s)",
			wk.id, ev.Kind, start, took, bound, outcome))
	}
	if outcome == "other" || strings.HasPrefix(outcome, "err-") {
		if len(wk.unexpected) < 20 {
			wk.unexpected = append(wk.unexpected, fmt.Sprintf("worker %d: %s at %v: %v", wk.id, ev.Kind, start, err))
		}
	}
	ev.Worker, ev.Call, ev.Return, ev.Outcome = wk.id, start, end, outcome
	wk.logLocked(*ev)
	return start, err
}

// logLocked appends ev to the worker's event log, unless it is full.
// wk.mu is held.
func (wk *worker) logLocked(ev CallEvent) {
	if len(wk.events) == maxEventsPerWorker {
		wk.dropped++
		return
	}
	wk.events = append(wk.events, ev)
}

// outcomeOf names a call's outcome for the counters.
func outcomeOf(err error) string {
	var se *client.ServerError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, client.ErrTimeout):
		return "timeout"
	case errors.Is(err, client.ErrNotHeld):
		return "notheld"
	case errors.Is(err, client.ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.As(err, &se) && se.Code != "unavailable":
		return "err-" + se.Code
	case errors.Is(err, client.ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

// acquire calls Acquire (a try-lock when the plan's wait is NoWait), or
// AcquireShared for a shared worker's shared kinds, and, once granted,
// holds the lock.
func (wk *worker) acquire(p plan) {
	var lock *client.Lock
	ev := CallEvent{Kind: p.kind, Key: p.key, Lease: p.lease, Wait: p.wait}
	shared := p.kind == "shared" || p.kind == "shared-try"
	call, err := wk.call(&ev, max(p.wait, 0)+callSlack, func(ctx context.Context) error {
		var err error
		if shared {
			lock, err = wk.cl.AcquireShared(ctx, p.key, SharedPermits, p.lease, p.wait)
		} else {
			lock, err = wk.cl.Acquire(ctx, p.key, p.lease, p.wait)
		}
		if err == nil {
			// The owner is what ties this grant to its requests on the
			// wire: every attempt of one Acquire names it.
			ev.Token, ev.Owner = lock.Token(), lock.Owner()
		}
		return err
	})
	if err != nil {
		return
	}
	if wk.shared {
		wk.hold(lock, nil, p)
		return
	}
	h := NewHolding(p.key, lock.Token(), wk.id, call, ev.Return, p.lease)
	wk.remember(p.key, lock.Token())
	wk.hold(lock, h, p)
}

// hold is the life of one grant: write to the resource at once, work for
// part of the lease, maybe extend (and write again), then release (writing
// once more just before) or walk away and let the lease run out. A shared
// worker's grant has no Holding (h is nil) and writes nothing.
func (wk *worker) hold(lock *client.Lock, h *Holding, p plan) {
	res := wk.cfg.Resource
	write := func() {
		if h != nil {
			res.Write(h)
		}
	}
	write()
	wk.pause(p.work / 2)
	if p.extend && !wk.stopped() {
		called := wk.cfg.Clock()
		if h != nil {
			h.ExtendCalled(called, p.newLease)
		}
		ev := CallEvent{Kind: "extend", Key: lock.Key(), Token: lock.Token(), Lease: p.newLease}
		_, err := wk.call(&ev, callSlack, func(ctx context.Context) error {
			return lock.Extend(ctx, p.newLease)
		})
		switch {
		case err == nil:
			if h != nil {
				h.Extended(called, p.newLease)
			}
			write()
		case errors.Is(err, client.ErrNotHeld):
			return // lost: the holder knows, and stops using it
		}
	}
	wk.pause(p.work / 2)

	if p.skip && !wk.stopped() {
		wk.count("skip-release")
		now := wk.cfg.Clock()
		wk.log(CallEvent{Kind: "skip-release", Key: lock.Key(), Token: lock.Token(), Call: now, Return: now})
		if p.lateWrite && h != nil {
			// A holder that stalls past its lease and writes anyway: the
			// fence must turn it away once someone else holds the key.
			wk.pause(h.SureUntil - wk.cfg.Clock() + p.lateBy)
			res.Write(h)
			wk.count("late-write")
		}
		return
	}
	write()
	if h != nil {
		h.ReleaseCalled(wk.cfg.Clock())
	}
	ev := CallEvent{Kind: "release", Key: lock.Key(), Token: lock.Token()}
	wk.call(&ev, callSlack, func(ctx context.Context) error {
		return lock.Release(ctx)
	})
}

// query calls Query.
func (wk *worker) query(key string) {
	ev := CallEvent{Kind: "query", Key: key}
	wk.call(&ev, callSlack, func(ctx context.Context) error {
		st, err := wk.cl.Query(ctx, key)
		if err == nil && st.Held {
			ev.Token, ev.Owner = st.Token, st.Owner
		}
		return err
	})
}

// staleRelease releases the plan's key with a token this worker held once
// (any key's): a late or repeated release, which must free nobody else's
// lock. Before the worker has held anything it queries instead.
func (wk *worker) staleRelease(p plan) {
	if len(wk.recent) == 0 {
		wk.query(p.key)
		return
	}
	old := wk.recent[p.stale%len(wk.recent)]
	ev := CallEvent{Kind: "stale-release", Key: p.key, Token: old.token}
	wk.call(&ev, callSlack, func(ctx context.Context) error {
		return wk.cl.Release(ctx, p.key, old.token)
	})
}

// remember keeps a granted token for stale releases.
func (wk *worker) remember(key string, token uint64) {
	if len(wk.recent) == recentTokens {
		wk.recent = slices.Delete(wk.recent, 0, 1)
	}
	wk.recent = append(wk.recent, recentToken{key, token})
}

// count counts an event that is not a call.
func (wk *worker) count(kind string) {
	wk.mu.Lock()
	wk.ops[kind]++
	wk.mu.Unlock()
}

// log logs an event that is not a call.
func (wk *worker) log(ev CallEvent) {
	ev.Worker = wk.id
	wk.mu.Lock()
	wk.logLocked(ev)
	wk.mu.Unlock()
}

// pause waits d, a holder's deliberate work time, or less if the workload
// stops.
func (wk *worker) pause(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wk.stop:
	}
}
