#!/usr/bin/env bash
# What an idle node costs: a fresh 3-node cluster (all on this machine,
# 127.0.0.1 only) left alone for SETTLE, then each batond's CPU time over
# IDLE read from /proc/PID/stat, as a percentage of one core; for several
# batond builds alternately (RUNS rounds, a fresh cluster each run), with
# the medians per build and node.
#
#   tools/bench-idle.sh                                       # BATONDS=bin/batond SHARDS=1 RUNS=2
#   BATONDS="/tmp/base/batond bin/batond" tools/bench-idle.sh # two builds
#
# An idle cluster still ticks (Raft's clock, every --rtt), sends heartbeats
# and runs its timers; that is what this counts.
source "$(dirname "$0")/bench-lib.sh"

BATONDS=${BATONDS:-bin/batond}
SHARDS=${SHARDS:-1}
RUNS=${RUNS:-2}
SETTLE=${SETTLE:-5}
IDLE=${IDLE:-15}
tick=$(getconf CLK_TCK)

echo "3 nodes, $SHARDS shard(s), idle for ${IDLE}s after ${SETTLE}s, $RUNS rounds of: $BATONDS"
for run in $(seq "$RUNS"); do
	b=0
	for BATOND in $BATONDS; do
		b=$((b + 1))
		start_cluster 3 --shards "$SHARDS"
		sleep "$SETTLE"
		before=()
		for p in "${pids[@]}"; do before+=("$(cpu_ticks "$p")"); done
		sleep "$IDLE"
		line=""
		for i in "${!pids[@]}"; do
			pct=$(awk -v d=$(($(cpu_ticks "${pids[$i]}") - before[i])) -v t="$tick" -v s="$IDLE" 'BEGIN { printf "%.1f", 100 * d / t / s }')
			line+=" node$((i + 1))=$pct%"
			echo "$pct" >>"$work/idle$b-$i"
		done
		stop_cluster
		echo "[$BATOND] run=$run idle CPU, % of one core:$line"
	done
done
b=0
for BATOND in $BATONDS; do
	b=$((b + 1))
	line=""
	for i in 0 1 2; do line+=" node$((i + 1))=$(median <"$work/idle$b-$i")%"; done
	echo "[$BATOND] MEDIAN idle CPU, % of one core:$line"
done
