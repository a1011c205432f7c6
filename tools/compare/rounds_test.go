package main

import (
	"strings"
	"testing"

	"github.com/baton-dev/baton/bench"
)

// Rounds of the same system: each row is its median round, the ratios are
// of the median rounds, and a note gives the range and the failed rounds.
func TestTableRounds(t *testing.T) {
	sat := func(rate float64, p50 int64) *bench.Result {
		return &bench.Result{Conns: 16, Depth: 16, CyclesPerSec: rate, AcquireUs: bench.Latency{P50: p50, P99: 2 * p50}}
	}
	open := func(p99 int64) *bench.Result {
		return &bench.Result{Conns: 16, Depth: 1, Rate: 1000, CyclesPerSec: 1000, AcquireUs: bench.Latency{P50: p99 / 4, P99: p99}}
	}
	out := tableOf(t, map[string]*bench.Result{
		"b1.json": sat(30_000, 900), "b2.json": sat(10_000, 3000), "b3.json": sat(20_000, 1500), "b4.json": sat(40_000, 800),
		"r1.json": sat(40_000, 1000),
		"o1.json": open(5000), "o2.json": open(1000), "o3.json": open(3000),
		"p1.json": open(2000),
	}, "sat\tbaton-3nodes\tb1.json\nsat\tredis-always\tr1.json\n"+
		"sat\tbaton-3nodes\tb2.json\nsat\tredis-always\tmissing.json\n"+
		"sat\tbaton-3nodes\tb3.json\nsat\tbaton-3nodes\tb4.json\n"+
		"sat\tetcd-3nodes\tmissing.json\nsat\tetcd-3nodes\tmissing.json\n"+
		"rate\tbaton-3nodes\to1.json\nrate\tredis-always\tp1.json\nrate\tbaton-3nodes\to2.json\nrate\tbaton-3nodes\to3.json\n")
	expectIn(t, "table", out, out,
		// 10k, 20k, 30k, 40k: the lower middle one, all of its figures.
		"| baton-3nodes | 16 x 16 | 20,000 | 1.5 ms | 3 ms |",
		"| redis-always | 16 x 16 | 40,000 | 1 ms |",
		"baton-3nodes / redis-always: rate 0.50x, acquire p50 1.50x",
		"Median of 4 rounds by rate (each row is its median round); the rounds ranged: "+
			"baton-3nodes 10,000 to 40,000; redis-always 40,000 to 40,000 (1 failed); etcd-3nodes no result (2 failed).",
		"| etcd-3nodes | | failed: no result |",
		"| baton-3nodes | 16 x 1 | 1,000 | 1,000 | yes | 750 µs | 3 ms |",
		"Median of 3 rounds by acquire p99 (each row is its median round); the rounds ranged: baton-3nodes 1 ms to 5 ms.",
		"baton-3nodes / redis-always: acquire p50 1.50x, p99 1.50x",
	)
	if n := strings.Count(out, "| baton-3nodes |"); n != 2 {
		t.Errorf("%d baton-3nodes rows, want one per section:\n%s", n, out)
	}
}
