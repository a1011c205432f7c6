#!/usr/bin/env bash
# The Python client's figures for BENCHMARKS.md ("Python client"): acquire+
# release cycles per second from one Python process, 1 in flight and 16 (16
# threads sharing one baton.Client, 16 tasks sharing one baton.aio.Client),
# against redis-py's Lock on Redis with appendfsync always and against
# baton's Go client (baton bench --via client), all in the same run, every
# system once per round (python/bench/bench.py says how it measures).
#
#   tools/bench-python.sh          # ROUNDS=3 DURATION=5 WARMUP=1 (seconds)
#
# One fresh single node (1 shard, fsync on) and one redis-server
# (--appendonly yes --appendfsync always, data in the work dir), both on
# 127.0.0.1 and stopped on exit. redis-server is Debian's package, installed
# when missing (without letting it start its service). redis-py is not a
# dependency of the client: it is installed, pinned, from PyPI into a venv
# of the benchmark's own, python/.venv-bench, made on first use; the client
# is imported from python/src.
source "$(dirname "$0")/bench-lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
PYTHON=${PYTHON:-python3}
REDIS_PY=redis==8.1.0
CLIENT=127.0.0.1:17900
RAFT=127.0.0.1:17901
REDIS_PORT=16394
VENV=python/.venv-bench

if ! command -v redis-server >/dev/null; then
	echo "== installing redis-server"
	# policy-rc.d answering 101 tells the package's scripts not to start
	# its service: this script runs its own server.
	policy=/usr/sbin/policy-rc.d made=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		made=1
	fi
	rc=0
	{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server; } || rc=$?
	[ -n "$made" ] && rm -f "$policy"
	[ $rc -eq 0 ] || exit $rc
fi

stamp="$VENV/.installed-$REDIS_PY"
if [ ! -e "$stamp" ]; then
	test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
	"$VENV/bin/python" -m pip install -q "$REDIS_PY"
	rm -f "$VENV"/.installed-*
	touch "$stamp"
fi

redis_pid=""
stop_redis() { [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null; redis_pid=""; }
trap 'stop; stop_redis; stop_cluster; rm -rf "$work"' EXIT

if (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; then
	echo "port 127.0.0.1:$REDIS_PORT is in use: stop what listens there first" >&2
	exit 1
fi
mkdir -p "$work/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$work/redis" --save "" --daemonize no \
	--logfile "$work/redis.log" --appendonly yes --appendfsync always &
redis_pid=$!
for _ in $(seq 100); do
	[ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && break
	sleep 0.1
done
[ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] || { echo "redis-server did not start:"; cat "$work/redis.log"; exit 1; }

start 1

echo "python: $("$VENV/bin/python" --version), $("$VENV/bin/python" -c 'import redis; print("redis-py", redis.__version__)')"
echo "redis: $(redis-server --version | cut -d' ' -f1-3)"
if git rev-parse --git-dir >/dev/null 2>&1; then
	echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ' (with changes)')"
fi
echo "date: $(date '+%Y-%m-%d %H:%M')"
PYTHONPATH=python/src "$VENV/bin/python" python/bench/bench.py --baton "$CLIENT" \
	--redis "127.0.0.1:$REDIS_PORT" --baton-bench bin/baton \
	--rounds "$ROUNDS" --duration "$DURATION" --warmup "$WARMUP"
