#!/usr/bin/env bash
# What owners (protocol 1.1) cost: one node, pipelined acquire+release
# cycles on distinct keys (fsync on), with and without an owner on every
# acquire, alternating on a fresh node each run, RUNS rounds. Prints every
# run and the medians.
#
#   tools/bench-owners.sh          # RUNS=3 DURATION=10s CONNS=16 DEPTH=16 SHARDS=4
CLIENT=127.0.0.1:17960
RAFT=127.0.0.1:17961
source "$(dirname "$0")/bench-lib.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-16}
DEPTH=${DEPTH:-16}
SHARDS=${SHARDS:-4}

for mode in plain owners; do : >"$work/rate-$mode"; : >"$work/p50-$mode"; done
for run in $(seq "$RUNS"); do
	for mode in plain owners; do
		flag=""
		[ "$mode" = owners ] && flag=--owners
		start "$SHARDS"
		bin/baton bench --addr "$CLIENT" --conns "$CONNS" --depth "$DEPTH" --duration "$DURATION" $flag \
			--quiet --json "$work/r.json" >/dev/null
		stop
		rate=$(jq -r '.cycles_per_sec | floor' "$work/r.json")
		p50=$(jq -r '.acquire_us.p50' "$work/r.json")
		echo "mode=$mode run=$run cycles/s=$rate acquire_p50_us=$p50 errors=$(jq -c '.errors' "$work/r.json")"
		echo "$rate" >>"$work/rate-$mode"; echo "$p50" >>"$work/p50-$mode"
	done
done
for mode in plain owners; do
	echo "mode=$mode MEDIAN cycles/s=$(median <"$work/rate-$mode") acquire_p50_us=$(median <"$work/p50-$mode")"
done
