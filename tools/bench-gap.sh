#!/usr/bin/env bash
# The longest a client waits at a change of leader (issue 30), for
# BENCHMARKS.md ("Cluster: failover, hand-off, priority"). Each round, on a
# fresh 3-node cluster (127.0.0.1 only; 1 shard), one client of the Go
# library (baton bench --via client, all three addresses) cycles acquire
# and release, one at a time, for DURATION; a second in, node 1 (the
# leader) is stopped:
#
#   handoff   SIGTERM: the graceful stop hands the leadership to node 2
#             first, then answers MOVED
#   kill      kill -9: nodes 2 and 3 elect a leader after an election
#             timeout
#
# The longest cycle is the longest gap the client saw (its library follows
# MOVED and retries ERR unavailable with a backoff, which the figure
# includes). For several builds or flag sets in turns (CONFIGS, as in
# tools/bench-failover.sh), with the medians per configuration.
#
#   tools/bench-gap.sh                                   # CONFIGS="" RUNS=5 DURATION=4s
#   CONFIGS="bin=/tmp/base|bin=bin" tools/bench-gap.sh   # two builds (dirs with batond)
source "$(dirname "$0")/bench-lib.sh"

CONFIGS=${CONFIGS:-}
RUNS=${RUNS:-5}
DURATION=${DURATION:-4s}
IFS='|' read -r -a configs <<<"${CONFIGS:- }"
addrs=127.0.0.1:17910,127.0.0.1:17920,127.0.0.1:17930

# round HOW: one round; prints the longest cycle in microseconds.
round() {
	# shellcheck disable=SC2086 # a configuration is words
	start_cluster 3 --shards 1 $flags
	# Node 1 leads by priority once it has asked for the shard back: wait
	# for that, and for the cluster version's raise, so that the stop is
	# the only change of leader in the round.
	for _ in $(seq 400); do [ "$(serving_shards 1)" = 1 ] && break; sleep 0.01; done
	sleep 1
	bin/baton bench --addr "$addrs" --via client --conns 1 --depth 1 --duration "$DURATION" --warmup 0 \
		--quiet --json "$work/gap.json" >/dev/null 2>&1 &
	local bench=$!
	sleep 1
	{
		case $1 in
		handoff) kill -TERM "${pids[0]}" ;;
		kill) kill -9 "${pids[0]}" ;;
		esac
		wait "${pids[0]}" || true
	} 2>/dev/null
	wait "$bench" || true
	stop_cluster
	jq '.cycle_us.max' "$work/gap.json"
}

echo "3 nodes, 1 shard, one client cycling one at a time; node 1 (the leader) stopped a second in; $RUNS rounds of: ${CONFIGS:-this build}"
declare -A all
for run in $(seq "$RUNS"); do
	for c in "${!configs[@]}"; do
		use_config "${configs[$c]}"
		h=$(round handoff)
		k=$(round kill)
		echo "run=$run config=$c handoff_gap_us=$h kill_gap_us=$k"
		all[$c.handoff]+="$h "
		all[$c.kill]+="$k "
	done
done
for c in "${!configs[@]}"; do
	echo "config $c (${configs[$c]:-this build}): median handoff_gap_us=$(tr ' ' '\n' <<<"${all[$c.handoff]}" | grep . | median) kill_gap_us=$(tr ' ' '\n' <<<"${all[$c.kill]}" | grep . | median)"
done
