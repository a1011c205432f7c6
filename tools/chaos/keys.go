package chaos

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/engine"
)

// KeyGeneration is how long the workload uses one set of keys before it
// moves on to the next. A key's history is checked for linearizability by
// porcupine, whose search grows steeply with the history's length: a
// 30-minute run on six keys gave each about 10,000 operations, more than
// porcupine could decide in minutes. Histories of different keys are
// independent, so moving to fresh keys every few minutes bounds each
// key's history and keeps the contention (workers per key) the same.
const KeyGeneration = 3 * time.Minute

// runShards is the shard count of the chaos cluster.
const runShards = 4

// generationKey is key's name in generation g: key itself in generation 0,
// else the first key+"~g<g>.<n>" on the same shard, so that the keys of
// every generation spread over the shards as the first ones do.
func generationKey(key string, g int) string {
	if g == 0 {
		return key
	}
	shard := engine.ShardOf([]byte(key), runShards)
	for n := 0; ; n++ {
		k := fmt.Sprintf("%s~g%d.%d", key, g, n)
		if engine.ShardOf([]byte(k), runShards) == shard {
			return k
		}
	}
}

// keyRing hands out the keys of the current generation and remembers every
// key handed out, for the end-of-run checks.
type keyRing struct {
	every time.Duration        // KeyGeneration; 0: generation 0 only
	clock func() time.Duration // the recorder's Since

	mu   sync.Mutex
	gens map[int]map[string]string // generation -> base key -> its name
}

func newKeyRing(every time.Duration, clock func() time.Duration) *keyRing {
	return &keyRing{every: every, clock: clock, gens: make(map[int]map[string]string)}
}

// now is base's name in the current generation.
func (r *keyRing) now(base string) string {
	g := 0
	if r.every > 0 {
		g = int(r.clock() / r.every)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	names := r.gens[g]
	if names == nil {
		names = make(map[string]string)
		r.gens[g] = names
	}
	name, ok := names[base]
	if !ok {
		name = generationKey(base, g)
		names[base] = name
	}
	return name
}

// used returns every key handed out, sorted.
func (r *keyRing) used() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for _, names := range r.gens {
		for _, k := range names {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
