"""The shared client scenarios (testdata/clients/scenarios at the repository's root,
described in testdata/clients/README.md): behaviour every official client must show,
written once as data and run by each client's test suite. This is the Python runner:
every scenario runs against baton.Client and against baton.aio.Client, its fake servers
being FakeServers (fakeserver.py) that answer by the scenario's rules. A file this runner
cannot read, a step or a field it does not know, fails the test: a scenario written for
another client runs here too, or fails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fakeserver import FakeServer

import baton
import baton._aioconn
import baton._client
import baton._conn
import baton.aio

T = TypeVar("T")

SCENARIOS = Path(__file__).resolve().parents[2] / "testdata" / "clients" / "scenarios"
HEARTBEAT = "Q " + baton.HEARTBEAT_KEY
OLD_SERVER_ANSWER = "? - ERR badrequest op must be A, R, K, Q or H"

SCENARIO_KEYS = {"format", "name", "checks", "servers", "client", "steps"}
SERVER_KEYS = {"rules"}
RULE_KEYS = {"match", "reply", "then", "times", "after"}
CLIENT_KEYS = {"addresses", "secret", "owner_prefix", "timing"}
STEP_KEYS = {
    "call": {"call", "key", "permits", "lease", "wait", "owner", "lock", "id", "background",
             "expect", "within", "took_at_least"},
    "join": {"join", "expect", "within", "took_at_least"},
    "give_up": {"give_up"},
    "wait_for": {"wait_for", "within"},
    "do": {"server", "do", "on_connection_of", "lines"},
    "expect_received": {"expect_received"},
    "expect_first_lines": {"expect_first_lines"},
}
EXPECT_KEYS = {"value", "token", "owner", "error", "code"}
COND_KEYS = {"server", "servers", "received", "after", "count", "open_connections", "accepted",
             "heartbeats", "lock", "lost"}
RECEIVED_KEYS = {"server", "servers", "match", "count", "at_least", "connections"}


class ScenarioError(Exception):
    """The scenario file says something this runner cannot do."""


def _keys(where: str, obj: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ScenarioError(f"{where}: want an object, not {obj!r}")
    unknown = set(obj) - allowed
    if unknown:
        raise ScenarioError(f"{where}: unknown fields {sorted(unknown)}")
    return obj


def load(path: Path) -> dict[str, Any]:
    """Reads a scenario strictly: every field must be one this runner knows."""
    sc = _keys(path.name, json.loads(path.read_text()), SCENARIO_KEYS)
    if sc.get("format") != 1:
        raise ScenarioError(f"format {sc.get('format')!r}: this runner reads format 1")
    if sc.get("name") != path.stem:
        raise ScenarioError(f"name {sc.get('name')!r}, want the file's name {path.stem!r}")
    if not sc.get("checks") or not sc.get("servers") or not sc.get("steps"):
        raise ScenarioError("checks, servers and steps are required")
    for name, srv in sc["servers"].items():
        _keys(f"server {name}", srv, SERVER_KEYS)
        for i, rule in enumerate(srv.get("rules", [])):
            _keys(f"server {name} rule {i}", rule, RULE_KEYS)
            if not rule.get("match") or rule.get("then") not in (None, "cut", "freeze"):
                raise ScenarioError(f"server {name} rule {i}: bad rule {rule!r}")
    client = _keys("client", sc.get("client"), CLIENT_KEYS)
    if not client.get("addresses"):
        raise ScenarioError("client.addresses is required")
    for k in client.get("timing", {}):
        if k not in ("redial_interval", "refresh_interval"):
            raise ScenarioError(f"client.timing: unknown period {k!r}")
    for i, st in enumerate(sc["steps"]):
        kinds = [k for k in STEP_KEYS if k in st]
        if len(kinds) != 1:
            raise ScenarioError(f"step {i}: want exactly one of {sorted(STEP_KEYS)}")
        _keys(f"step {i}", st, STEP_KEYS[kinds[0]])
        if "expect" in st:
            _keys(f"step {i} expect", st["expect"], EXPECT_KEYS)
        if "wait_for" in st:
            _keys(f"step {i} wait_for", st["wait_for"], COND_KEYS)
        for k in ("expect_received", "expect_first_lines"):
            if k in st:
                _keys(f"step {i} {k}", st[k], RECEIVED_KEYS)
    return sc


PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)(?::([a-z0-9_]+))?\}")


class Vars:
    """The scenario's bound variables and its servers' addresses; line patterns."""

    def __init__(self) -> None:
        self.mu = threading.Lock()
        self.bound: dict[str, str] = {}
        self.addrs: dict[str, str] = {}

    def _addr(self, server: str) -> str:
        if server not in self.addrs:
            raise ScenarioError(f"no server {server!r}")
        return self.addrs[server]

    def pattern(self, p: str) -> tuple[re.Pattern[str], list[str]]:
        names: list[str] = []
        out = []
        with self.mu:
            for field in p.split():
                parts, last = [], 0
                for m in PLACEHOLDER.finditer(field):
                    parts.append(_glob(field[last:m.start()]))
                    last = m.end()
                    name, arg = m.group(1), m.group(2)
                    if arg is not None:
                        if name != "addr":
                            raise ScenarioError(f"pattern {p!r}: unknown placeholder {m[0]}")
                        parts.append(re.escape(self._addr(arg)))
                    elif name in self.bound:
                        parts.append(re.escape(self.bound[name]))
                    else:
                        names.append(name)
                        parts.append(r"(\S+)")
                parts.append(_glob(field[last:]))
                out.append("".join(parts))
        return re.compile("^" + " ".join(out) + "$"), names

    def match(self, p: str, line: str, bind: bool = True) -> bool:
        rx, names = self.pattern(p)
        m = rx.match(" ".join(line.split()))
        if m is None:
            return False
        if bind:
            with self.mu:
                for i, n in enumerate(names):
                    self.bound.setdefault(n, m.group(i + 1))
        return True

    def subst(self, s: str) -> str:
        def one(m: re.Match[str]) -> str:
            if m.group(2) is not None:
                return self._addr(m.group(2))
            with self.mu:
                if m.group(1) not in self.bound:
                    raise ScenarioError(f"{s!r}: variable {m.group(1)} is not bound yet")
                return self.bound[m.group(1)]

        return PLACEHOLDER.sub(one, s)


def _glob(s: str) -> str:
    return r"\S*".join(re.escape(p) for p in s.split("*"))


class ScenarioServer(FakeServer):
    """A FakeServer answering by a scenario's rules."""

    def __init__(self, run: Run, name: str, rules: list[dict[str, Any]], port: int = 0) -> None:
        self.run = run
        self.rules = rules
        self.used = [0] * len(rules)
        self.received: list[tuple[socket.socket, str]] = []
        self.seqs: list[int] = []  # each request's place among the run's requests
        self.firsts: dict[socket.socket, str] = {}
        self.frozen: set[socket.socket] = set()
        self.heartbeats = 0
        self.wlock = threading.Lock()
        super().__init__(name, port=port)

    def write(self, conn: socket.socket, lines: list[str]) -> None:
        data = "".join(self.run.vars.subst(x) + "\n" for x in lines).encode()
        with self.wlock, contextlib.suppress(OSError):
            conn.sendall(data)

    def answer(self, conn: socket.socket, line: str) -> list[str]:
        if line == HEARTBEAT:
            with self.mu:
                self.heartbeats += 1
                frozen = conn in self.frozen
            if not frozen:
                self.write(conn, [HEARTBEAT + " FREE"])
            return []
        with self.run.mu:
            self.run.seq += 1
            seq = self.run.seq
        with self.mu:
            self.received.append((conn, line))
            self.seqs.append(seq)
            self.firsts.setdefault(conn, line)
        for i, rule in enumerate(self.rules):
            if "after" in rule and self.run.first_seq(rule["after"]) >= seq:
                continue
            with self.mu:
                times = rule.get("times", 0)
                if times and self.used[i] >= times:
                    continue
                if not self.run.vars.match(rule["match"], line):
                    continue
                self.used[i] += 1
            if rule.get("reply"):
                self.write(conn, rule["reply"])
            if rule.get("then") == "cut":
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            elif rule.get("then") == "freeze":
                with self.mu:
                    self.frozen.add(conn)
            return []
        if line == "C -":
            self.write(conn, [OLD_SERVER_ANSWER])
            return []
        with self.run.mu:
            self.run.unexpected.append(f"{self.name}: {line}")
        return []


class GaveUp(Exception):
    """Raised in a sync call's thread: its caller gives up (as an interrupt would)."""


class Call:
    def __init__(self, fut: concurrent.futures.Future[Any], thread: threading.Thread | None
                 ) -> None:
        self.fut = fut
        self.thread = thread
        self.start = time.monotonic()
        self.took = 0.0
        fut.add_done_callback(self._done)

    def _done(self, _: concurrent.futures.Future[Any]) -> None:
        self.took = time.monotonic() - self.start


class Run:
    """One run of a scenario with one kind of client, "sync" or "aio"."""

    def __init__(self, sc: dict[str, Any], kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sc = sc
        self.kind = kind
        self.mu = threading.Lock()
        self.vars = Vars()
        self.unexpected: list[str] = []
        self.seq = 0  # requests received so far, every server together
        self.calls: dict[str, Call] = {}
        self.locks: dict[str, Any] = {}
        self.servers: dict[str, ScenarioServer | None] = {}
        self.old: dict[str, list[ScenarioServer]] = {}
        self.ports: dict[str, int] = {}
        for name, srv in sc["servers"].items():
            s = ScenarioServer(self, name, srv.get("rules", []))
            self.servers[name] = s
            self.old[name] = []
            self.ports[name] = s.listener.getsockname()[1]
            self.vars.addrs[name] = s.addr
        client = sc["client"]
        for k, v in client.get("timing", {}).items():
            if k == "redial_interval":
                monkeypatch.setattr(baton._conn, "REDIAL_INTERVAL", float(v))
                monkeypatch.setattr(baton._aioconn, "REDIAL_INTERVAL", float(v))
            elif k == "refresh_interval":
                monkeypatch.setattr(baton._client, "REFRESH_INTERVAL", float(v))
                monkeypatch.setattr(baton.aio, "REFRESH_INTERVAL", float(v))
        addrs = [self.vars.subst("{addr:" + a + "}") for a in client["addresses"]]
        opts: dict[str, Any] = {"secret": client.get("secret"),
                                "owner_prefix": client.get("owner_prefix", "")}
        monkeypatch.delenv("BATON_AUTH", raising=False)
        self.loop: asyncio.AbstractEventLoop | None = None
        if kind == "sync":
            self.sync: baton.Client | None = baton.Client(addrs, **opts)
        else:
            self.sync = None
            loop = asyncio.new_event_loop()
            self.loop = loop
            self.loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
            self.loop_thread.start()
            self.aio = self._on_loop(self._make_aio(addrs, opts)).result(timeout=10)

    async def _make_aio(self, addrs: list[str], opts: dict[str, Any]) -> baton.aio.Client:
        c = baton.aio.Client(addrs, **opts)
        await c.__aenter__()
        return c

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        try:
            if self.sync is not None:
                self.sync.close()
            else:
                assert self.loop is not None
                self._on_loop(self.aio.close()).result(timeout=10)
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.loop_thread.join(timeout=5)
                self.loop.close()
        finally:
            for s in self.servers.values():
                if s is not None:
                    s.close()

    # --- servers -------------------------------------------------------------

    def server(self, name: str) -> ScenarioServer | None:
        if name not in self.servers:
            raise ScenarioError(f"no server {name!r}")
        return self.servers[name]

    def generations(self, name: str) -> list[ScenarioServer]:
        cur = self.server(name)
        return self.old[name] + ([cur] if cur is not None else [])

    def names(self, obj: dict[str, Any]) -> list[str]:
        names = ([obj["server"]] if "server" in obj else []) + list(obj.get("servers", []))
        if not names:
            raise ScenarioError("the step names no server")
        return names

    def matching(self, name: str, pattern: str, after: int = 0
                 ) -> list[tuple[socket.socket, str]]:
        """The requests server name received that match pattern, past the run's after-th."""
        out = []
        for s in self.generations(name):
            with s.mu:
                lines = list(zip(s.received, s.seqs, strict=True))
            out += [(c, x) for (c, x), q in lines if q > after and self.vars.match(pattern, x)]
        return out

    def first_seq(self, pattern: str) -> int:
        """The place of the run's first request matching pattern (past the last: none)."""
        first = 1 << 62
        for name in self.servers:
            for s in self.generations(name):
                with s.mu:
                    lines = list(zip(s.received, s.seqs, strict=True))
                for (_, x), q in lines:
                    if self.vars.match(pattern, x):
                        first = min(first, q)
                        break
        return first

    # --- steps ---------------------------------------------------------------

    def step(self, i: int, st: dict[str, Any]) -> None:
        where = f"step {i}"
        if "call" in st:
            call = self.start_call(where, st)
            if st.get("background"):
                if "id" not in st:
                    raise ScenarioError(f"{where}: a background call needs an id")
                return
            self.finish(f"{where} ({st['call']})", st, call)
        elif "join" in st:
            if st["join"] not in self.calls:
                raise ScenarioError(f"{where}: no call {st['join']!r}")
            self.finish(f"{where} (join {st['join']})", st, self.calls[st["join"]])
        elif "give_up" in st:
            if st["give_up"] not in self.calls:
                raise ScenarioError(f"{where}: no call {st['give_up']!r}")
            self.give_up(self.calls[st["give_up"]])
        elif "wait_for" in st:
            within = float(st.get("within", 5.0))
            end = time.monotonic() + within
            while not self.holds(st["wait_for"]):
                if time.monotonic() > end:
                    pytest.fail(f"{where}: {st['wait_for']} did not come true within {within} s")
                time.sleep(0.005)
        elif "do" in st:
            self.server_action(where, st)
        elif "expect_received" in st:
            e = st["expect_received"]
            got = [g for n in self.names(e) for g in self.matching(n, e["match"])]
            if ("count" in e and len(got) != e["count"]) or len(got) < e.get("at_least", 0):
                want = e["count"] if "count" in e else f"at least {e['at_least']}"
                pytest.fail(f"{where}: {len(got)} requests matching {e['match']!r}, want {want}")
            if "connections" in e and len({id(c) for c, _ in got}) != e["connections"]:
                pytest.fail(f"{where}: requests matching {e['match']!r} came on "
                            f"{len({id(c) for c, _ in got})} connections, want {e['connections']}")
        elif "expect_first_lines" in st:
            e = st["expect_first_lines"]
            for n in self.names(e):
                firsts = [x for s in self.generations(n) for x in list(s.firsts.values())]
                if not firsts:
                    pytest.fail(f"{where}: server {n} got no request")
                for x in firsts:
                    if not self.vars.match(e["match"], x):
                        pytest.fail(f"{where}: a connection to {n} began with {x!r}, "
                                    f"want {e['match']!r}")

    def holds(self, c: dict[str, Any]) -> bool:
        if "lock" in c:
            lk = self.locks.get(c["lock"])
            if lk is None or "lost" not in c:
                raise ScenarioError(f"wait_for: no lock {c['lock']!r}, or no lost")
            return bool(lk.lost) == bool(c["lost"])
        names = self.names(c)
        if "received" in c:
            after = self.first_seq(c["after"]) if "after" in c else 0
            n = sum(len(self.matching(x, c["received"], after)) for x in names)
            return n >= int(c.get("count", 1))
        if "open_connections" in c:
            total = 0
            for x in names:
                s = self.server(x)
                total += s.open_conns() if s is not None else 0
            return total == int(c["open_connections"])
        if "accepted" in c:
            return sum(s.accepted for x in names for s in self.generations(x)) >= int(c["accepted"])
        if "heartbeats" in c:
            hb = sum(s.heartbeats for x in names for s in self.generations(x))
            return hb >= int(c["heartbeats"])
        raise ScenarioError(f"wait_for: no condition in {c}")

    def server_action(self, where: str, st: dict[str, Any]) -> None:
        name, do = st["server"], st["do"]
        s = self.server(name)

        def last() -> socket.socket:
            got = self.matching(name, st["on_connection_of"])
            if not got:
                pytest.fail(f"{where}: server {name} got no request matching "
                            f"{st['on_connection_of']!r}")
            return got[-1][0]

        if do == "send":
            if "on_connection_of" not in st or not st.get("lines"):
                raise ScenarioError(f"{where}: send needs on_connection_of and lines")
            assert s is not None
            s.write(last(), st["lines"])
        elif do == "cut":
            if "on_connection_of" in st:
                with contextlib.suppress(OSError):
                    last().shutdown(socket.SHUT_RDWR)
            elif s is not None:
                s.drop_all()
        elif do == "stop":
            if s is not None:
                s.close()
                self.old[name].append(s)
                self.servers[name] = None
        elif do == "start":
            if s is not None:
                raise ScenarioError(f"{where}: server {name} runs already")
            rules = self.sc["servers"][name].get("rules", [])
            self.servers[name] = ScenarioServer(self, name, rules, port=self.ports[name])
        else:
            raise ScenarioError(f"{where}: unknown server action {do!r}")

    # --- calls ---------------------------------------------------------------

    def start_call(self, where: str, st: dict[str, Any]) -> Call:
        op = st["call"]
        lock = None
        if "lock" in st:
            lock = self.locks.get(st["lock"])
            if lock is None:
                raise ScenarioError(f"{where}: no lock {st['lock']!r}")
        fn: Callable[[], Any] | None = None
        if self.sync is not None:
            fn = self._sync_fn(op, st, lock)
        coro_fn = self._aio_fn(op, st, lock) if self.sync is None else None
        if fn is None and coro_fn is None:
            raise ScenarioError(f"{where}: unknown call {op!r}")
        if fn is not None:
            fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

            run_fn = fn

            def run() -> None:
                try:
                    fut.set_result(run_fn())
                except BaseException as e:
                    fut.set_exception(e)

            t = threading.Thread(target=run, daemon=True)
            call = Call(fut, t)
            t.start()
        else:
            assert coro_fn is not None
            call = Call(self._on_loop(coro_fn()), None)
        if "id" in st:
            self.calls[st["id"]] = call
        return call

    def _acquire_args(self, st: dict[str, Any]) -> dict[str, Any]:
        args: dict[str, Any] = {"lease": float(st["lease"]), "wait": st.get("wait")}
        if "owner" in st:
            args["owner"] = self.vars.subst(st["owner"])
        if st["call"] == "acquire_shared":
            if not isinstance(st.get("permits"), int):
                raise ScenarioError(f"acquire_shared needs permits, not {st.get('permits')!r}")
            args["permits"] = st["permits"]
        elif "permits" in st:
            raise ScenarioError(f"{st['call']} takes no permits")
        return args

    def _keep(self, st: dict[str, Any], lk: Any) -> Any:
        if "id" in st:
            self.locks[st["id"]] = lk
        return lk

    def _sync_fn(self, op: str, st: dict[str, Any], lock: Any) -> Callable[[], Any] | None:
        c = self.sync
        assert c is not None
        if op == "acquire":
            return lambda: self._keep(st, c.acquire(st["key"], **self._acquire_args(st)))
        if op == "acquire_shared":
            return lambda: self._keep(st, c.acquire_shared(st["key"], **self._acquire_args(st)))
        if op == "release":
            return lambda: lock.release()
        if op == "extend":
            return lambda: lock.extend(lease=float(st["lease"]))
        if op == "keep_alive":
            return lambda: lock.keep_alive()
        if op == "lost":
            return lambda: lock.lost
        if op == "ensure_held":
            return lambda: lock.ensure_held()
        if op == "query":
            return lambda: holder_value(c.query(st["key"]))
        if op == "members":
            return lambda: c.members()
        return None

    def _aio_fn(self, op: str, st: dict[str, Any], lock: Any
                ) -> Callable[[], Coroutine[Any, Any, Any]] | None:
        c = self.aio

        async def acquire() -> Any:
            return self._keep(st, await c.acquire(st["key"], **self._acquire_args(st)))

        async def acquire_shared() -> Any:
            return self._keep(st, await c.acquire_shared(st["key"], **self._acquire_args(st)))

        async def keep_alive() -> None:
            lock.keep_alive()

        async def lost() -> bool:
            return bool(lock.lost)

        async def ensure_held() -> None:
            lock.ensure_held()

        async def query() -> Any:
            return holder_value(await c.query(st["key"]))

        fns: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
            "acquire": acquire,
            "acquire_shared": acquire_shared,
            "release": lambda: lock.release(),
            "extend": lambda: lock.extend(lease=float(st["lease"])),
            "keep_alive": keep_alive,
            "lost": lost,
            "ensure_held": ensure_held,
            "query": query,
            "members": lambda: c.members(),
        }
        return fns.get(op)

    def give_up(self, call: Call) -> None:
        """The caller gives up: the aio call's task is cancelled; a sync call's thread is
        interrupted by an exception, as a signal handler's would."""
        if call.thread is None:
            call.fut.cancel()
            return
        assert call.thread.ident is not None
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(call.thread.ident),
                                                   ctypes.py_object(GaveUp))

    def finish(self, where: str, st: dict[str, Any], call: Call) -> None:
        within = float(st.get("within", 10.0))
        try:
            value = call.fut.result(timeout=max(0.0, call.start + within - time.monotonic()))
            err: BaseException | None = None
        except (concurrent.futures.CancelledError, asyncio.CancelledError, GaveUp,
                baton.BatonError) as exc:
            # Before TimeoutError, which baton.AcquireTimeout is too.
            value, err = None, exc
        except concurrent.futures.TimeoutError:
            pytest.fail(f"{where}: no result within {within} s")
        if st.get("took_at_least") and call.took < float(st["took_at_least"]):
            pytest.fail(f"{where}: took {call.took:.3f} s, want at least {st['took_at_least']}")
        e = st.get("expect")
        if e is None:
            if err is not None:
                pytest.fail(f"{where}: {err!r}")
            return
        if "error" in e:
            if err is None:
                pytest.fail(f"{where}: no error (value {value!r}), want {e['error']}")
            if not error_is_kind(err, e["error"], e.get("code")):
                pytest.fail(f"{where}: error {err!r}, want {e['error']} {e.get('code') or ''}")
            return
        if err is not None:
            pytest.fail(f"{where}: {err!r}")
        if "token" in e and value.token != e["token"]:
            pytest.fail(f"{where}: token {value.token}, want {e['token']}")
        if "owner" in e and value.owner != self.vars.subst(e["owner"]):
            pytest.fail(f"{where}: owner {value.owner!r}, want {self.vars.subst(e['owner'])!r}")
        if "value" in e:
            want = json.loads(self.vars.subst(json.dumps(e["value"])))
            if value != want:
                pytest.fail(f"{where}: {value!r}, want {want!r}")


def holder_value(h: baton.Holder | None) -> dict[str, Any] | None:
    if h is None:
        return None
    v: dict[str, Any] = {"token": h.token}
    if h.owner is not None:
        v["owner"] = h.owner
    return v


def error_is_kind(err: BaseException, kind: str, code: str | None) -> bool:
    if kind == "Timeout":
        return isinstance(err, baton.AcquireTimeout)
    if kind == "NotHeld":
        return isinstance(err, baton.NotHeld)
    if kind == "LockLost":
        return isinstance(err, baton.LockLost)
    if kind == "Unavailable":
        return isinstance(err, baton.Unavailable)
    if kind == "Auth":
        return isinstance(err, baton.AuthError)
    if kind == "GaveUp":
        return isinstance(err, (GaveUp, concurrent.futures.CancelledError,
                                asyncio.CancelledError))
    if kind == "ServerError":
        return isinstance(err, baton.ServerError) and (code is None or err.code == code)
    return False


FILES = sorted(SCENARIOS.glob("*.json"))


def test_there_are_scenarios() -> None:
    assert len(FILES) >= 12, f"scenarios in {SCENARIOS}: {len(FILES)}"


@pytest.fixture(params=["sync", "aio"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=FILES, ids=[f.stem for f in FILES])
def scenario(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    yield load(request.param)


def test_scenario(scenario: dict[str, Any], kind: str, monkeypatch: pytest.MonkeyPatch
                  ) -> None:
    run = Run(scenario, kind, monkeypatch)
    try:
        for i, st in enumerate(scenario["steps"]):
            run.step(i, st)
        with run.mu:
            assert not run.unexpected, f"requests no rule expected: {run.unexpected}"
    finally:
        run.close()
