"""Acquire+release cycles per second from one Python process: baton's Python client
(``baton.Client`` on threads, ``baton.aio.Client`` on asyncio) against redis-py's ``Lock``
(``redis.Redis`` and ``redis.asyncio.Redis``), measured alternately in the same run.

    python bench.py --baton 127.0.0.1:17900 --redis 127.0.0.1:16394   # see --help

tools/bench-python.sh starts the servers, makes the venv with redis-py, and runs this.

A cycle is an acquire of a free key (lease 10 s, waiting at most 5 s) and, once granted,
its release with the grant's token. Each loop cycles on a key of its own. "1 in flight"
is one loop; "16 in flight" is 16 loops at once on one client object: 16 threads for the
sync clients, 16 tasks for the asyncio ones. That is what a client library is asked for
when an application shares one client between its workers: baton's client pipelines the
16 over its two connections; redis-py takes a connection from its pool for each command
under way (16 connections), as RESP clients that are not told to pipeline do.

Acquire latency is from calling acquire to its return. Each measurement has a warm-up
(not recorded); every system is measured once per round, in an order that turns each
round, and the report gives each figure's median over the rounds and the median of the
per-round ratios of baton to redis-py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

import baton
import baton.aio

LEASE = 10.0
WAIT = 5.0

SYSTEMS = ["baton", "baton-aio", "redis-py", "redis-py-aio"]


@dataclass
class Result:
    system: str
    loops: int
    round: int
    cycles_per_sec: float
    acquire_p50_us: float
    acquire_p99_us: float
    cycle_p50_us: float
    errors: int


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def summarize(system: str, loops: int, rnd: int, duration: float, acq: list[float],
              cyc: list[float], errors: int) -> Result:
    return Result(system, loops, rnd, len(cyc) / duration, pct(acq, 0.5) * 1e6,
                  pct(acq, 0.99) * 1e6, pct(cyc, 0.5) * 1e6, errors)


# --- sync: one thread per loop ----------------------------------------------------------


def run_threads(make_cycle: Callable[[], Callable[[str], float]], prefix: str, loops: int,
                warmup: float, duration: float) -> tuple[list[float], list[float], int]:
    """Runs loops threads, each calling its cycle on a key of its own, and returns the
    acquire and cycle latencies of the cycles run wholly within the measured time."""
    start = time.perf_counter()
    measure_from, end = start + warmup, start + warmup + duration
    acq: list[float] = []
    cyc: list[float] = []
    errors = 0
    mu = threading.Lock()

    def loop(i: int) -> None:
        nonlocal errors
        cycle = make_cycle()
        key = f"{prefix}/{i}"
        my_acq: list[float] = []
        my_cyc: list[float] = []
        errs = 0
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                break
            try:
                acquired = cycle(key)
            except Exception:
                errs += 1
                continue
            t2 = time.perf_counter()
            if t0 >= measure_from and t2 <= end:
                my_acq.append(acquired - t0)
                my_cyc.append(t2 - t0)
        with mu:
            acq.extend(my_acq)
            cyc.extend(my_cyc)
            errors += errs

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(loops)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return acq, cyc, errors


def baton_sync(addr: str) -> tuple[Callable[[], Callable[[str], float]], Callable[[], None]]:
    client = baton.Client(addr)
    client.query("bench/ready")

    def make() -> Callable[[str], float]:
        def cycle(key: str) -> float:
            lock = client.acquire(key, lease=LEASE, wait=WAIT)
            t = time.perf_counter()
            if not lock.release():
                raise RuntimeError("release: lost")
            return t

        return cycle

    return make, client.close


def redis_sync(addr: str) -> tuple[Callable[[], Callable[[str], float]], Callable[[], None]]:
    import redis

    host, _, port = addr.rpartition(":")
    r = redis.Redis(host=host, port=int(port))
    r.ping()

    def make() -> Callable[[str], float]:
        def cycle(key: str) -> float:
            lock = r.lock(key, timeout=LEASE)
            if not lock.acquire(blocking=True, blocking_timeout=WAIT):
                raise RuntimeError("acquire: not granted")
            t = time.perf_counter()
            lock.release()
            return t

        return cycle

    return make, r.close


# --- asyncio: one task per loop ----------------------------------------------------------

ACycle = Callable[[str], Awaitable[float]]


async def run_tasks(cycle: ACycle, prefix: str, loops: int, warmup: float,
                    duration: float) -> tuple[list[float], list[float], int]:
    start = time.perf_counter()
    measure_from, end = start + warmup, start + warmup + duration
    acq: list[float] = []
    cyc: list[float] = []
    errors = 0

    async def loop(i: int) -> None:
        nonlocal errors
        key = f"{prefix}/{i}"
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                break
            try:
                acquired = await cycle(key)
            except Exception:
                errors += 1
                continue
            t2 = time.perf_counter()
            if t0 >= measure_from and t2 <= end:
                acq.append(acquired - t0)
                cyc.append(t2 - t0)

    await asyncio.gather(*(loop(i) for i in range(loops)))
    return acq, cyc, errors


async def baton_aio_run(addr: str, prefix: str, loops: int, warmup: float,
                        duration: float) -> tuple[list[float], list[float], int]:
    async with baton.aio.Client(addr) as client:
        await client.query("bench/ready")

        async def cycle(key: str) -> float:
            lock = await client.acquire(key, lease=LEASE, wait=WAIT)
            t = time.perf_counter()
            if not await lock.release():
                raise RuntimeError("release: lost")
            return t

        return await run_tasks(cycle, prefix, loops, warmup, duration)


async def redis_aio_run(addr: str, prefix: str, loops: int, warmup: float,
                        duration: float) -> tuple[list[float], list[float], int]:
    import redis.asyncio as aioredis

    host, _, port = addr.rpartition(":")
    r = aioredis.Redis(host=host, port=int(port))
    try:
        await r.ping()

        async def cycle(key: str) -> float:
            lock = r.lock(key, timeout=LEASE)
            if not await lock.acquire(blocking=True, blocking_timeout=WAIT):
                raise RuntimeError("acquire: not granted")
            t = time.perf_counter()
            await lock.release()
            return t

        return await run_tasks(cycle, prefix, loops, warmup, duration)
    finally:
        await r.aclose()


def go_client(args: argparse.Namespace, loops: int, rnd: int) -> Result:
    """The same workload through baton's Go client (``baton bench --via client``: one
    client, a goroutine per loop), for what the server and the machine allow."""
    out = subprocess.run(
        [args.baton_bench, "bench", "--addr", args.baton, "--via", "client", "--conns", "1",
         "--depth", str(loops), "--duration", f"{args.duration}s", "--warmup",
         f"{args.warmup}s", "--wait", f"{WAIT}s", "--quiet", "--json", "-"],
        check=False, capture_output=True, text=True, timeout=args.duration + args.warmup + 60,
    )
    res = json.loads(out.stdout)
    errors = sum(int(v) for v in (res.get("errors") or {}).values())
    return Result("go-client", loops, rnd, float(res["cycles_per_sec"]),
                  float(res["acquire_us"]["p50"]), float(res["acquire_us"]["p99"]),
                  float("nan"), errors + (out.returncode != 0))


def measure(system: str, args: argparse.Namespace, loops: int, rnd: int) -> Result:
    prefix = f"pybench/{system}/{loops}/{rnd}"
    if system == "go-client":
        return go_client(args, loops, rnd)
    if system in ("baton", "redis-py"):
        make, close = baton_sync(args.baton) if system == "baton" else redis_sync(args.redis)
        try:
            acq, cyc, errs = run_threads(make, prefix, loops, args.warmup, args.duration)
        finally:
            close()
    elif system == "baton-aio":
        acq, cyc, errs = asyncio.run(
            baton_aio_run(args.baton, prefix, loops, args.warmup, args.duration))
    else:
        acq, cyc, errs = asyncio.run(
            redis_aio_run(args.redis, prefix, loops, args.warmup, args.duration))
    return summarize(system, loops, rnd, args.duration, acq, cyc, errs)


def fmt_us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def report(results: list[Result], systems: list[str], loops_list: list[int]) -> None:
    print()
    print("| system | in flight | cycles/s (median) | rounds | acquire p50 | acquire p99 "
          "| errors |")
    print("|---|---|---|---|---|---|---|")
    for loops in loops_list:
        for s in systems:
            rs = [r for r in results if r.system == s and r.loops == loops]
            if not rs:
                continue
            rates = [r.cycles_per_sec for r in rs]
            print(f"| {s} | {loops} | **{statistics.median(rates):,.0f}** | "
                  f"{' / '.join(f'{x:,.0f}' for x in rates)} | "
                  f"{fmt_us(statistics.median(r.acquire_p50_us for r in rs))} | "
                  f"{fmt_us(statistics.median(r.acquire_p99_us for r in rs))} | "
                  f"{sum(r.errors for r in rs)} |")
    print()
    for loops in loops_list:
        for ours, theirs in (("baton", "redis-py"), ("baton-aio", "redis-py-aio")):
            ratios = []
            for rnd in sorted({r.round for r in results}):
                a = [r for r in results if (r.system, r.loops, r.round) == (ours, loops, rnd)]
                b = [r for r in results if (r.system, r.loops, r.round) == (theirs, loops, rnd)]
                if a and b and b[0].cycles_per_sec > 0:
                    ratios.append(a[0].cycles_per_sec / b[0].cycles_per_sec)
            if ratios:
                print(f"{ours} / {theirs}, {loops} in flight: median ratio "
                      f"{statistics.median(ratios):.2f} (rounds: "
                      f"{', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baton", required=True, help="a baton node's client address")
    ap.add_argument("--redis", required=True, help="a Redis server's address")
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds run first, unrecorded")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loops", default="1,16", help="in-flight counts, comma-separated")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--json", help="write every measurement to this file")
    ap.add_argument("--baton-bench", help="the baton command: also measure the Go client "
                    "(baton bench --via client) on the same node, as the system go-client")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    if args.baton_bench:
        systems.append("go-client")
    for s in systems:
        if s not in [*SYSTEMS, "go-client"]:
            ap.error(f"no system {s} (there are {', '.join(SYSTEMS)})")
    loops_list = [int(x) for x in args.loops.split(",")]
    results: list[Result] = []
    for rnd in range(1, args.rounds + 1):
        for loops in loops_list:
            k = (rnd - 1) % len(systems)
            for s in systems[k:] + systems[:k]:
                r = measure(s, args, loops, rnd)
                results.append(r)
                print(f"round={rnd} system={s} in_flight={loops} "
                      f"cycles/s={r.cycles_per_sec:.0f} acquire_p50_us={r.acquire_p50_us:.0f} "
                      f"acquire_p99_us={r.acquire_p99_us:.0f} errors={r.errors}", flush=True)
    report(results, systems, loops_list)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
