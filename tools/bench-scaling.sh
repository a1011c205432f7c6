#!/usr/bin/env bash
# How a single node's throughput grows with --shards and with pipeline
# depth, and its latency at a fixed moderate rate (open loop, half of the
# saturation measured in the same run). Every measurement on a fresh node.
#
#   tools/bench-scaling.sh        # DURATION=8s; PLOT=FILE.svg draws the open-loop run
source "$(dirname "$0")/bench-lib.sh"

DURATION=${DURATION:-8s}
PLOT=${PLOT:-}
CLIENT=127.0.0.1:17950
RAFT=127.0.0.1:17951

# run LABEL SHARDS BENCH-FLAGS...: one measurement on a fresh node.
run() {
	local label=$1 shards=$2
	shift 2
	start "$shards"
	bin/baton bench --addr "$CLIENT" --duration "$DURATION" --quiet --json "$work/r.json" "$@" >/dev/null
	stop
	jq -r --arg l "$label" '"\($l) cycles/s=\(.cycles_per_sec | floor) acquire_p50_us=\(.acquire_us.p50) acquire_p99_us=\(.acquire_us.p99) errors=\(.errors | tostring)"' "$work/r.json"
}

for shards in 1 2 4 8; do
	run "shards=$shards conns=16 depth=16" "$shards" --conns 16 --depth 16
done
for depth in 1 16 256 4096; do
	run "shards=4 conns=4 depth=$depth" 4 --conns 4 --depth "$depth"
done
# Half of the saturation just measured for 4 shards, 16 x 16, open loop.
run "saturation shards=4 conns=16 depth=16" 4 --conns 16 --depth 16
rate=$(jq -r '(.cycles_per_sec / 2) | floor' "$work/r.json")
run "open-loop rate=$rate shards=4 conns=16 depth=16" 4 --conns 16 --depth 16 --rate "$rate" \
	${PLOT:+--plot "$PLOT"}
