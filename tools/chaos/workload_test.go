package chaos

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/baton-dev/baton/client"
)

// TestWorkerPlans: a worker's plans depend on the seed and its id alone,
// and stay within the workload's bounds.
func TestWorkerPlans(t *testing.T) {
	cfg := &WorkloadConfig{Keys: DefaultKeys}
	plans := func(seed uint64, id int) []plan {
		wk := &worker{id: id, cfg: cfg, keys: newKeyRing(0, nil), rng: rand.New(rand.NewPCG(seed, uint64(id)))}
		ps := make([]plan, 2000)
		for i := range ps {
			ps[i] = wk.draw()
		}
		return ps
	}
	a := plans(9, 1)
	if !reflect.DeepEqual(a, plans(9, 1)) {
		t.Fatal("the same seed and worker drew different plans")
	}
	if reflect.DeepEqual(a, plans(9, 2)) {
		t.Error("two workers drew the same plans")
	}
	kinds := make(map[string]int)
	for _, p := range a {
		kinds[p.kind]++
		if p.lease < minLease || p.lease > maxLease || p.newLease < minLease || p.newLease > maxLease {
			t.Fatalf("lease out of bounds: %+v", p)
		}
		if p.kind == "try" && p.wait != client.NoWait || p.kind != "try" && (p.wait < minWait || p.wait > maxWait) {
			t.Fatalf("wait out of bounds: %+v", p)
		}
		if p.work < 0 || float64(p.work) > holdShare*float64(p.lease) {
			t.Fatalf("work out of bounds: %+v", p)
		}
	}
	for _, k := range []string{"acquire", "try", "query", "stale-release"} {
		if kinds[k] < 100 {
			t.Errorf("%d plans of kind %s in 2000: %v", kinds[k], k, kinds)
		}
	}
}
