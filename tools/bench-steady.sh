#!/usr/bin/env bash
# A 3-node cluster kept under load for a while: ROUNDS back-to-back baton
# bench runs of DURATION against node 1 of one fresh cluster (all on this
# machine, 127.0.0.1 only), printing for each round the cycles/s, a
# follower's (node 2's) CPU per cycle and the size of its Raft log on disk.
# Short benchmarks start from an empty log; this shows what the log's
# growth costs once the store has to flush and compact it. Each batond in
# BATONDS (paths, this tree's build by default) gets a cluster of its own,
# one after the other.
#
#   tools/bench-steady.sh        # ROUNDS=4 DURATION=15s CONNS=4 DEPTH=1024 SHARDS=1
#   BATONDS="/tmp/base/batond bin/batond" tools/bench-steady.sh
#   BATOND_FLAGS="--snapshot-bytes 67108864" tools/bench-steady.sh
source "$(dirname "$0")/bench-lib.sh"

ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-15s}
CONNS=${CONNS:-4}
DEPTH=${DEPTH:-1024}
SHARDS=${SHARDS:-1}
BATONDS=${BATONDS:-bin/batond}
tick=$(getconf CLK_TCK)

echo "3 nodes, $SHARDS shards, $CONNS x $DEPTH, $ROUNDS rounds of $DURATION, flags: ${BATOND_FLAGS:-none}"
for BATOND in $BATONDS; do
	# shellcheck disable=SC2086 # BATOND_FLAGS are words
	start_cluster 3 --shards "$SHARDS" ${BATOND_FLAGS:-}
	for round in $(seq "$ROUNDS"); do
		before=$(cpu_ticks "${pids[1]}")
		bin/baton bench --addr 127.0.0.1:17910 --conns "$CONNS" --depth "$DEPTH" --duration "$DURATION" --warmup 0 \
			--quiet --json "$work/r.json" >/dev/null
		after=$(cpu_ticks "${pids[1]}")
		cycles=$(jq -r '.cycles' "$work/r.json")
		echo "[$BATOND] round=$round cycles/s=$(jq -r '.cycles_per_sec | floor' "$work/r.json")" \
			"follower_cpu_us/cycle=$(awk -v d=$((after - before)) -v c="$cycles" -v t="$tick" 'BEGIN { printf "%.2f", d * 1e6 / t / c }')" \
			"follower_raft_log_mb=$(du -sm "$work/n2/raft" | cut -f1) errors=$(jq -c '.errors' "$work/r.json")"
	done
	stop_cluster
done
