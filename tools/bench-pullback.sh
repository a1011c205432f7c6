#!/usr/bin/env bash
# What a priority pull-back costs the clients of a busy cluster: a fresh
# 3-node cluster (all on this machine, 127.0.0.1 only), node 1 killed, node
# 2 left to lead; then baton bench drives nodes 2 and 3 (it does not follow
# MOVED, so once node 1 leads it counts MOVED answers, at a high rate), and
# 1.5 s in node 1 starts again and takes its shards back. Per run: how long
# until node 1 leads and serves every shard (its /status polled), and the
# bench's answers ERR unavailable (proposals dropped, or no leader known).
# For several batond configurations alternately (RUNS rounds), with the
# medians per configuration.
#
#   tools/bench-pullback.sh                                  # CONFIGS="" RUNS=5 SHARDS=4
#   CONFIGS="bin=/tmp/base|bin=bin" tools/bench-pullback.sh  # two builds (dirs with batond)
#
# CONFIGS is a list of batond flag sets separated by '|'; a set that starts
# with bin=DIR runs DIR/batond instead of this tree's.
source "$(dirname "$0")/bench-lib.sh"

CONFIGS=${CONFIGS:-}
RUNS=${RUNS:-5}
SHARDS=${SHARDS:-4}
IFS='|' read -r -a configs <<<"$CONFIGS"
[ ${#configs[@]} -gt 0 ] || configs=("")

echo "3 nodes, $SHARDS shard(s), node 1 restarted under load, $RUNS rounds of: ${CONFIGS:-(defaults)}"
for run in $(seq "$RUNS"); do
	for c in "${!configs[@]}"; do
		use_config "${configs[$c]}"
		# shellcheck disable=SC2086 # a configuration is words
		start_cluster 3 --shards "$SHARDS" $flags
		{ # the shell reports the killed node on stderr: not news here
			kill -9 "${pids[0]}"
			wait "${pids[0]}" || true
		} 2>/dev/null
		wait_ready 127.0.0.1:17920 || { echo "node 2 did not take over"; exit 1; }
		bin/baton bench --addr 127.0.0.1:17920,127.0.0.1:17930 --conns 4 --depth 4 --duration 6s \
			--warmup 0 --quiet --json "$work/bench.json" >/dev/null 2>&1 &
		bench=$!
		sleep 1.5
		started=$(now_ms)
		# shellcheck disable=SC2086
		start_node 1 --shards "$SHARDS" $flags
		back=""
		for _ in $(seq 1000); do
			if [ "$(serving_shards 1)" = "$SHARDS" ]; then back=$(($(now_ms) - started)); break; fi
			sleep 0.005
		done
		wait "$bench" || true
		unavailable=$(jq '.errors["ERR unavailable"] // 0' "$work/bench.json")
		stop_cluster
		echo "[${configs[$c]}] run=$run node1_serves_all_ms=${back:-never} unavailable=$unavailable"
		[ -n "$back" ] && echo "$back" >>"$work/back$c"
		echo "$unavailable" >>"$work/unavailable$c"
	done
done
for c in "${!configs[@]}"; do
	echo "[${configs[$c]}] MEDIAN node1_serves_all_ms=$(median <"$work/back$c" 2>/dev/null || echo never) unavailable=$(median <"$work/unavailable$c")"
done
