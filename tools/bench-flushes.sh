#!/usr/bin/env bash
# Device flushes per acknowledged request: a fresh cluster of NODES (1 or
# 3, all on this machine and its one disk, 127.0.0.1 only), driven through
# node 1 by baton bench, with the disk's completed flush requests counted
# from /proc/diskstats before and after each run. Every acquire and every
# release is one request. Prints every run and the medians.
#
#   tools/bench-flushes.sh           # NODES=3 SHARDS=4 CONNS=1 DEPTH=1 DURATION=6s RUNS=3
#   CONNS=16 DEPTH=16 tools/bench-flushes.sh
#   RAFT_LOG=dragonboat tools/bench-flushes.sh    # batond --raft-log (default: batond's default)
#   BATOND_FLAGS="--snapshot-entries 2000" tools/bench-flushes.sh   # more flags for every batond
#   BENCH_FLAGS="--rate 1000" CONNS=16 tools/bench-flushes.sh       # more flags for baton bench
#
# The count is the whole device's: anything else writing to the disk in
# the meantime is counted too, so run it on a quiet machine.
source "$(dirname "$0")/bench-lib.sh"

NODES=${NODES:-3}
SHARDS=${SHARDS:-4}
CONNS=${CONNS:-1}
DEPTH=${DEPTH:-1}
DURATION=${DURATION:-6s}
RUNS=${RUNS:-3}
RAFT_LOG=${RAFT_LOG:-}

dev=$(basename "$(df --output=source "$work" | tail -1)")
flushes() { awk -v d="$dev" '$3 == d { print $19 }' /proc/diskstats; }
# writes: completed write requests (a flush is not one of them); an fdatasync
# that must also write the file's inode costs one more.
writes() { awk -v d="$dev" '$3 == d { print $8 }' /proc/diskstats; }
[ -n "$(flushes)" ] || { echo "no flush count for device $dev in /proc/diskstats"; exit 1; }

echo "device $dev, $NODES nodes, $SHARDS shards, $CONNS x $DEPTH, $DURATION, raft log ${RAFT_LOG:-the default}"
: >"$work/per"; : >"$work/wper"; : >"$work/rate"; : >"$work/p50"
for run in $(seq "$RUNS"); do
	# shellcheck disable=SC2086 # BATOND_FLAGS are words
	start_cluster "$NODES" --shards "$SHARDS" ${RAFT_LOG:+--raft-log "$RAFT_LOG"} ${BATOND_FLAGS:-}
	before=$(flushes) wbefore=$(writes)
	bin/baton bench --addr 127.0.0.1:17910 --conns "$CONNS" --depth "$DEPTH" --duration "$DURATION" --warmup 0 ${BENCH_FLAGS:-} \
		--quiet --json "$work/r.json" >/dev/null
	after=$(flushes) wafter=$(writes)
	stop_cluster
	cycles=$(jq -r '.cycles' "$work/r.json")
	requests=$((2 * cycles))
	per=$(awk -v f=$((after - before)) -v r="$requests" 'BEGIN { printf "%.2f", f / r }')
	wper=$(awk -v w=$((wafter - wbefore)) -v r="$requests" 'BEGIN { printf "%.2f", w / r }')
	rate=$(jq -r '.cycles_per_sec | floor' "$work/r.json")
	p50=$(jq -r '.acquire_us.p50' "$work/r.json")
	echo "run=$run flushes=$((after - before)) requests=$requests flushes/request=$per writes/request=$wper cycles/s=$rate acquire_p50_us=$p50 acquire_p99_us=$(jq -r .acquire_us.p99 "$work/r.json") errors=$(jq -c '.errors' "$work/r.json")"
	echo "$per" >>"$work/per"; echo "$wper" >>"$work/wper"; echo "$rate" >>"$work/rate"; echo "$p50" >>"$work/p50"
done
echo "MEDIAN flushes/request=$(median <"$work/per") writes/request=$(median <"$work/wper") cycles/s=$(median <"$work/rate") acquire_p50_us=$(median <"$work/p50")"
