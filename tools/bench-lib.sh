# Shared by tools/bench-*.sh (sourced, not run): checks, the build, a work
# dir removed on exit, and the median of a column of numbers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v jq >/dev/null || { echo "$0 needs jq (apt-get install jq)"; exit 1; }
make -s build
work=$(mktemp -d)

# cpu_ticks PID prints the CPU time (user + system, in clock ticks) PID used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# median reads numbers, one per line, and prints their median.
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# wait_ready ADDR: returns once a short run against ADDR gets no error at all
# (256 keys, so every shard has answered); fails after about 20 s. A port
# that accepts connections is not enough: shards serve only once elected.
wait_ready() {
	for _ in $(seq 200); do
		if bin/baton bench --addr "$1" --conns 1 --depth 64 --ops 256 --warmup 0 --duration 2s \
			--quiet --json "$work/ready.json" >/dev/null 2>&1 &&
			[ "$(jq '.errors | length' "$work/ready.json")" = 0 ]; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# A single node for the scripts that measure one: CLIENT and RAFT are its
# addresses (the script sets them), pid its process while it runs.
pid=""
trap 'stop; stop_cluster; rm -rf "$work"' EXIT

# stop ends the node started last.
stop() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=""; }

# start SHARDS: a fresh node in a new data dir, returning once it serves.
start() {
	rm -rf "$work/data"
	bin/batond --peers "$RAFT/$CLIENT" --data "$work/data" --shards "$1" >"$work/node.log" 2>&1 &
	pid=$!
	wait_ready "$CLIENT" || { echo "node did not start:"; cat "$work/node.log"; exit 1; }
}

# A cluster for the scripts that measure several nodes: node i listens on
# 127.0.0.1:179i0 (clients), 179i1 (Raft) and 179i2 (--http); pids are its
# processes while it runs. BATOND is the batond it runs (this tree's build
# unless a script says otherwise). PORTS is the ports' prefix instead of
# 179 (PORTS=176: 176i0, 176i1, 176i2), for a script that must not meet
# the cluster of another one running at the same time.
pids=()
BATOND=${BATOND:-bin/batond}
PORTS=${PORTS:-179}

# use_config CONFIG sets BATOND and flags from one configuration of a
# script's CONFIGS: batond flags, optionally led by bin=DIR to run
# DIR/batond instead of this tree's build.
use_config() {
	flags=$1
	BATOND=bin/batond
	if [[ $flags == bin=* ]]; then
		BATOND=${flags%% *}
		BATOND=${BATOND#bin=}/batond
		[[ $flags == *" "* ]] && flags=${flags#* } || flags=""
	fi
}

# stop_cluster ends the cluster started last.
stop_cluster() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}

# start_cluster N FLAGS...: a fresh cluster of N nodes in new data dirs,
# every batond given FLAGS, returning once node 1 serves every shard.
start_cluster() {
	local n=$1 i
	shift
	rm -rf "$work"/n*
	peers=""
	for i in $(seq "$n"); do peers="$peers${peers:+,}127.0.0.1:${PORTS}${i}1/127.0.0.1:${PORTS}${i}0"; done
	for i in $(seq "$n"); do
		start_node "$i" "$@"
	done
	wait_ready "127.0.0.1:${PORTS}10" || { echo "cluster of $n did not settle:"; tail -5 "$work"/n*.log; exit 1; }
}

# serving_shards I...: how many shards nodes I... of the cluster lead and
# serve between them, from their /status (a node that does not answer
# serves none).
serving_shards() {
	local i
	for i in "$@"; do
		curl -s --max-time 0.5 "http://127.0.0.1:${PORTS}${i}2/status" || true
	done | jq -s '[.[].shards[] | select(.role == "leader" and .serving) | .id] | unique | length' 2>/dev/null || echo 0
}

# now_ms is the wall clock in milliseconds.
now_ms() { date +%s%3N; }

# start_node I FLAGS...: (re)starts node I of the cluster started last, in
# its data dir, appending to its log; pids[I-1] is its process.
start_node() {
	local i=$1
	shift
	"$BATOND" --id "$i" --peers "$peers" --data "$work/n$i" --http "127.0.0.1:${PORTS}${i}2" "$@" >>"$work/n$i.log" 2>&1 &
	pids[i - 1]=$!
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "go: $(go version)"
