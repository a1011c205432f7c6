#!/usr/bin/env bash
# baton side by side with etcd and Redis, in one run on this machine: see
# tools/compare/README.md. Started by `make compare`.
#
#   tools/compare/run.sh          # DURATION=10s WARMUP=1s OUT=/tmp/baton-compare-DATE ALONE= ROUNDS=1 SYSTEMS=(all)
#
# SERVER_GOMAXPROCS=N runs every Go server (batond, etcd) with GOMAXPROCS=N,
# each replica's share of the cores when several share a machine
# (docs/operations.md); unset, the Go default (every core).
# ALONE=1 pauses (SIGSTOP) every other system's servers while one is
# measured, so that none pays for the idle ones beside it; by default they
# all run throughout, as in every run before this option. ROUNDS=N measures
# every system N times in each section, alternately (each round starts one
# system later), and the tables show each system's median round. SYSTEMS
# (names as in the tables, separated by spaces) starts and measures only
# those.
#
# Installs etcd-server and redis-server from Debian packages when missing
# (without letting the packages start their services), starts every server
# itself on 127.0.0.1 with its data in a temporary directory, runs the same
# workloads against each, and prints the tables with the ratios. Every
# process it starts is stopped on exit, and every measurement is bounded in
# time.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
ALONE=${ALONE:-}
SERVER_GOMAXPROCS=${SERVER_GOMAXPROCS:-}
[[ -z $SERVER_GOMAXPROCS || $SERVER_GOMAXPROCS =~ ^[1-9][0-9]*$ ]] ||
	{ echo "SERVER_GOMAXPROCS=$SERVER_GOMAXPROCS: want a whole number, at least 1" >&2; exit 2; }
# go_server runs a Go server's command with SERVER_GOMAXPROCS, if set
# (exec: the server keeps the pid it was started with).
go_server() {
	if [ -n "$SERVER_GOMAXPROCS" ]; then
		GOMAXPROCS=$SERVER_GOMAXPROCS exec "$@"
	fi
	exec "$@"
}
ROUNDS=${ROUNDS:-1}
ALL_SYSTEMS="baton-1node baton-3nodes baton-1node-1shard baton-3nodes-1shard baton-3nodes-dragonboat etcd-3nodes redis-always redis-everysec redis-nopersist"
SYSTEMS=${SYSTEMS:-$ALL_SYSTEMS}
for s in $SYSTEMS; do
	[[ " $ALL_SYSTEMS " == *" $s "* ]] || { echo "SYSTEMS: no system named $s (there are: $ALL_SYSTEMS)" >&2; exit 2; }
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$ROUNDS: want a whole number, at least 1" >&2; exit 2; }
# systems: the ones to measure, in the tables' order.
systems=()
for s in $ALL_SYSTEMS; do
	[[ " $SYSTEMS " == *" $s "* ]] && systems+=("$s")
done
wanted() { [[ " ${systems[*]} " == *" $1 "* ]]; }
OUT=${OUT:-/tmp/baton-compare-$(date +%Y%m%d-%H%M%S)}
# The longest a measurement may take: its duration and warm-up, start-up,
# and the drain of what is outstanding at the end.
secs() { local d=$1; d=${d%s}; echo "${d%.*}"; }
LIMIT=$(( $(secs "$DURATION") + $(secs "$WARMUP") + 60 ))

# Ports, all on 127.0.0.1. Chosen away from every default so that a server
# the machine already runs is never measured by mistake.
ETCD_CLIENT=(23791 23792 23793)
ETCD_PEER=(23801 23802 23803)
REDIS_ALWAYS=16391
REDIS_EVERYSEC=16392
REDIS_NONE=16393
BATON1=17950          # single node, 4 shards: client port; Raft on +1
BATON3=(17960 17970 17980)
# The same with 1 shard, batond's default since the cluster performance
# work; the 4-shard systems above keep the columns of earlier runs.
BATON1S=17990
BATON3S=(18000 18010 18020)
# The 1-shard cluster again on dragonboat's own Raft log store, in pebble
# (--raft-log dragonboat, which data dirs from before --raft-log have), to
# measure it beside the default one of segment files. (Runs before
# 2026-12-03 had baton's pebble store here, --raft-log baton, as
# baton-3nodes-pebble; batond no longer has it.)
BATON3D=(18030 18040 18050)

install_missing() {
	local want=()
	command -v etcd >/dev/null || want+=(etcd-server)
	command -v redis-server >/dev/null || want+=(redis-server)
	[ ${#want[@]} -eq 0 ] && return
	echo "== installing ${want[*]}"
	# policy-rc.d answering 101 tells the packages' scripts not to start
	# their services: this script runs its own servers.
	local policy=/usr/sbin/policy-rc.d made=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		made=1
	fi
	local rc=0
	{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${want[@]}"; } || rc=$?
	[ -n "$made" ] && rm -f "$policy"
	return $rc
}

for port in "${ETCD_CLIENT[@]}" "${ETCD_PEER[@]}" $REDIS_ALWAYS $REDIS_EVERYSEC $REDIS_NONE \
	$BATON1 $((BATON1 + 1)) "${BATON3[@]}" $((BATON3[0] + 1)) $((BATON3[1] + 1)) $((BATON3[2] + 1)) \
	$BATON1S $((BATON1S + 1)) "${BATON3S[@]}" $((BATON3S[0] + 1)) $((BATON3S[1] + 1)) $((BATON3S[2] + 1)) \
	"${BATON3D[@]}" $((BATON3D[0] + 1)) $((BATON3D[1] + 1)) $((BATON3D[2] + 1)); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "port 127.0.0.1:$port is in use: stop what listens there first" >&2
		exit 1
	fi
done

install_missing
command -v jq >/dev/null || { echo "run.sh needs jq (apt-get install jq)" >&2; exit 1; }

work=$(mktemp -d /tmp/baton-compare-work.XXXXXX)
mkdir -p "$OUT"
pids=()
declare -A system_pids # the servers of each system, by its name in the tables
stop_all() {
	local pid
	for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; done # paused ones (ALONE)
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for _ in $(seq 50); do
		local alive=0
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ $alive -eq 0 ] && break
		sleep 0.1
	done
	for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 130' INT TERM
trap 'exit 129' HUP

echo "== building baton and the comparison drivers"
make -s build
(cd tools/compare && go build -o "$work/compare" .)
compare=$work/compare

echo "== starting servers (logs in $work)"
if wanted etcd-3nodes; then
	cluster=""
	for i in 0 1 2; do
		cluster+="${cluster:+,}e$((i + 1))=http://127.0.0.1:${ETCD_PEER[$i]}"
	done
	etcd_eps=""
	for i in 0 1 2; do
		n=$((i + 1))
		(go_server etcd --name "e$n" --data-dir "$work/etcd$n" \
			--listen-client-urls "http://127.0.0.1:${ETCD_CLIENT[$i]}" --advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT[$i]}" \
			--listen-peer-urls "http://127.0.0.1:${ETCD_PEER[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER[$i]}" \
			--initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token baton-compare \
			--logger zap --log-level warn) >"$work/etcd$n.log" 2>&1 &
		pids+=($!)
		system_pids[etcd-3nodes]+=" $!"
		etcd_eps+="${etcd_eps:+,}127.0.0.1:${ETCD_CLIENT[$i]}"
	done
fi

start_redis() { # PORT NAME ARGS...
	local port=$1 name=$2
	shift 2
	wanted "$name" || return 0
	mkdir -p "$work/$name"
	redis-server --port "$port" --bind 127.0.0.1 --dir "$work/$name" --save "" --daemonize no \
		--logfile "$work/$name.log" "$@" &
	pids+=($!)
	system_pids[$name]=$!
}
start_redis $REDIS_ALWAYS redis-always --appendonly yes --appendfsync always
start_redis $REDIS_EVERYSEC redis-everysec --appendonly yes --appendfsync everysec
start_redis $REDIS_NONE redis-nopersist --appendonly no

# start_baton NAME SYSTEM SHARDS RAFTLOG PORT...: a baton node on each
# client PORT (Raft on PORT+1), one cluster with that --raft-log store (""
# for the default), its logs in NAME-N.log, SYSTEM its name in the tables.
start_baton() {
	local name=$1 system=$2 shards=$3 raftlog=$4
	shift 4
	wanted "$system" || return 0
	local peers="" p i=0
	for p in "$@"; do peers+="${peers:+,}127.0.0.1:$((p + 1))/127.0.0.1:$p"; done
	for p in "$@"; do
		i=$((i + 1))
		(go_server bin/batond --id $i --peers "$peers" --data "$work/$name-$i" --shards "$shards" ${raftlog:+--raft-log "$raftlog"}) \
			>"$work/$name-$i.log" 2>&1 &
		pids+=($!)
		system_pids[$system]+=" $!"
	done
}
start_baton baton1 baton-1node 4 "" $BATON1
start_baton baton3 baton-3nodes 4 "" "${BATON3[@]}"
start_baton baton1s baton-1node-1shard 1 "" $BATON1S
start_baton baton3s baton-3nodes-1shard 1 "" "${BATON3S[@]}"
start_baton baton3d baton-3nodes-dragonboat 1 dragonboat "${BATON3D[@]}"

if wanted etcd-3nodes; then
	etcd_leader=$(timeout 90 "$compare" ready --system etcd --endpoints "$etcd_eps") ||
		{ echo "etcd did not start:"; tail -n 20 "$work"/etcd*.log; exit 1; }
fi
# ready_redis SYSTEM PORT, ready_baton NAME SYSTEM ADDR: wait until the
# system serves, if it is measured (a baton cluster's node 1 leads by
# priority once it has caught up: drive it, as the etcd load goes to etcd's
# leader).
ready_redis() {
	wanted "$1" || return 0
	timeout 60 "$compare" ready --system redis --endpoints "127.0.0.1:$2" ||
		{ echo "redis ($1) did not start:"; tail -n 20 "$work/$1.log"; exit 1; }
}
ready_baton() {
	wanted "$2" || return 0
	timeout 60 "$compare" ready --system baton --endpoints "$3" ||
		{ echo "baton ($1) did not start:"; tail -n 20 "$work/$1"-*.log; exit 1; }
}
ready_redis redis-always $REDIS_ALWAYS
ready_redis redis-everysec $REDIS_EVERYSEC
ready_redis redis-nopersist $REDIS_NONE
ready_baton baton1 baton-1node "127.0.0.1:$BATON1"
ready_baton baton3 baton-3nodes "127.0.0.1:${BATON3[0]}"
ready_baton baton1s baton-1node-1shard "127.0.0.1:$BATON1S"
ready_baton baton3s baton-3nodes-1shard "127.0.0.1:${BATON3S[0]}"
ready_baton baton3d baton-3nodes-dragonboat "127.0.0.1:${BATON3D[0]}"

manifest=$OUT/manifest.tsv
: >"$manifest"
n=0
# alone SYSTEM: with ALONE set, resumes SYSTEM's servers and pauses every
# other system's. A system's servers are paused and resumed together, as a
# virtual machine would be: Raft's clocks are ticks, which stop with them,
# so a cluster resumes with the leader it had.
alone() {
	[ -n "$ALONE" ] || return 0
	local s
	# shellcheck disable=SC2086 # the lists are pids separated by spaces
	for s in "${!system_pids[@]}"; do
		[ "$s" = "$1" ] || kill -STOP ${system_pids[$s]}
	done
	# shellcheck disable=SC2086
	kill -CONT ${system_pids[$1]}
}

# measure SECTION SYSTEM COMMAND...: one bounded measurement, its result in
# OUT, listed in the manifest even when it fails (the table says so).
measure() {
	local section=$1 system=$2
	shift 2
	alone "$system"
	n=$((n + 1))
	local file
	file=$(printf '%02d-%s.json' "$n" "$system")
	printf '%s\t%s\t%s\n' "$section" "$system" "$file" >>"$manifest"
	echo "-- $section: $system"
	if ! "$@" --json "$OUT/$file" >"$OUT/${file%.json}.txt" 2>&1; then
		echo "   FAILED (see $OUT/${file%.json}.txt)"
		rm -f "$OUT/$file"
		return 0
	fi
	# A fixed-rate run also says its target and how far behind it ended.
	jq -r '"   \(.cycles_per_sec | floor)/s\(if (.rate // 0) > 0 then " (target \(.rate), behind \(.behind // 0))" else "" end)  acquire p50 \(.acquire_us.p50)us p99 \(.acquire_us.p99)us  errors \(.errors)"' "$OUT/$file"
}
baton_bench() { # ADDR ARGS...
	local addr=$1
	shift
	timeout -k 5 "$LIMIT" bin/baton bench --addr "$addr" --duration "$DURATION" --warmup "$WARMUP" --quiet "$@"
}
drive() { # SYSTEM ENDPOINT ARGS...
	local system=$1 ep=$2
	shift 2
	timeout -k 5 "$LIMIT" "$compare" drive --system "$system" --endpoints "$ep" --duration "$DURATION" --warmup "$WARMUP" "$@"
}
# measure_system SECTION SYSTEM BATON_ARGS -- DRIVER_ARGS: one measurement
# of SYSTEM, by baton bench or by the comparison driver.
measure_system() {
	local section=$1 system=$2
	shift 2
	local bargs=() dargs=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do bargs+=("$1"); shift; done
	shift
	dargs=("$@")
	case $system in
	baton-1node) measure "$section" "$system" baton_bench "127.0.0.1:$BATON1" "${bargs[@]}" ;;
	baton-3nodes) measure "$section" "$system" baton_bench "127.0.0.1:${BATON3[0]}" "${bargs[@]}" ;;
	baton-1node-1shard) measure "$section" "$system" baton_bench "127.0.0.1:$BATON1S" "${bargs[@]}" ;;
	baton-3nodes-1shard) measure "$section" "$system" baton_bench "127.0.0.1:${BATON3S[0]}" "${bargs[@]}" ;;
	baton-3nodes-dragonboat) measure "$section" "$system" baton_bench "127.0.0.1:${BATON3D[0]}" "${bargs[@]}" ;;
	etcd-3nodes) measure "$section" "$system" drive etcd "$etcd_leader" "${dargs[@]}" ;;
	redis-always) measure "$section" "$system" drive redis "127.0.0.1:$REDIS_ALWAYS" "${dargs[@]}" ;;
	redis-everysec) measure "$section" "$system" drive redis "127.0.0.1:$REDIS_EVERYSEC" "${dargs[@]}" ;;
	redis-nopersist) measure "$section" "$system" drive redis "127.0.0.1:$REDIS_NONE" "${dargs[@]}" ;;
	esac
}
# all_systems SECTION BATON_ARGS -- DRIVER_ARGS: every system measured, in
# ROUNDS rounds, each starting one system later than the one before, so
# that no system is always the one measured right after another. Systems
# named in SKIP (separated by spaces) are left out of the section.
all_systems() {
	local section=$1 round i s
	shift
	for round in $(seq "$ROUNDS"); do
		for i in "${!systems[@]}"; do
			s=${systems[$(((i + round - 1) % ${#systems[@]}))]}
			[[ " ${SKIP:-} " == *" $s "* ]] || measure_system "$section" "$s" "$@"
		done
	done
}

{
	echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "go: $(go version | cut -d' ' -f3-)"
	echo "etcd: $(etcd --version | head -1 | awk '{print $3}'), redis: $(redis-server --version | awk '{print $3}' | cut -d= -f2)"
	echo "each measurement: $WARMUP warm-up, then $DURATION measured"
	echo "other systems' servers while one is measured: $([ -n "$ALONE" ] && echo "paused (ALONE=1)" || echo "running, idle")"
	echo "systems: ${systems[*]}; rounds: $ROUNDS"
	echo "Go servers' GOMAXPROCS: ${SERVER_GOMAXPROCS:-the default (every core)}"
} | tee "$OUT/machine.txt"

all_systems "uncontended, 1 client, no pipelining" --conns 1 --depth 1 -- --conns 1 --depth 1
all_systems "uncontended, 64 clients, no pipelining" --conns 64 --depth 1 -- --conns 64 --depth 1
all_systems "uncontended, 16 connections x 16 in flight" --conns 16 --depth 16 -- --conns 16 --depth 16
# The same pipeline in batches, as a client library sends them: each
# connection its 16 acquires at once, then, once all are answered, their
# releases (round_us in the results). Redis's driver sends its pipelines
# so in every section, and baton bench as a sliding window unless told;
# etcd's driver has no batches.
SKIP=etcd-3nodes all_systems "uncontended, 16 connections x 16 in flight, in batches" --conns 16 --depth 16 --shape batch -- --conns 16 --depth 16 --shape batch
# Deep pipelines: what each server does when its fixed costs per commit
# (an fsync, a Raft round) are shared by thousands of lock cycles.
all_systems "uncontended, 4 connections x 1024 in flight" --conns 4 --depth 1024 -- --conns 4 --depth 1024
# Open loop at a moderate rate every system should sustain: the latency a
# lock user sees when the service is not saturated, counted from each
# cycle's intended start (a stall counts for every cycle it delays).
all_systems "uncontended, 16 connections, fixed rate 1,000 cycles/s" --conns 16 --depth 1 --rate 1000 -- --conns 16 --depth 1 --rate 1000
all_systems "contended, 16 clients on one key" --workload contended --conns 16 -- --workload contended --conns 16

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
"$compare" table "$manifest" | tee "$OUT/table.md"
echo
echo "results: $OUT"
