#!/usr/bin/env bash
# Membership changes on a busy cluster (issue 27), for BENCHMARKS.md
# ("Membership"). Each round: a fresh 3-node cluster (all on this machine,
# 127.0.0.1 only; node i at 179i0 clients, 179i1 Raft, 179i2 --http) holds
# HOLD locks (baton bench --workload hold --keep, lease 1h), then, under a
# steady load of RATE acquire+release cycles a second through the Go
# client (baton bench --via client --rate: it follows MOVED and the
# cluster's address list, retries ERR unavailable, and measures each
# acquire from its intended start, so a stall counts in full), in turn:
#
#   base      nothing happens (BASE seconds): the machine's own noise
#   add       baton member add, then batond --id 4 --join, until the
#             joiner has started (its /status answers)
#   promote   from there until baton member list --json says voter
#             (catch-up, from a snapshot or the log, and the promotion)
#   remove    baton member remove 4, until 2 s after it answered
#   exit      from there until the removed node has exited (it does so
#             by itself, about 20 s after its removal)
#   handoff   SIGTERM to node 1, the leader: it hands every shard over and
#             exits (the graceful hand-off, for comparison)
#   pullback  node 1 started again, until it leads and serves every shard
#             again (the priority pull-back, for comparison)
#
# Each step is measured by its own baton bench run, started a second
# before the step and interrupted (SIGINT) a second after it: the longest
# wait of a request (acquire from its intended start, or release) in that
# run is the step's gap in service; p99 and the errors the client
# returned go with it. The add and promote runs overlap by 0.2 s (two
# loads at once for that moment) so that no moment of the catch-up goes
# unmeasured. The add is also timed: the member add command, the joiner's
# start, its "caught up" (its log), and the voter role seen by polling
# member list every 100 ms, all from the start of the add; with the
# catch-up path (snapshot when the joiner's dragonboat_transport_received_
# snapshot_total counts one, else the log), the size of the state sent
# (a backup of the leader taken just before the add: the same record
# format as the snapshot stream) and the joiner's table on disk after it.
#
#   tools/bench-membership.sh     # RUNS=3 HOLD=1000000 RATE=1000 SHARDS=1 FLAGS=""
#   FLAGS="--snapshot-entries 1000" tools/bench-membership.sh
#
# FLAGS go to every batond (the joiner too). With the default snapshot
# policy the joiner needs a snapshot all the same: the hold's million
# acquires are more than --snapshot-bytes of log, so the leader has taken
# a snapshot and compacted its log behind it before the add. With
# OUT=DIR every round's node logs and bench JSON are kept there; with
# JOINER_TMP=DIR (e.g. /dev/shm) the joiner's data dir goes under DIR.
source "$(dirname "$0")/bench-lib.sh"

RUNS=${RUNS:-3}
HOLD=${HOLD:-1000000}
RATE=${RATE:-1000}
SHARDS=${SHARDS:-1}
BASE=${BASE:-5}
FLAGS=${FLAGS:-}
OUT=${OUT:-}
JOINER_TMP=${JOINER_TMP:-} # the joiner's data dir under this dir (e.g. /dev/shm) rather than the others'
LOAD_MAX=${LOAD_MAX:-120s} # no load run outlives this, interrupted or not
steps=(base add promote remove exit handoff pullback)
J4=127.0.0.1:17941/127.0.0.1:17940

# The load runs in flight: step name -> pid.
declare -A loads=()
stop_loads() {
	local s
	for s in "${!loads[@]}"; do kill -INT "${loads[$s]}" 2>/dev/null || true; done
	for s in "${!loads[@]}"; do wait "${loads[$s]}" 2>/dev/null || true; done
	loads=()
}
j4data=""
trap 'stop_loads; stop; stop_cluster; rm -rf "$work"; [ -z "$JOINER_TMP" ] || rm -rf "$j4data"' EXIT

# load_start STEP ADDRS: the steady load, measured as STEP's run.
load_start() {
	rm -f "$work/$1.json"
	bin/baton bench --addr "$2" --via client --rate "$RATE" --conns 4 --depth 16 --warmup 0 \
		--duration "$LOAD_MAX" --quiet --json "$work/$1.json" >"$work/$1.out" 2>&1 &
	loads[$1]=$!
}

# load_stop STEP: ends STEP's run; fig[STEP] is its figures: longest
# wait (ms), acquire p99 (ms), errors, seconds measured.
declare -A fig=()
load_stop() {
	kill -INT "${loads[$1]}" 2>/dev/null || true
	wait "${loads[$1]}" 2>/dev/null || true
	unset "loads[$1]"
	fig[$1]="- - - -"
	[ -s "$work/$1.json" ] || return 0
	fig[$1]=$(jq -r '[([.acquire_us.max, (.release_us.max // 0)] | max) / 1000, .acquire_us.p99 / 1000,
		([.errors[]] | add // 0), (.duration_s * 10 | round / 10)] | map(tostring) | join(" ")' "$work/$1.json")
}

# role ID: member ID's role in the directory, as node 1 tells it.
role() {
	bin/baton member list --addr 127.0.0.1:17910 --timeout 2s --json 2>/dev/null |
		jq -r ".members[] | select(.id == $1) | .role" || true
}

# log_ms FILE PATTERN: the time (ms) of FILE's first line matching PATTERN.
log_ms() {
	local t
	t=$(grep -m1 "$2" "$1" | sed -n 's/^time=\([^ ]*\).*/\1/p')
	[ -n "$t" ] && date -d "$t" +%s%3N || echo ""
}

# wait_for SECONDS COMMAND...: polls COMMAND every 50 ms until it succeeds;
# false after SECONDS.
wait_for() {
	local until=$(($(now_ms) + $1 * 1000))
	shift
	until "$@"; do
		[ "$(now_ms)" -lt "$until" ] || return 1
		sleep 0.05
	done
}
answers() { curl -s --max-time 0.5 -o /dev/null "http://$1/status"; }
is_voter() { [ "$(role 4)" = voter ]; }
# gone PID: PID has exited (a zombie not yet waited for counts).
gone() { [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }
serves_all() { [ "$(serving_shards "$@")" = "$SHARDS" ]; }

A3=127.0.0.1:17910,127.0.0.1:17920,127.0.0.1:17930
echo "3 nodes + 1 joining, $SHARDS shard(s), $HOLD held locks, load $RATE cycles/s (--via client, 4 x 16), flags: ${FLAGS:-(defaults)}, $RUNS rounds"
for run in $(seq "$RUNS"); do
	# The hold goes to node 1 and does not follow MOVED: should node 1
	# lose its leadership meanwhile (a busy machine), a fresh cluster.
	for attempt in 1 2 3; do
		# shellcheck disable=SC2086 # FLAGS are words
		start_cluster 3 --shards "$SHARDS" $FLAGS
		wait_for 20 bash -c '[ "$(bin/baton member list --addr 127.0.0.1:17910 --json | jq ".members | length")" = 3 ]' ||
			{ echo "no membership directory"; exit 1; }
		bin/baton bench --addr 127.0.0.1:17910 --workload hold --hold "$HOLD" --keep --conns 4 --depth 1024 \
			--duration 1s --quiet --json "$work/hold.json" >/dev/null 2>"$work/hold.err" && break
		echo "run=$run: the hold failed ($(tail -1 "$work/hold.err")), attempt $attempt"
		stop_cluster
		[ "$attempt" -lt 3 ] || exit 1
	done
	held=$(jq -r .held "$work/hold.json")
	snap_bytes=$(bin/baton backup -o "$work/backup" --http 127.0.0.1:17912 --json | jq -r .bytes)
	rm -f "$work/backup"
	fig=()

	load_start base "$A3"
	sleep "$BASE"
	load_stop base

	# Add, the joiner's start, its catch-up and promotion.
	load_start add "$A3"
	sleep 1
	t0=$(now_ms)
	bin/baton member add "$J4" --addr 127.0.0.1:17910 --json >"$work/add.json"
	add_ms=$(($(now_ms) - t0))
	id=$(jq -r .id "$work/add.json")
	j4data=$work/n4
	[ -z "$JOINER_TMP" ] || { j4data=$(mktemp -d -p "$JOINER_TMP"); rmdir "$j4data"; }
	[ "$id" = 4 ] || { echo "member add gave id $id"; exit 1; }
	# shellcheck disable=SC2086
	"$BATOND" --id 4 --join "$J4" --data "$j4data" --http 127.0.0.1:17942 $FLAGS >>"$work/n4.log" 2>&1 &
	pids[3]=$!
	wait_for 300 answers 127.0.0.1:17942 || { echo "the joiner did not start:"; tail -5 "$work/n4.log"; exit 1; }
	started_ms=$(($(now_ms) - t0))
	load_start promote "$A3"
	sleep 0.2
	load_stop add
	for _ in $(seq 3000); do is_voter && break; sleep 0.1; done
	voter_ms=$(($(now_ms) - t0))
	[ "$(role 4)" = voter ] || voter_ms=never
	sleep 1
	load_stop promote
	caught=$(log_ms "$work/n4.log" "caught up on every shard")
	caught_ms=$([ -n "$caught" ] && echo $((caught - t0)) || echo "?")
	got_snaps=$(curl -s http://127.0.0.1:17942/metrics | awk '/^dragonboat_transport_received_snapshot_total/ {print $2}')
	[ "${got_snaps:-0}" -gt 0 ] && path="snapshot($got_snaps)" || path=log
	table_bytes=$(du -sb "$j4data/table" | cut -f1)

	# Remove the new member, and its exit.
	load_start remove "$A3"
	sleep 1
	t1=$(now_ms)
	bin/baton member remove 4 --addr 127.0.0.1:17910 --json >/dev/null
	remove_ms=$(($(now_ms) - t1))
	sleep 2
	load_stop remove
	load_start exit "$A3"
	{ wait_for 40 gone "${pids[3]}" && exit_ms=$(($(now_ms) - t1)) || exit_ms=never; } 2>/dev/null
	sleep 1
	load_stop exit

	# The comparison: node 1's graceful stop (hand-off), and its pull-back.
	load_start handoff "$A3"
	sleep 1
	t2=$(now_ms)
	kill -TERM "${pids[0]}"
	{ wait_for 30 gone "${pids[0]}" || kill -9 "${pids[0]}"; wait "${pids[0]}" || true; } 2>/dev/null
	stopped_ms=$(($(now_ms) - t2))
	wait_for 10 serves_all 2 3 || true
	sleep 1
	load_stop handoff
	load_start pullback 127.0.0.1:17920,127.0.0.1:17930
	sleep 1
	t3=$(now_ms)
	# shellcheck disable=SC2086
	start_node 1 --shards "$SHARDS" $FLAGS
	wait_for 60 serves_all 1 && back_ms=$(($(now_ms) - t3)) || back_ms=never
	sleep 1
	load_stop pullback

	if [ -n "$OUT" ]; then
		mkdir -p "$OUT/run$run"
		cp "$work"/*.log "$work"/*.json "$work"/*.out "$OUT/run$run/"
	fi
	stop_cluster
	[ -z "$JOINER_TMP" ] || rm -rf "$j4data"

	echo "run=$run held=$held add_cmd_ms=$add_ms joiner_started_ms=$started_ms caught_up_ms=$caught_ms voter_ms=$voter_ms" \
		"catchup=$path state_bytes=$snap_bytes joiner_table_bytes=$table_bytes remove_cmd_ms=$remove_ms removed_exit_ms=$exit_ms" \
		"node1_stop_ms=$stopped_ms node1_serves_all_ms=$back_ms"
	echo "$voter_ms" >>"$work/voter"
	echo "$started_ms" >>"$work/started"
	echo "$caught_ms" >>"$work/caught"
	for s in "${steps[@]}"; do
		read -r gap p99 errs secs <<<"${fig[$s]}"
		printf '  %-9s longest_wait_ms=%s acquire_p99_ms=%s errors=%s window_s=%s\n' "$s" "$gap" "$p99" "$errs" "$secs"
		echo "$gap" >>"$work/gap-$s"
		echo "$p99" >>"$work/p99-$s"
		echo "$errs" >>"$work/err-$s"
	done
done
# med FILE: the median of FILE's numbers (a "never" or "?" left out).
med() { grep -E '^[0-9.]+$' "$1" | median || true; }
echo "MEDIAN joiner_started_ms=$(med "$work/started") caught_up_ms=$(med "$work/caught") voter_ms=$(med "$work/voter")"
for s in "${steps[@]}"; do
	printf 'MEDIAN %-9s longest_wait_ms=%s acquire_p99_ms=%s errors=%s\n' "$s" \
		"$(med "$work/gap-$s")" "$(med "$work/p99-$s")" "$(med "$work/err-$s")"
done
