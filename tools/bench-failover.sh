#!/usr/bin/env bash
# How long a 3-node cluster's keys go without a leader after kill -9 of the
# leader: a fresh cluster (all on this machine, 127.0.0.1 only) is left to
# settle for a second, node 1 (the leader, by priority) is killed, and
# nodes 2 and 3's /status are polled every few milliseconds until they
# lead and serve every shard between them. For several batond
# configurations run alternately (RUNS rounds, a fresh cluster each run),
# with the medians per configuration. The poll's own delay (a curl and jq
# per node) is in the figures, a few milliseconds.
#
#   tools/bench-failover.sh               # CONFIGS="--rtt 10ms|--rtt 20ms|--rtt 50ms" RUNS=5 SHARDS=1
#   CONFIGS="bin=/tmp/base|bin=bin" tools/bench-failover.sh   # two builds (dirs with batond)
#
# CONFIGS is a list of batond flag sets separated by '|'; a set that starts
# with bin=DIR runs DIR/batond instead of this tree's.
source "$(dirname "$0")/bench-lib.sh"

CONFIGS=${CONFIGS:---rtt 10ms|--rtt 20ms|--rtt 50ms}
RUNS=${RUNS:-5}
SHARDS=${SHARDS:-1}
IFS='|' read -r -a configs <<<"$CONFIGS"

echo "3 nodes, $SHARDS shard(s), kill -9 of the leader, $RUNS rounds of: $CONFIGS"
for run in $(seq "$RUNS"); do
	for c in "${!configs[@]}"; do
		use_config "${configs[$c]}"
		# shellcheck disable=SC2086 # a configuration is words
		start_cluster 3 --shards "$SHARDS" $flags
		sleep 1
		killed=$(now_ms)
		gap=""
		{ # the shell reports the killed node on stderr: not news here
			kill -9 "${pids[0]}"
			for _ in $(seq 3000); do
				if [ "$(serving_shards 2 3)" = "$SHARDS" ]; then gap=$(($(now_ms) - killed)); break; fi
				sleep 0.005
			done
			wait "${pids[0]}" || true
		} 2>/dev/null
		stop_cluster
		echo "[${configs[$c]}] run=$run served_again_ms=${gap:-never}"
		[ -n "$gap" ] && echo "$gap" >>"$work/gap$c"
	done
done
for c in "${!configs[@]}"; do
	echo "[${configs[$c]}] MEDIAN served_again_ms=$(median <"$work/gap$c" 2>/dev/null || echo never)"
done
