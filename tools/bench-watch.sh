#!/usr/bin/env bash
# Watches and elections (protocol 1.4, issue 29), for BENCHMARKS.md
# ("Watch and election"). Each round, on a fresh single node (127.0.0.1
# only, ports 17800-17801, 4 shards):
#
#   hold     baton bench --workload hold: KEYS held locks, bytes per lock
#            from the node's RSS (the comparison for the watches' memory)
#   watch    tools/watchbench: one watch on each of KEYS other keys over 16
#            connections, bytes per watch from the node's RSS; then CHANGES
#            acquire+release cycles, one at a time, on watched keys: the
#            time from the client reading its A's OK to a watcher reading
#            the key's HELD line (p50, p99), and from the A's sending (the
#            acquire's own round trip is the comparison: same A)
#   elect    baton elect K --value a --lease LEASE -- sleep, then a second
#            baton elect K --value b waiting; kill -9 of the first baton
#            process (its command is killed with it), then the time until
#            the second one's command runs, against LEASE: the leader's
#            lease runs out on the server, the key passes to b
#
#   load     baton bench 16 x 16 on a fresh node, alone and beside KEYS
#            idle watches (LOAD=0 skips it; ONLY_LOAD=1 runs it alone)
#
#   tools/bench-watch.sh        # RUNS=3 KEYS=100000 CHANGES=20000 LEASE=2s
source "$(dirname "$0")/bench-lib.sh"

RUNS=${RUNS:-3}
KEYS=${KEYS:-100000}
CHANGES=${CHANGES:-20000}
LEASE=${LEASE:-2s}
CLIENT=127.0.0.1:17800
RAFT=127.0.0.1:17801
go build -o "$work/watchbench" ./tools/watchbench

echo "single node, 4 shards; $KEYS keys; $CHANGES changes; election lease $LEASE; $RUNS rounds"
for r in $(seq "$RUNS"); do
	[ "${ONLY_LOAD:-0}" = 1 ] && break
	start 4
	bin/baton bench --addr "$CLIENT" --workload hold --hold "$KEYS" --conns 16 --depth 64 --duration 1s --pid "$pid" \
		--quiet --json "$work/hold.json" >/dev/null
	hold_bytes=$(jq '.bytes_per_lock | floor' "$work/hold.json")
	stop
	start 4
	out=$("$work/watchbench" --addr "$CLIENT" --keys "$KEYS" --conns 16 --pid "$pid" --changes "$CHANGES" | tr '\n' ' ')
	acq=$(bin/baton bench --addr "$CLIENT" --conns 1 --depth 1 --ops 2000 --warmup 0 --duration 10s --quiet --json "$work/acq.json" >/dev/null &&
		jq '.acquire_us.p50' "$work/acq.json")
	# The election: a leader, a candidate in line, the leader killed.
	BATON_ADDR=$CLIENT bin/baton elect e/1 --value a --lease "$LEASE" -- sleep 600 &
	leader=$!
	disown "$leader"
	until BATON_ADDR=$CLIENT bin/baton query e/1 --json | grep -q '"owner":"a"'; do sleep 0.05; done
	rm -f "$work/b-ran"
	BATON_ADDR=$CLIENT bin/baton elect e/1 --value b --lease "$LEASE" -- sh -c "date +%s%3N > $work/b-ran" &
	cand=$!
	sleep 0.5 # b's campaign is in line by then (it has only to connect)
	killed=$(now_ms)
	# baton first: killed after its command, it would release the lock.
	kill -9 "$leader"
	pkill -9 -f "^sleep 600$" || true
	wait "$cand" 2>/dev/null || true
	failover_ms=$(($(cat "$work/b-ran") - killed))
	stop
	echo "run=$r hold_bytes_per_lock=$hold_bytes acquire_p50_us=$acq $out failover_ms=$failover_ms lease=$LEASE"
done

# The apply path with and without watches: baton bench 16 x 16 (cycles/s)
# on a fresh node, alone and beside KEYS idle watches (other keys), in
# turns. A holder change looks its key up among the watched ones only
# when the shard has watches.
if [ "${LOAD:-1}" = 1 ]; then
	echo "16 x 16 uncontended cycles/s, without and with $KEYS idle watches, 10 s each, $RUNS rounds"
	for r in $(seq "$RUNS"); do
		start 4
		without=$(bin/baton bench --addr "$CLIENT" --conns 16 --depth 16 --duration 10s --quiet --json "$work/wo.json" >/dev/null && jq '.cycles_per_sec | floor' "$work/wo.json")
		stop
		start 4
		"$work/watchbench" --addr "$CLIENT" --keys "$KEYS" --conns 16 --changes 0 --hold 30s >"$work/wb.out" &
		wb=$!
		until grep -q '^watches=' "$work/wb.out"; do sleep 0.05; done # every watch has its first line
		with=$(bin/baton bench --addr "$CLIENT" --conns 16 --depth 16 --duration 10s --quiet --json "$work/w.json" >/dev/null && jq '.cycles_per_sec | floor' "$work/w.json")
		kill "$wb" 2>/dev/null; wait "$wb" 2>/dev/null || true
		stop
		echo "load run=$r without_watches=$without with_watches=$with"
	done
fi
