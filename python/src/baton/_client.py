"""The synchronous client: the connection pool and the request loop."""

from __future__ import annotations

import functools
import os
import random
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

from ._conn import DIALING, UP, Call, ClientClosed, Conn, ConnDown
from ._errors import (
    AcquireTimeout,
    AuthError,
    BatonError,
    NotHeld,
    ServerError,
    Unavailable,
)
from ._lock import Lock
from ._protocol import (
    Answer,
    check_key,
    check_owner,
    check_owner_prefix,
    check_secret,
    check_wait,
    lease_ms,
    new_owner,
    request_line,
    seconds_to_ms,
)

__all__ = ["Client", "Holder"]

RELEASE_WINDOW = 5.0
RELEASE_RETRY = 0.2
UNAVAILABLE_WINDOW = 5.0
MOVED_HOPS = 3
BACKOFF_MIN = 0.025
BACKOFF_MAX = 1.0
MAX_CONNS = 64
DEFAULT_DIAL_TIMEOUT = 5.0

_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for c in list(_clients):
        c._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a key, as ``query`` reports it.

    For an exclusive holder: ``token``, ``remaining`` (seconds), ``owner`` (or None),
    ``holders`` 1 and ``permits`` 1. For shared holds (protocol 1.4) ``token``,
    ``remaining`` and ``owner`` are None.
    """

    token: int | None
    remaining: float | None
    owner: str | None
    holders: int = 1
    permits: int = 1


@dataclass(slots=True)
class _Policy:
    # Give up (Unavailable) when this deadline passes while retrying; None: never.
    deadline: float | None
    # Retry every failure this often instead of failing fast (releases).
    steady: float = 0.0
    # ERR unavailable is retried until this deadline (None: for ever).
    unavailable_deadline: float | None = None
    # Recomputes the line before each attempt (acquire's wait); may raise.
    line: Callable[[], bytes] | None = None
    # Runs, on the reader's thread, with the answer of an attempt its caller gave up.
    on_abandoned: Callable[[Answer], None] | None = None


@dataclass(slots=True)
class _Result:
    answer: Answer
    ambiguous: bool  # an earlier attempt may have taken effect


class Client:
    """A client of a baton cluster, safe to share between threads.

    It keeps one connection per address (two when given one address), sends requests
    round robin over the live ones, pipelined, and redials a lost one every 3 s in the
    background. Use it as a context manager, or call ``close``.
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        secret: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        owner_prefix: str = "",
        dial_timeout: float = DEFAULT_DIAL_TIMEOUT,
    ) -> None:
        if isinstance(addresses, str):
            addresses = [addresses]
        uniq: list[str] = []
        for a in addresses:
            a = a.strip()
            if not a or a in uniq:
                continue
            host, sep, port = a.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"bad server address {a!r}: want host:port")
            uniq.append(a)
        if not uniq:
            raise ValueError("no server address")
        if len(uniq) > MAX_CONNS // 2:
            raise ValueError(f"{len(uniq)} server addresses: at most {MAX_CONNS // 2}")
        if secret is None:
            secret = os.environ.get("BATON_AUTH") or None
        self._secret = check_secret(secret) if secret is not None else None
        self._ssl_context = ssl_context
        self._owner_prefix = check_owner_prefix(owner_prefix)
        self._dial_timeout = dial_timeout
        self._addresses = uniq if len(uniq) > 1 else uniq * 2
        self._closed = False
        self._start_pool()
        _clients.add(self)

    def _start_pool(self) -> None:
        self._pid = os.getpid()
        self._mu = threading.Lock()
        self._changed = threading.Condition(self._mu)
        self._closing = threading.Event()
        self._conns: list[Conn] = []
        self._preferred: str | None = None
        self._rr = 0
        self._background: list[threading.Thread] = []
        with self._mu:
            for a in self._addresses:
                self._add_conn_locked(a)

    def _reset_after_fork(self) -> None:
        # In the child: the parent's threads are gone and its locks may be held by
        # them. Drop our copies of the sockets (without shutting the parent's
        # sessions down) and start afresh.
        for c in self._conns:
            c.forget()
        if self._closed:
            self._pid = os.getpid()
            self._closing = threading.Event()
            self._closing.set()
            return
        self._start_pool()

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            self._reset_after_fork()

    def _add_conn_locked(self, addr: str) -> Conn:
        c = Conn(self, addr)
        self._conns.append(c)
        c.start()
        return c

    def _notify_change(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # --- life cycle ------------------------------------------------------

    def close(self) -> None:
        """Closes every connection and stops the background work. Locks stay held on the
        server until released or their lease runs out. Idempotent."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            conns = list(self._conns)
        self._closing.set()
        for c in conns:
            c.drop()
        self._notify_change()
        if self._pid == os.getpid():
            me = threading.current_thread()
            for c in conns:
                if c.thread is not me and c.thread.is_alive():
                    c.thread.join(timeout=2.0)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the pool --------------------------------------------------------

    def _pick(self, target: str | None, avoid: str | None, deadline: float | None) -> Conn:
        """A connection that is up: to target (a MOVED address), else to the preferred
        node, else any, round robin; avoid is taken only when nothing else is up. Waits
        while a candidate is being dialled."""
        with self._changed:
            while True:
                if self._closed:
                    raise ClientClosed("client closed")
                if target is not None and not any(c.addr == target for c in self._conns):
                    if len(self._conns) >= MAX_CONNS:
                        raise Unavailable(f"MOVED to {target}: too many connections")
                    self._add_conn_locked(target)
                want = target
                if want is None and self._preferred != avoid:
                    want = self._preferred
                conn, dialing = None, False
                if want is not None:
                    conn, dialing = self._choose_locked(want, None)
                if conn is None and target is None:
                    conn, d2 = self._choose_locked(None, avoid)
                    dialing = dialing or d2
                    if conn is None and not dialing and avoid is not None:
                        conn, dialing = self._choose_locked(None, None)
                if conn is not None:
                    return conn
                if not dialing:
                    for c in self._conns:
                        if (target is None or c.addr == target) and isinstance(
                            c.last_error, AuthError
                        ):
                            raise c.last_error
                    if target is not None:
                        for c in self._conns:
                            if c.addr == target:
                                c.redial_soon()
                        raise _TargetDown(f"{target}, named by MOVED, is not reachable")
                    reasons = sorted(
                        {f"{c.addr}: {c.last_error or 'not connected yet'}" for c in self._conns}
                    )
                    raise Unavailable("cannot connect: " + "; ".join(reasons))
                timeout = 0.25
                if deadline is not None:
                    timeout = min(timeout, deadline - time.monotonic())
                    if timeout <= 0:
                        raise Unavailable("no connection came up in time")
                self._changed.wait(timeout)

    def _choose_locked(self, addr: str | None, avoid: str | None) -> tuple[Conn | None, bool]:
        n = len(self._conns)
        start = self._rr % n
        self._rr += 1
        dialing = False
        for i in range(n):
            c = self._conns[(start + i) % n]
            if (addr is not None and c.addr != addr) or (avoid is not None and c.addr == avoid):
                continue
            if c.state == UP:
                return c, False
            if c.state == DIALING:
                dialing = True
        return None, dialing

    def _conn_count(self) -> int:
        with self._mu:
            return len(self._conns)

    # --- the request loop ------------------------------------------------

    def _exchange(self, op: str, key: str, line: bytes, policy: _Policy) -> _Result:
        """Sends the request until it gets an answer other than MOVED and the errors the
        policy retries. Every attempt sends the same request (an acquire's owner is the
        same on every connection it tries)."""
        self._check_fork()
        target: str | None = None
        avoid: str | None = None
        drops = 0
        hops = 0
        ambiguous = False
        backoff = BACKOFF_MIN
        last_error: BaseException | None = None

        def pause() -> None:
            nonlocal backoff
            d = policy.steady
            if d <= 0:
                d = backoff / 2 + random.uniform(0, backoff / 2)
                backoff = min(2 * backoff, BACKOFF_MAX)
            if policy.deadline is not None:
                left = policy.deadline - time.monotonic()
                if left <= 0:
                    give_up()
                d = min(d, left)
            if self._closing.wait(d):
                raise ClientClosed("client closed")

        def give_up() -> None:
            raise Unavailable(f"{op} {key}: no answer in time (last error: {last_error})")

        while True:
            if policy.deadline is not None and time.monotonic() >= policy.deadline:
                give_up()
            try:
                conn = self._pick(target, avoid, policy.deadline)
            except _TargetDown as e:
                last_error = e
                target = avoid = None
                pause()
                continue
            except Unavailable as e:
                if policy.steady <= 0:
                    raise
                last_error = e
                target = avoid = None
                pause()
                continue
            target = avoid = None
            if policy.line is not None:
                line = policy.line()
            call = Call(op, key)
            call.on_abandoned = policy.on_abandoned
            try:
                conn.send(call, line)
            except ConnDown:
                continue
            self._wait_call(call)
            if call.error is not None:
                err = call.error
                if isinstance(err, (ClientClosed, AuthError)):
                    raise err
                last_error = err
                ambiguous = True
                drops += 1
                if policy.steady > 0:
                    pause()
                elif drops >= self._conn_count():
                    raise Unavailable(f"{op} {key}: {err}") from err
                continue
            ans = call.answer
            assert ans is not None
            if ans.status == "MOVED" and ans.values:
                target = ans.values[0]
                with self._mu:
                    self._preferred = target
                last_error = BatonError(f"MOVED {target}")
                hops += 1
                if hops > MOVED_HOPS:
                    pause()
                continue
            if ans.status == "ERR":
                code = ans.values[0] if ans.values else ""
                se = ServerError(code, ans.text)
                if code != "unavailable" and not (code == "overloaded" and policy.steady > 0):
                    raise se
                last_error = se
                ambiguous = True
                if code == "unavailable":
                    avoid = conn.addr
                    ud = policy.unavailable_deadline
                    if ud is not None and time.monotonic() >= ud and policy.steady <= 0:
                        raise Unavailable(f"{op} {key}: {se}") from se
                pause()
                continue
            return _Result(ans, ambiguous)

    def _wait_call(self, call: Call) -> None:
        """Waits for the call's answer. If the caller is interrupted (KeyboardInterrupt,
        an exception from a signal handler), the call keeps its place in the pairing and
        its answer is handled by call.on_abandoned when it comes."""
        try:
            while not call.done.wait(1.0):
                pass
        except BaseException:
            if call.abandon():
                raise
            # The answer came meanwhile: hand it to the clean-up as well.
            if call.answer is not None and call.on_abandoned is not None:
                call.on_abandoned(call.answer)
            raise

    def _in_background(self, fn: Callable[[], object]) -> None:
        def run() -> None:
            try:
                fn()
            except BaseException:  # nothing to report to
                pass

        t = threading.Thread(target=run, name="baton-cleanup", daemon=True)
        t.start()

    def _release_abandoned(self, key: str, ans: Answer) -> None:
        if ans.op == "A" and ans.status == "OK" and ans.values and not self._closed:
            token = int(ans.values[0])
            self._in_background(lambda: self._release(key, token))

    # --- requests ----------------------------------------------------------

    def acquire(
        self,
        key: str,
        *,
        lease: float,
        wait: float | None = None,
        owner: str | None = None,
    ) -> Lock:
        """Acquires the lock on key, with a lease of ``lease`` seconds.

        ``wait=None`` waits for ever, ``wait=0`` tries once, otherwise at most ``wait``
        seconds; raises AcquireTimeout when not granted in time. ``owner`` names the owner
        (by default a fresh random one after the client's owner_prefix), which every retry
        of this acquire sends again.
        """
        kraw = check_key(key)
        lms = lease_ms(lease)
        check_wait(wait)
        explicit = owner is not None
        own = owner if owner is not None else new_owner(self._owner_prefix)
        oraw = check_owner(own)
        wait_end = None if wait is None or wait == 0 else time.monotonic() + wait
        sent_at = 0.0

        def line() -> bytes:
            nonlocal sent_at
            sent_at = time.monotonic()
            if wait == 0:
                wms = -1
            elif wait_end is None:
                wms = 0
            else:
                left = wait_end - sent_at
                if left <= 0:
                    raise AcquireTimeout(f"acquire {key}: not granted within {wait} s")
                wms = seconds_to_ms(left)
            return request_line("A", kraw, lms, wms, oraw)

        policy = _Policy(
            deadline=None,
            unavailable_deadline=wait_end if wait != 0 else time.monotonic(),
            line=line,
            on_abandoned=lambda ans: self._release_abandoned(key, ans),
        )
        may_be_old = explicit
        while True:
            res = self._exchange("A", key, b"", policy)
            ans = res.answer
            if ans.status == "TIMEOUT":
                raise AcquireTimeout(f"acquire {key}: not granted in time")
            if ans.status != "OK" or not ans.values:
                raise BatonError(f"acquire {key}: unexpected answer {ans.status}")
            token = int(ans.values[0])
            if not may_be_old and not res.ambiguous:
                return Lock(self, key, token, own, lease, sent_at)
            # The grant may be older than the last attempt (an earlier attempt got it, or
            # the caller's owner held the key before): renew it so that its lease is known.
            renewed = time.monotonic()
            try:
                self._extend(key, token, lease)
            except NotHeld:
                may_be_old = False  # it ran out meanwhile: ask again, as a new acquire
                continue
            except BaseException:
                self._in_background(functools.partial(self._release, key, token))
                raise
            return Lock(self, key, token, own, lease, renewed)

    @contextmanager
    def lock(
        self,
        key: str,
        *,
        lease: float,
        wait: float | None = None,
        owner: str | None = None,
    ) -> Iterator[Lock]:
        """``with client.lock(key, lease=...) as lock:`` acquires the lock (raising, and
        never entering the block, when it is not granted), keeps it alive while inside,
        and releases it at exit."""
        lk = self.acquire(key, lease=lease, wait=wait, owner=owner)
        try:
            lk.keep_alive()
            lk.ensure_held()
            yield lk
        finally:
            lk.release()

    def _release(self, key: str, token: int) -> bool:
        """True: the grant no longer holds the key (OK, or NOTHELD to a retry).
        False: NOTHELD to the first attempt. Raises Unavailable after 5 s."""
        now = time.monotonic()
        res = self._exchange(
            "R",
            key,
            request_line("R", key.encode(), token),
            _Policy(deadline=now + RELEASE_WINDOW, steady=RELEASE_RETRY),
        )
        if res.answer.status == "OK":
            return True
        if res.answer.status == "NOTHELD":
            return res.ambiguous
        raise BatonError(f"release {key}: unexpected answer {res.answer.status}")

    def _extend(self, key: str, token: int, lease: float, deadline: float | None = None) -> None:
        lms = lease_ms(lease)
        now = time.monotonic()
        window = now + UNAVAILABLE_WINDOW
        res = self._exchange(
            "K",
            key,
            request_line("K", key.encode(), token, lms),
            _Policy(
                deadline=deadline,
                unavailable_deadline=window if deadline is None else min(window, deadline),
            ),
        )
        if res.answer.status == "NOTHELD":
            raise NotHeld(f"extend {key}: token {token} no longer holds the key")
        if res.answer.status != "OK":
            raise BatonError(f"extend {key}: unexpected answer {res.answer.status}")

    def query(self, key: str) -> Holder | None:
        """The committed state of key: None when free, else a Holder."""
        kraw = check_key(key)
        res = self._exchange(
            "Q",
            key,
            request_line("Q", kraw),
            _Policy(deadline=None, unavailable_deadline=time.monotonic() + UNAVAILABLE_WINDOW),
        )
        ans = res.answer
        if ans.status == "FREE":
            return None
        if ans.status == "HELD" and len(ans.values) >= 2:
            owner = ans.values[2] if len(ans.values) > 2 else None
            return Holder(int(ans.values[0]), int(ans.values[1]) / 1000.0, owner)
        if ans.status == "SHARED" and len(ans.values) >= 2:
            return Holder(None, None, None, int(ans.values[0]), int(ans.values[1]))
        raise BatonError(f"query {key}: unexpected answer {ans.status}")


class _TargetDown(Unavailable):
    pass

