#!/usr/bin/env bash
# Memory and throughput of two builds in one session, for BENCHMARKS.md
# ("Single node: memory"): RSS per held lock (1,000,000 held, RUNS fresh
# 4-shard nodes each), RSS per idle connection (one fresh node each), and
# 16 x 16 acquire+release cycles on one 4-shard node (RUNS fresh nodes
# each), the builds alternating run by run so that both see the same
# machine. With PROFILE=1, one more hold run of each build, not counted, has
# its heap profiled (/debug/pprof/heap?gc=1) while the locks are held:
# OUT/heap-0.pb.gz (BASE) and OUT/heap-1.pb.gz (NEW), for go tool pprof.
#
#   tools/bench-memory.sh BASE_BIN NEW_BIN    # dirs with batond and baton
#
# Every node listens on 127.0.0.1 only and is stopped on exit.
source "$(dirname "$0")/bench-lib.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
HOLD=${HOLD:-1000000}
IDLE=${IDLE:-10000}
OUT=${OUT:-/tmp/bench-memory}
CLIENT=127.0.0.1:17970
RAFT=127.0.0.1:17971
HTTP=127.0.0.1:17972
builds=("$1" "$2")
mkdir -p "$OUT"

# start_build BIN: a fresh 4-shard node of build BIN, serving.
start_build() {
	rm -rf "$work/data"
	"$1/batond" --peers "$RAFT/$CLIENT" --data "$work/data" --shards 4 --http "$HTTP" >"$work/node.log" 2>&1 &
	pid=$!
	wait_ready "$CLIENT" || { echo "node did not start:"; cat "$work/node.log"; exit 1; }
}

for run in $(seq "$RUNS"); do
	for i in 0 1; do
		b=${builds[$i]}
		start_build "$b"
		"$b/baton" bench --addr "$CLIENT" --workload hold --hold "$HOLD" --pid "$pid" --duration 1s --quiet \
			--json "$work/h.json" >/dev/null
		stop
		v=$(jq -r '.bytes_per_lock | floor' "$work/h.json")
		echo "build=$b run=$run hold=$HOLD bytes_per_lock=$v"
		echo "$v" >>"$work/hold-$i"
	done
done
for i in 0 1; do
	b=${builds[$i]}
	start_build "$b"
	"$b/baton" bench --addr "$CLIENT" --workload hold --hold 0 --idle-conns "$IDLE" --pid "$pid" --duration 1s --quiet \
		--json "$work/i.json" >/dev/null
	stop
	echo "build=$b idle_conns=$IDLE bytes_per_idle_conn=$(jq -r '.bytes_per_idle_conn | floor' "$work/i.json")"
done
for run in $(seq "$RUNS"); do
	for i in 0 1; do
		b=${builds[$i]}
		start_build "$b"
		"$b/baton" bench --addr "$CLIENT" --conns 16 --depth 16 --duration "$DURATION" --quiet --json "$work/r.json" >/dev/null
		stop
		v=$(jq -r '.cycles_per_sec | floor' "$work/r.json")
		echo "build=$b run=$run conns=16 depth=16 cycles/s=$v acquire_p99_us=$(jq -r '.acquire_us.p99' "$work/r.json")"
		echo "$v" >>"$work/rate-$i"
	done
done
if [ "${PROFILE:-0}" = 1 ]; then
	for i in 0 1; do
		b=${builds[$i]}
		start_build "$b"
		# The hold workload releases its locks at the end: profile once
		# every lock is held, during the settle before its RSS reading.
		"$b/baton" bench --addr "$CLIENT" --workload hold --hold "$HOLD" --pid "$pid" --settle 15s --duration 1s \
			--quiet --json "$work/p.json" >/dev/null &
		bench=$!
		until [ "$(curl -s "http://$HTTP/status" | jq -r .held)" = "$HOLD" ]; do sleep 0.2; done
		curl -s "http://$HTTP/debug/pprof/heap?gc=1" >"$OUT/heap-$i.pb.gz"
		wait "$bench"
		stop
		echo "build=$b heap profile: $OUT/heap-$i.pb.gz"
	done
fi
for i in 0 1; do
	echo "build=${builds[$i]} MEDIAN bytes_per_lock=$(median <"$work/hold-$i") cycles/s=$(median <"$work/rate-$i")"
done
