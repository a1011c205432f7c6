#!/usr/bin/env bash
# Latency at a fixed rate on a fresh 3-node cluster, and what the Raft log's
# synced saves took meanwhile: baton bench --rate against node 1 (all on
# this machine, 127.0.0.1 only), each node's baton_raft_log_synced_save_seconds
# histogram read before and after, for several batond builds run
# alternately (RUNS rounds, a fresh cluster each run). Prints, per run, the
# acquire latency percentiles, the leader's RSS at the end and, per node,
# the share of synced saves over 1 ms and over 5 ms. Data dirs go under
# TMPDIR (TMPDIR=/dev/shm takes the disk out).
#
#   tools/bench-fixed-rate.sh     # BATONDS=bin/batond RUNS=3 RATE=1000 CONNS=16 DURATION=20s SHARDS=1
#   BATONDS="/tmp/base/batond bin/batond" TMPDIR=/dev/shm tools/bench-fixed-rate.sh
source "$(dirname "$0")/bench-lib.sh"

BATONDS=${BATONDS:-bin/batond}
RUNS=${RUNS:-3}
RATE=${RATE:-1000}
CONNS=${CONNS:-16}
DURATION=${DURATION:-20s}
SHARDS=${SHARDS:-1}

# saves N: node N's synced-save histogram, "le count" a line.
saves() {
	curl -s "http://127.0.0.1:179${1}2/metrics" |
		awk '/^baton_raft_log_synced_save_seconds_bucket/ { match($0, /le="[^"]*"/); print substr($0, RSTART + 4, RLENGTH - 5), $2 }'
}

echo "3 nodes, $SHARDS shards, $CONNS connections at $RATE cycles/s for $DURATION, data in ${TMPDIR:-/tmp}, $RUNS rounds of: $BATONDS"
for run in $(seq "$RUNS"); do
	for BATOND in $BATONDS; do
		start_cluster 3 --shards "$SHARDS"
		for i in 1 2 3; do saves "$i" >"$work/s$i.before"; done
		bin/baton bench --addr 127.0.0.1:17910 --conns "$CONNS" --depth 1 --rate "$RATE" --duration "$DURATION" \
			--warmup 1s --quiet --json "$work/r.json" >/dev/null
		line="[$BATOND] run=$run $(jq -r '"cycles/s=\(.cycles_per_sec | floor) acquire_us p50=\(.acquire_us.p50) p90=\(.acquire_us.p90) p99=\(.acquire_us.p99) p999=\(.acquire_us.p999) max=\(.acquire_us.max) errors=\(.errors | tostring)"' "$work/r.json")"
		line+=" leader_rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/${pids[0]}/status")"
		for i in 1 2 3; do
			saves "$i" >"$work/s$i.after"
			# Saves over 1 ms and over 5 ms, as shares of the run's saves.
			line+=" node$i:$(paste "$work/s$i.before" "$work/s$i.after" | awk '
				{ d[$1] = $4 - $2 }
				END { all = d["+Inf"]; if (all == 0) { print "no_saves"; exit }
					printf "saves=%d over_1ms=%.2f%% over_5ms=%.3f%%", all, 100 * (all - d["0.001"]) / all, 100 * (all - d["0.005"]) / all }')"
		done
		echo "$line"
		stop_cluster
	done
done
