#!/usr/bin/env bash
# Where the CPU of a 3-node cluster goes under load: a fresh cluster (all on
# this machine, 127.0.0.1 only), driven through node 1 by baton bench, and a
# CPU profile of every node taken during the run from its --http port
# (/debug/pprof/profile). Prints each node's role and its top functions
# (cumulative), and keeps the profiles in OUT.
#
#   tools/profile-cluster.sh      # SHARDS=4 CONNS=16 DEPTH=16 DURATION=20s SECONDS_=10 OUT=/tmp/baton-prof
#
# Node 1 leads every shard once the cluster settles (--peers order is
# leadership priority), so node 1's profile is a leader's, node 2's and
# node 3's are followers'.
source "$(dirname "$0")/bench-lib.sh"

SHARDS=${SHARDS:-4}
CONNS=${CONNS:-16}
DEPTH=${DEPTH:-16}
DURATION=${DURATION:-20s}
SECONDS_=${SECONDS_:-10}
OUT=${OUT:-/tmp/baton-prof}
TOP=${TOP:-25}
mkdir -p "$OUT"

# shellcheck disable=SC2086 # BATOND_FLAGS are words
start_cluster 3 --shards "$SHARDS" ${BATOND_FLAGS:-}

echo "3 nodes, $SHARDS shards, $CONNS x $DEPTH for $DURATION, profiles of ${SECONDS_}s from 2s in"
bin/baton bench --addr 127.0.0.1:17910 --conns "$CONNS" --depth "$DEPTH" --duration "$DURATION" --warmup 0 \
	--quiet --json "$work/r.json" >/dev/null &
bench=$!
sleep 2
curls=()
for i in 1 2 3; do
	curl -s -o "$OUT/node$i.pprof" "http://127.0.0.1:179${i}2/debug/pprof/profile?seconds=$SECONDS_" &
	curls+=($!)
done
wait "${curls[@]}"
wait "$bench"
echo "cycles/s=$(jq -r '.cycles_per_sec | floor' "$work/r.json") acquire_p50_us=$(jq -r '.acquire_us.p50' "$work/r.json") errors=$(jq -c '.errors' "$work/r.json")"
for i in 1 2 3; do
	echo "== node $i: $(curl -s "http://127.0.0.1:179${i}2/status" | jq -c '[.shards[] | .role]' 2>/dev/null)"
	go tool pprof -top -cum -nodecount "$TOP" "bin/batond" "$OUT/node$i.pprof" 2>/dev/null
done
