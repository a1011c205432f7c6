#!/usr/bin/env bash
# Three-node cluster against a single node, same workload, same run:
# pipelined acquire+release cycles on distinct keys (fsync on), RUNS rounds,
# each round a fresh single node then a fresh 3-node cluster (all on this
# machine, 127.0.0.1 only). The cluster is driven through node 1, which leads
# every shard once priority has settled. Prints every run and the medians.
#
#   tools/bench-cluster.sh        # RUNS=3 DURATION=10s CONNS=16 DEPTH=16
source "$(dirname "$0")/bench-lib.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-16}
DEPTH=${DEPTH:-16}
SHARDS=${SHARDS:-4}

for n in 1 3; do : >"$work/rate$n"; : >"$work/p50$n"; : >"$work/p99$n"; done
for run in $(seq "$RUNS"); do
	for n in 1 3; do
		start_cluster "$n" --shards "$SHARDS"
		bin/baton bench --addr 127.0.0.1:17910 --conns "$CONNS" --depth "$DEPTH" --duration "$DURATION" \
			--quiet --json "$work/r.json" >/dev/null
		stop_cluster
		rate=$(jq -r '.cycles_per_sec | floor' "$work/r.json")
		p50=$(jq -r '.acquire_us.p50' "$work/r.json")
		p99=$(jq -r '.acquire_us.p99' "$work/r.json")
		errs=$(jq -c '.errors' "$work/r.json")
		echo "nodes=$n run=$run cycles/s=$rate acquire_p50_us=$p50 acquire_p99_us=$p99 errors=$errs"
		echo "$rate" >>"$work/rate$n"; echo "$p50" >>"$work/p50$n"; echo "$p99" >>"$work/p99$n"
	done
done
for n in 1 3; do
	echo "nodes=$n MEDIAN cycles/s=$(median <"$work/rate$n") acquire_p50_us=$(median <"$work/p50$n") acquire_p99_us=$(median <"$work/p99$n")"
done
