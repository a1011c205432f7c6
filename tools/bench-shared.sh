#!/usr/bin/env bash
# Shared holds (protocol 1.4, issue 29), for BENCHMARKS.md ("Semaphores").
# Each round, on a fresh single node (127.0.0.1 only, ports 17800-17801,
# default shards), in turns:
#
#   semaphore  baton bench --workload contended --conns 64 --keys 1
#              --permits PERMITS: 64 clients cycling S and R on one key
#              whose permits are PERMITS (a counting semaphore); the
#              contended checks hold it to its promises (never more than
#              PERMITS holders, tokens new and growing, FIFO within
#              --fifo-slack)
#   exclusive  the same 64 clients cycling A and R over PERMITS keys (4
#              clients a key for 16): the same number of holders at once,
#              as exclusive locks
#
#   tools/bench-shared.sh        # RUNS=3 PERMITS=16 DURATION=10s
source "$(dirname "$0")/bench-lib.sh"

RUNS=${RUNS:-3}
PERMITS=${PERMITS:-16}
DURATION=${DURATION:-10s}
CLIENT=127.0.0.1:17800
RAFT=127.0.0.1:17801

# wait_shared: returns once the node serves S (its cluster version rises
# to 4 a moment after it starts); fails after about 10 s.
wait_shared() {
	local line
	for _ in $(seq 100); do
		exec 3<>"/dev/tcp/${CLIENT%:*}/${CLIENT#*:}"
		echo "S bench/probe 1 100 -1" >&3
		read -r line <&3 || true
		exec 3>&-
		[[ $line == "S bench/probe OK "* ]] && return 0
		sleep 0.1
	done
	echo "the node does not serve S: $line"
	return 1
}

# one NAME FLAGS...: a round of one shape on a fresh node; prints
# "NAME cycles/s acquire-p50-us acquire-p99-us".
one() {
	local name=$1
	shift
	start 1
	wait_shared
	bin/baton bench --addr "$CLIENT" --workload contended --conns 64 --duration "$DURATION" "$@" \
		--quiet --json "$work/$name.json" >/dev/null
	stop
	jq -r --arg n "$name" '"\($n) \(.cycles_per_sec | floor) \(.acquire_us.p50) \(.acquire_us.p99)"' "$work/$name.json"
}

echo "single node; 64 clients, contended; semaphore of $PERMITS permits on 1 key vs exclusive locks on $PERMITS keys; $DURATION each, $RUNS rounds"
sem=() exc=()
for r in $(seq "$RUNS"); do
	read -r _ s sp50 sp99 < <(one semaphore --keys 1 --permits "$PERMITS")
	read -r _ e ep50 ep99 < <(one exclusive --keys "$PERMITS")
	echo "run=$r semaphore_cycles_per_s=$s acquire_p50_us=$sp50 p99_us=$sp99 exclusive_cycles_per_s=$e acquire_p50_us=$ep50 p99_us=$ep99"
	sem+=("$s") exc+=("$e")
done
ms=$(printf '%s\n' "${sem[@]}" | median)
me=$(printf '%s\n' "${exc[@]}" | median)
echo "median semaphore=$ms exclusive=$me ratio=$(awk -v a="$ms" -v b="$me" 'BEGIN { printf "%.2f", a / b }')"
