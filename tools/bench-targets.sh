#!/usr/bin/env bash
# Issue 30's targets, measured against the machine's own limit in one run:
# the disk's flush (write+fdatasync of 4 KiB into a preallocated file, p50,
# timed before and after), then `make compare`'s workloads (tools/compare/
# run.sh) for baton with its default settings (1 shard) on 1 and 3 nodes,
# etcd (3 members) and Redis with appendfsync always, ROUNDS rounds each,
# and a table of each target: the median over the rounds, the bound it is
# held to, and whether it is met.
#
#   tools/bench-targets.sh        # ROUNDS=3 DURATION=10s WARMUP=1s FLUSHES=2000 OUT=/tmp/baton-targets-DATE
#
# The targets (BENCHMARKS.md, "Issue 30's targets"):
#   3 nodes, one client: acquire p50 at most 2 x flush + 200 µs
#   3 nodes, 16 clients on one key: hand-offs/s at least 1 / (4 x flush)
#   3 nodes against etcd, one client: acquire p50 at most 0.5 x etcd's
#   1 node against Redis always, 16 x 16: at least 1.5 x its cycles/s,
#     as a sliding window and, where the run has it, in batches
# The compare run's own tables are printed too (OUT/table.md).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "$0 needs jq (apt-get install jq)"; exit 1; }

ROUNDS=${ROUNDS:-3}
FLUSHES=${FLUSHES:-2000}
OUT=${OUT:-/tmp/baton-targets-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go build -o "$work/stagetrace" ./tools/stagetrace
# flush prints the disk's flush p50 in µs, into a file beside where the
# servers write (/tmp).
flush() { "$work/stagetrace" flush -dir "$work" -n "$FLUSHES" | sed -n 's/.*p50_us=\([0-9]*\).*/\1/p'; }

before=$(flush)
echo "disk flush p50 before: $before µs"
ROUNDS=$ROUNDS OUT=$OUT/compare SYSTEMS="baton-1node-1shard baton-3nodes-1shard etcd-3nodes redis-always" \
	tools/compare/run.sh
after=$(flush)
echo "disk flush p50 after: $after µs"

# median reads numbers, one per line, and prints their median.
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
# of SECTION SYSTEM FIELD: the median over the rounds of a jq FIELD of the
# system's results in the section.
of() {
	awk -F'\t' -v s="$1" -v y="$2" '$1 == s && $2 == y { print $3 }' "$OUT/compare/manifest.tsv" |
		while read -r f; do
			[ -f "$OUT/compare/$f" ] && jq -r "$3" "$OUT/compare/$f"
		done | median
}

flushUs=$(( (before + after) / 2 ))
one="uncontended, 1 client, no pipelining"
window="uncontended, 16 connections x 16 in flight"
batches="uncontended, 16 connections x 16 in flight, in batches"
handoffs="contended, 16 clients on one key"
p50_3=$(of "$one" baton-3nodes-1shard '.acquire_us.p50')
p50_etcd=$(of "$one" etcd-3nodes '.acquire_us.p50')
ho_3=$(of "$handoffs" baton-3nodes-1shard '.handoffs_per_sec | floor')
win_1=$(of "$window" baton-1node-1shard '.cycles_per_sec | floor')
win_redis=$(of "$window" redis-always '.cycles_per_sec | floor')
bat_1=$(of "$batches" baton-1node-1shard '.cycles_per_sec | floor')
bat_redis=$(of "$batches" redis-always '.cycles_per_sec | floor')

# row NAME VALUE BOUND MET: one line of the table.
row() { printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4"; }
yes_no() { awk -v v="$1" -v b="$2" -v op="$3" 'BEGIN { print ((op == "<=" ? v <= b : v >= b) ? "yes" : "**no**") }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

{
	echo
	echo "Issue 30's targets: medians of $ROUNDS rounds; disk flush p50 $before µs before, $after after (bound computed with $flushUs)"
	echo
	echo "| target | measured | bound | met |"
	echo "|---|---|---|---|"
	b=$((2 * flushUs + 200))
	row "3 nodes, one client: acquire p50" "${p50_3:--} µs" "≤ $b µs (2 x flush + 200)" "$(yes_no "${p50_3:-0}" "$b" "<=")"
	b=$(awk -v f="$flushUs" 'BEGIN { printf "%d", 1e6 / (4 * f) }')
	row "3 nodes, 16 clients on one key: hand-offs/s" "${ho_3:--}" "≥ $b (1 / (4 x flush))" "$(yes_no "${ho_3:-0}" "$b" ">=")"
	r=$(ratio "${p50_3:-0}" "${p50_etcd:-0}")
	row "3 nodes against etcd (3 members), one client: acquire p50" "${p50_3:--} / ${p50_etcd:--} µs = $r" "≤ 0.5" "$(yes_no "$r" 0.5 "<=")"
	r=$(ratio "${win_1:-0}" "${win_redis:-0}")
	row "1 node against Redis always, 16 x 16 sliding window: cycles/s" "${win_1:--} / ${win_redis:--} = $r" "≥ 1.5" "$(yes_no "$r" 1.5 ">=")"
	if [ -n "$bat_1" ]; then
		r=$(ratio "$bat_1" "${bat_redis:-0}")
		row "1 node against Redis always, 16 x 16 in batches: cycles/s" "$bat_1 / ${bat_redis:--} = $r" "≥ 1.5" "$(yes_no "$r" 1.5 ">=")"
	fi
} | tee "$OUT/targets.md"
echo "results: $OUT"
