#!/usr/bin/env bash
# Where a commit's time goes (issue 30): a request's path across a 3-node
# cluster, timed stage by stage on every node, for one client (1 x 1) and
# for 16 connections x 16 in flight, with the disk's own flush timed in
# the same run. For BENCHMARKS.md, "Where a commit's time goes".
#
# batond is built with -tags stagetrace (engine/stagetrace: a probe build;
# a normal build compiles the hooks away) and each node writes its events
# to a file; tools/stagetrace joins the nodes' files (all nodes run on this
# machine, so their CLOCK_MONOTONIC readings compare) and prints, per
# stage, the median over the rounds of each round's p50 and p90.
#
# Each round: the disk's flush (write+fdatasync of 4 KiB into a
# zero-filled, synced file on the disk the nodes write to, FLUSHES times:
# p50), then per shape a fresh cluster (default settings, 127.0.0.1 only),
# a warm-up run, the measured run (baton bench, uncontended acquire and
# release on keys of each slot's own, through node 1, the leader), and the
# disk's flush again after the servers ran. With PLAIN=1 (the default)
# each traced run is followed by the same run of a normal build (bin/batond,
# nothing traced), so that what the probe costs shows beside it.
#
#   tools/bench-stages.sh     # ROUNDS=3 DURATION=8s WARMUP=2s EVERY=4 FLUSHES=2000 SHAPES="1x1 16x16"
#   OUT=/tmp/stages tools/bench-stages.sh     # keep every round's trace files and bench JSON there
#   BATOND_FLAGS="--shards 4" tools/bench-stages.sh
#
# The nodes listen on 127.0.0.1:176i0 (clients), 176i1 and 176i2, not on
# the 179i0 of the other scripts' clusters (PORTS: bench-lib.sh).
PORTS=${PORTS:-176}
source "$(dirname "$0")/bench-lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
EVERY=${EVERY:-4}
FLUSHES=${FLUSHES:-2000}
SHAPES=${SHAPES:-1x1 16x16}
OUT=${OUT:-}
PLAIN=${PLAIN:-1}

mkdir -p "$work/probe"
go build -tags stagetrace -o "$work/probe/batond" ./cmd/batond
go build -o "$work/stagetrace" ./tools/stagetrace

# measure DIR CONNS DEPTH: a warm-up, then the measured run into DIR/bench.json,
# against the cluster started last; DIR/window is the run's start and end
# on the trace clock.
measure() {
	bin/baton bench --addr "127.0.0.1:${PORTS}10" --conns "$2" --depth "$3" --duration "$WARMUP" --warmup 0 \
		--quiet --json "$work/warm.json" >/dev/null
	local from to
	from=$("$work/stagetrace" now)
	bin/baton bench --addr "127.0.0.1:${PORTS}10" --conns "$2" --depth "$3" --duration "$DURATION" --warmup 0 \
		--quiet --json "$1/bench.json" >/dev/null
	to=$("$work/stagetrace" now)
	echo "$from $to" >"$1/window"
}

# figures DIR: the bench's figures of a run.
figures() {
	echo "cycles/s=$(jq -r '.cycles_per_sec | floor' "$1/bench.json") acquire_p50_us=$(jq -r .acquire_us.p50 "$1/bench.json") acquire_p99_us=$(jq -r .acquire_us.p99 "$1/bench.json") errors=$(jq -c '.errors' "$1/bench.json") loadavg=$(cut -d' ' -f1 /proc/loadavg)"
}

# disk_flush prints the disk's flush p50 in µs.
disk_flush() { "$work/stagetrace" flush -dir "$work" -n "$FLUSHES" | sed -n 's/.*p50_us=\([0-9]*\).*/\1/p'; }

echo "3 nodes (default settings, batond built with -tags stagetrace, one entry in $EVERY traced), $DURATION per run after $WARMUP of warm-up, $ROUNDS rounds, shapes $SHAPES"
: >"$work/flush-before"; : >"$work/flush-after"
for shape in $SHAPES; do : >"$work/p50-$shape"; : >"$work/rate-$shape"; : >"$work/dirs-$shape"; : >"$work/plainp50-$shape"; : >"$work/plainrate-$shape"; done
for round in $(seq "$ROUNDS"); do
	before=$(disk_flush)
	echo "$before" >>"$work/flush-before"
	for shape in $SHAPES; do
		conns=${shape%x*} depth=${shape#*x}
		dir=$work/r$round-$shape
		mkdir -p "$dir"
		BATOND=$work/probe/batond
		# shellcheck disable=SC2086 # BATOND_FLAGS are words
		BATON_STAGETRACE=$dir BATON_STAGETRACE_EVERY=$EVERY start_cluster 3 ${BATOND_FLAGS:-}
		measure "$dir" "$conns" "$depth"
		sleep 1 # the nodes write their events out every 200 ms
		stop_cluster
		echo "round=$round shape=$shape traced $(figures "$dir")"
		jq -r '.cycles_per_sec | floor' "$dir/bench.json" >>"$work/rate-$shape"
		jq -r '.acquire_us.p50' "$dir/bench.json" >>"$work/p50-$shape"
		echo "$dir" >>"$work/dirs-$shape"
		if [ "$PLAIN" = 1 ]; then
			BATOND=bin/batond
			mkdir -p "$dir/plain"
			# shellcheck disable=SC2086 # BATOND_FLAGS are words
			start_cluster 3 ${BATOND_FLAGS:-}
			measure "$dir/plain" "$conns" "$depth"
			stop_cluster
			echo "round=$round shape=$shape plain  $(figures "$dir/plain")"
			jq -r '.cycles_per_sec | floor' "$dir/plain/bench.json" >>"$work/plainrate-$shape"
			jq -r '.acquire_us.p50' "$dir/plain/bench.json" >>"$work/plainp50-$shape"
		fi
	done
	after=$(disk_flush)
	echo "$after" >>"$work/flush-after"
	echo "round=$round disk_flush_p50_us before=$before after=$after"
done

echo
echo "disk flush (write+fdatasync, 4 KiB, preallocated) p50: MEDIAN before=$(median <"$work/flush-before") after=$(median <"$work/flush-after") µs"
cols=()
for shape in $SHAPES; do
	echo "shape=$shape traced MEDIAN cycles/s=$(median <"$work/rate-$shape") acquire_p50_us=$(median <"$work/p50-$shape") (baton bench, client side)"
	if [ "$PLAIN" = 1 ]; then
		echo "shape=$shape plain  MEDIAN cycles/s=$(median <"$work/plainrate-$shape") acquire_p50_us=$(median <"$work/plainp50-$shape")"
	fi
	name=$shape
	[ "$shape" = 1x1 ] && name="1 client"
	[ "$shape" = 16x16 ] && name="16 x 16"
	cols+=(-col "$name=$(paste -sd, "$work/dirs-$shape")")
done
echo
"$work/stagetrace" report "${cols[@]}"
if [ -n "$OUT" ]; then
	mkdir -p "$OUT"
	cp -r "$work"/r*-* "$OUT"/
	echo "traces kept in $OUT"
fi
