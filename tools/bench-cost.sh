#!/usr/bin/env bash
# What a lock cycle costs each node of a 3-node cluster: CPU time and system
# calls per acquire+release cycle, read from /proc/PID/stat and /proc/PID/io
# of every batond before and after one baton bench run against node 1, for
# several batond configurations run alternately (RUNS rounds, a fresh
# cluster each run), with the medians per configuration. All on this
# machine, 127.0.0.1 only.
#
#   tools/bench-cost.sh                   # CONFIGS="--shards 1|--shards 4" RUNS=3 CONNS=16 DEPTH=16 DURATION=8s
#   CONFIGS="--raft-transport baton|--raft-transport dragonboat" tools/bench-cost.sh
#   CONFIGS="bin=/tmp/base|bin=bin" tools/bench-cost.sh   # two builds (dirs with batond)
#
# CONFIGS is a list of batond flag sets separated by '|'; a set that starts
# with bin=DIR runs DIR/batond instead of this tree's. Per-cycle CPU is
# the process's user+system time divided by the cycles of the run, so it
# counts every cycle's share of background work (compactions, heartbeats)
# too; it is steadier than cycles/s on a shared machine, but other load
# still inflates it (cache, scheduling).
source "$(dirname "$0")/bench-lib.sh"

CONFIGS=${CONFIGS:---shards 1|--shards 4}
RUNS=${RUNS:-3}
CONNS=${CONNS:-16}
DEPTH=${DEPTH:-16}
DURATION=${DURATION:-8s}
IFS='|' read -r -a configs <<<"$CONFIGS"
tick=$(getconf CLK_TCK)

# counters prints, for every node: CPU ticks, read and write system calls.
counters() {
	local p
	for p in "${pids[@]}"; do
		echo "$(cpu_ticks "$p") $(awk '/^syscr/ {print $2}' "/proc/$p/io") $(awk '/^syscw/ {print $2}' "/proc/$p/io")"
	done
}

echo "3 nodes, $CONNS x $DEPTH, $DURATION per run, $RUNS rounds of: $CONFIGS"
for run in $(seq "$RUNS"); do
	for c in "${!configs[@]}"; do
		use_config "${configs[$c]}"
		# shellcheck disable=SC2086 # a configuration is words
		start_cluster 3 $flags
		counters >"$work/before"
		bin/baton bench --addr 127.0.0.1:17910 --conns "$CONNS" --depth "$DEPTH" --duration "$DURATION" --warmup 0 \
			--quiet --json "$work/r.json" >/dev/null
		counters >"$work/after"
		stop_cluster
		cycles=$(jq -r '.cycles' "$work/r.json")
		line=$(paste -d' ' "$work/before" "$work/after" | awk -v c="$cycles" -v t="$tick" '{
			printf " node%d: cpu_us/cycle=%.1f reads/cycle=%.2f writes/cycle=%.2f", NR, ($4 - $1) * 1e6 / t / c, ($5 - $2) / c, ($6 - $3) / c }')
		echo "[${configs[$c]}] run=$run cycles/s=$(jq -r '.cycles_per_sec | floor' "$work/r.json") errors=$(jq -c '.errors' "$work/r.json")$line"
		echo "$line" | grep -o 'cpu_us/cycle=[0-9.]*' | cut -d= -f2 | paste -sd' ' >>"$work/cpu$c"
		jq -r '.cycles_per_sec | floor' "$work/r.json" >>"$work/rate$c"
	done
done
for c in "${!configs[@]}"; do
	cpu=""
	for n in 1 2 3; do cpu="$cpu node$n=$(awk -v n="$n" '{print $n}' "$work/cpu$c" | median)"; done
	echo "[${configs[$c]}] MEDIAN cycles/s=$(median <"$work/rate$c") cpu_us/cycle:$cpu"
done
