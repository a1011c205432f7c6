#!/usr/bin/env bash
# Single-node figures for BENCHMARKS.md: pipelined acquire+release cycles on
# distinct keys (fsync on), for --shards 1 and 4 in the same run, RUNS fresh
# nodes each; then memory per held lock and per idle connection, each on a
# fresh node. Prints every run and the medians.
#
#   tools/bench-node.sh            # RUNS=3 DURATION=10s CONNS=16 DEPTH=16
#
# Every node listens on 127.0.0.1 only and is stopped on exit.
source "$(dirname "$0")/bench-lib.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-16}
DEPTH=${DEPTH:-16}
HOLD=${HOLD:-1000000}
IDLE=${IDLE:-10000}
CLIENT=127.0.0.1:17900
RAFT=127.0.0.1:17901


for shards in 1 4; do
	: >"$work/rate" ; : >"$work/p50" ; : >"$work/p99"
	for run in $(seq "$RUNS"); do
		start "$shards"
		bin/baton bench --addr "$CLIENT" --conns "$CONNS" --depth "$DEPTH" --duration "$DURATION" \
			--quiet --json "$work/r.json" >/dev/null
		stop
		rate=$(jq -r '.cycles_per_sec | floor' "$work/r.json")
		p50=$(jq -r '.acquire_us.p50' "$work/r.json")
		p99=$(jq -r '.acquire_us.p99' "$work/r.json")
		echo "shards=$shards run=$run cycles/s=$rate acquire_p50_us=$p50 acquire_p99_us=$p99"
		echo "$rate" >>"$work/rate"; echo "$p50" >>"$work/p50"; echo "$p99" >>"$work/p99"
	done
	echo "shards=$shards MEDIAN cycles/s=$(median <"$work/rate") acquire_p50_us=$(median <"$work/p50") acquire_p99_us=$(median <"$work/p99")"
done

start 4
bin/baton bench --addr "$CLIENT" --workload hold --hold "$HOLD" --pid "$pid" --duration 1s --quiet \
	--json "$work/h.json" >/dev/null
echo "hold=$HOLD bytes_per_lock=$(jq -r '.bytes_per_lock | floor' "$work/h.json")"
stop
start 4
bin/baton bench --addr "$CLIENT" --workload hold --hold 0 --idle-conns "$IDLE" --pid "$pid" --duration 1s --quiet \
	--json "$work/i.json" >/dev/null
echo "idle_conns=$IDLE bytes_per_idle_conn=$(jq -r '.bytes_per_idle_conn | floor' "$work/i.json")"
stop
