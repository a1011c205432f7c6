"""The synchronous client: the connection pool and the request loop."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING

from ._conn import Call, ClientClosed, Conn, ConnDown, dial
from ._core import (
    ClientBase,
    NoAnswer,
    Policy,
    Pool,
    Result,
    Retry,
    WatchLiveness,
    WatchLoop,
    WatchMoved,
    acquire_policy,
    dial_wait,
    extend_policy,
    is_badrequest,
    members_policy,
    query_policy,
    release_policy,
)
from ._errors import NotHeld, Unavailable
from ._lock import Lock
from ._protocol import (
    DEFAULT_DIAL_TIMEOUT,
    MAX_PARTIAL_LINE,
    REFRESH_INTERVAL,
    AcquireRequest,
    Answer,
    Holder,
    check_extend_answer,
    check_key,
    check_permits,
    granted_token,
    holder_from_answer,
    lease_ms,
    members_from_answer,
    parse_answer,
    pool_addresses,
    release_result,
    request_line,
)

if TYPE_CHECKING:
    from ._election import Election

__all__ = ["Client", "Holder"]

_WATCH_TICK = 0.1  # how often a watch waiting for a line looks at the clock


class Client(ClientBase):
    """A client of a baton cluster, safe to share between threads.

    It keeps one connection per address (two when given one address), sends requests
    round robin over the live ones, pipelined, and redials a lost one every 3 s in the
    background. It follows the cluster's membership (``C -``, protocol 1.3) where the
    server has it. Use it as a context manager, or call ``close``.
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
        super().__init__(addresses, secret, ssl_context, owner_prefix, dial_timeout)
        self._closed = False
        self._start_pool()
        self._watch_fork()

    def _start_pool(self) -> None:
        self._pid = os.getpid()
        self._mu = threading.Lock()
        self._changed = threading.Condition(self._mu)
        self._closing = threading.Event()
        self._pool: Pool[Conn] = Pool()
        # None: not known yet; False: the server answered C - with badrequest (before
        # protocol 1.3), or not at all, so only the periodic refresh asks again.
        self._refresh_supported: bool | None = None
        self._refresh_now = threading.Event()
        with self._mu:
            for a in pool_addresses(self._addresses):
                self._add_conn_locked(a)
        threading.Thread(target=self._refresher, name="baton-refresh", daemon=True).start()

    @property
    def _conns(self) -> list[Conn]:
        return self._pool.conns

    @property
    def _preferred(self) -> str | None:
        return self._pool.preferred

    def _reset_after_fork(self) -> None:
        # In the child: the parent's threads are gone and its locks may be held by
        # them. Drop our copies of the sockets (without shutting the parent's
        # sessions down) and start afresh.
        for c in self._pool.conns:
            c.forget()
        if self._closed:
            self._pid = os.getpid()
            self._closing = threading.Event()
            self._closing.set()
            return
        self._start_pool()

    def _add_conn_locked(self, addr: str) -> Conn:
        c = Conn(self, addr)
        self._pool.conns.append(c)
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
            conns = list(self._pool.conns)
        self._closing.set()
        self._refresh_now.set()
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
        """A connection that is up (Pool.choose says which); waits while a candidate is
        being dialled."""
        with self._mu:  # the lock of self._changed
            while True:
                if self._closed:
                    raise ClientClosed("client closed")
                if target is not None and self._pool.needs_conn(target):
                    self._add_conn_locked(target)
                    self._refresh_now.set()  # MOVED named a node the client did not know
                conn, dialing = self._pool.choose(target, avoid)
                if conn is not None:
                    return conn
                if not dialing:
                    raise self._pool.nothing_up(target)
                self._changed.wait(dial_wait(deadline))

    def _conn_count(self) -> int:
        with self._mu:
            return len(self._pool.live())

    def _on_moved(self, target: str) -> None:
        with self._mu:
            self._pool.preferred = target

    def _conn_gone(self, conn: Conn) -> None:
        """A retired connection closed: it leaves the pool."""
        with self._changed:
            if conn in self._pool.conns:
                self._pool.conns.remove(conn)
            self._changed.notify_all()

    # --- the address refresh (C -, protocol 1.3) ---------------------------

    def _conn_up(self, conn: Conn) -> None:
        if self._refresh_supported is not False:
            self._refresh_now.set()

    def _conn_lost(self, conn: Conn) -> None:
        if self._refresh_supported is not False:
            self._refresh_now.set()

    def _refresher(self) -> None:
        """Refreshes the address list from C - when asked (a connection came up or was
        lost, MOVED named an unknown node) and every 30 s."""
        closing, now_ev = self._closing, self._refresh_now
        while not closing.is_set():
            asked = now_ev.wait(REFRESH_INTERVAL)
            now_ev.clear()
            if closing.is_set():
                return
            if asked and self._refresh_supported is False:
                continue
            try:
                self._refresh()
            except BaseException:  # best effort: the next trigger tries again
                pass

    def _refresh(self) -> None:
        try:
            members = self._members(refresh=True)
        except BaseException as e:
            if is_badrequest(e) or isinstance(e, NoAnswer):
                self._refresh_supported = False
            raise
        self._refresh_supported = True
        self._apply_members(members)

    def _apply_members(self, members: list[str]) -> None:
        if not members:
            return
        with self._changed:
            if self._closed:
                return
            add, retire = self._pool.plan(members)
            for a in add:
                self._add_conn_locked(a)
            for c in retire:
                c.retire()
            self._changed.notify_all()

    def _members(self, refresh: bool) -> list[str]:
        res = self._exchange("C", "-", request_line("C", "-"), members_policy(refresh))
        return members_from_answer(res.answer)

    def members(self) -> list[str]:
        """The voters' client addresses, in priority order (``C -``, protocol 1.3). Raises
        ServerError (code ``badrequest``) against a server older than 1.3."""
        members = self._members(refresh=False)
        self._refresh_supported = True
        self._apply_members(members)
        return members

    # --- the request loop ------------------------------------------------

    def _exchange(self, op: str, key: str, line: bytes, policy: Policy) -> Result:
        """Sends the request until it gets an answer other than MOVED and the errors the
        policy retries (Retry decides). Every attempt sends the same request (an
        acquire's owner is the same on every connection it tries)."""
        self._check_fork()
        r = Retry(op, key, policy, self._conn_count, self._on_moved)
        try:
            return self._attempts(r, line)
        except BaseException:
            if r.ambiguous and policy.on_give_up is not None:
                policy.on_give_up()
            raise

    def _attempts(self, r: Retry, line: bytes) -> Result:
        op, key, policy = r.op, r.key, r.policy
        pause = self._pause
        while True:
            r.check_deadline()
            try:
                conn = self._pick(r.target, r.avoid, policy.deadline)
            except Unavailable as e:
                if isinstance(e, ClientClosed):
                    raise
                pause(r.on_pick_error(e))
                continue
            r.picked()
            line = r.next_line(line)
            call = Call(op, key)
            call.on_abandoned = policy.on_abandoned
            try:
                conn.send(call, line)
            except ConnDown:
                continue
            if not conn.wait(call, policy.answer_timeout):
                raise NoAnswer(f"{op} {key}: no answer within {policy.answer_timeout} s")
            if call.error is not None:
                pause(r.on_lost(call.error))
                continue
            ans = call.answer
            assert ans is not None
            d = r.on_answer(ans, conn.addr)
            if d is None:
                return Result(ans, r.ambiguous)
            pause(d)

    def _pause(self, d: float) -> None:
        if d > 0 and self._closing.wait(d):
            raise ClientClosed("client closed")

    def _in_background(self, fn: Callable[[], object]) -> None:
        def run() -> None:
            try:
                fn()
            except BaseException:  # nothing to report to
                pass

        t = threading.Thread(target=run, name="baton-cleanup", daemon=True)
        t.start()

    def _abandoned(self, req: AcquireRequest, ans: Answer | None) -> None:
        """An attempt of an acquire whose caller gave up was answered (ans), or its
        connection lost (None): whatever it may have been granted is released."""
        if self._closed:
            return
        if ans is None:
            self._in_background(lambda: self._clean_up(req))
            return
        token = granted_token(ans)
        if token is not None:
            self._in_background(lambda: self._release(req.key, token))

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
        return self._acquire(AcquireRequest(key, lease, wait, owner, self._owner_prefix))

    def acquire_shared(
        self,
        key: str,
        *,
        permits: int,
        lease: float,
        wait: float | None = None,
        owner: str | None = None,
    ) -> Lock:
        """Acquires one of ``permits`` shared holds of key (``S``, protocol 1.4), with a
        lease of ``lease`` seconds: a counting semaphore of ``permits``, or with a large
        ``permits`` the readers' side of a read-write lock whose writer uses ``acquire``.

        Everything else is as for ``acquire``: ``wait``, ``owner``, retries, failover and
        the clean-up of a grant after its caller gave up. The Lock's token is this grant's
        own (an identifier: other holders hold the key at the same time); its ``extend``,
        ``release`` and ``keep_alive`` act on this grant only. ``permits`` (1 to 1000000)
        must be that of the key's other shared holders and waiters: a different one raises
        ServerError with code ``badrequest``, as does an ``owner`` that holds the key
        exclusively. A cluster below version 4 (shared holds not enabled yet) answers
        ERR unavailable saying so: retried for 5 s, then Unavailable.
        """
        return self._acquire(
            AcquireRequest(key, lease, wait, owner, self._owner_prefix, check_permits(permits))
        )

    def _acquire(self, req: AcquireRequest) -> Lock:
        """acquire and acquire_shared: the request until granted, renewed when the grant
        may be older than its last attempt."""
        key, lease = req.key, req.lease
        policy = acquire_policy(
            req,
            on_abandoned=lambda ans: self._abandoned(req, ans),
            on_give_up=lambda: self._in_background(lambda: self._clean_up(req)),
        )
        may_be_old = req.explicit_owner
        while True:
            res = self._exchange(req.op, key, b"", policy)
            token = req.token(res.answer)
            if not may_be_old and not res.ambiguous:
                return Lock(self, key, token, req.owner, lease, req.sent_at)
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
            return Lock(self, key, token, req.owner, lease, renewed)

    def _clean_up(self, req: AcquireRequest) -> None:
        """Releases the grant an acquire that gave up may hold unseen (its owner's)."""
        res = self._exchange(req.op, req.key, req.cleanup_line(), release_policy())
        token = granted_token(res.answer)
        if token is not None:
            self._release(req.key, token)

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
        res = self._exchange("R", key, request_line("R", key.encode(), token), release_policy())
        return release_result(key, res.answer, res.ambiguous)

    def _extend(self, key: str, token: int, lease: float, deadline: float | None = None) -> None:
        line = request_line("K", key.encode(), token, lease_ms(lease))
        res = self._exchange("K", key, line, extend_policy(deadline))
        check_extend_answer(key, token, res.answer)

    def query(self, key: str) -> Holder | None:
        """The committed state of key: None when free, else a Holder."""
        res = self._exchange("Q", key, request_line("Q", check_key(key)), query_policy())
        return holder_from_answer(key, res.answer)

    # --- watch and election (protocol 1.4) ---------------------------------

    def watch(self, key: str) -> Generator[Holder | None, None, None]:
        """Watches the holders of key (``W``, protocol 1.4): yields the key's committed
        state at once (None when free, else a Holder), then its state after each commit
        that changes its holders, in commit order. An extend is not a change.

        The watch runs on a connection of its own, on the node that leads the key. After
        ``MOVED`` or a lost connection it is started again, on the leader, and yields the
        state it finds there (changes in between may be folded into it); while no node
        serves it, it retries with a backoff up to 1 s and yields nothing. Leaving the
        loop (or ``close()`` on the iterator) sends ``U`` and closes the connection. The
        iteration ends when the client is closed; it raises AuthError when a server
        refuses the secret, and ServerError for an ERR other than unavailable or
        overloaded (``badrequest`` from a server before 1.4).
        """
        wl = WatchLoop(key)
        self._check_fork()
        if self._closed:
            raise ClientClosed("client closed")
        return self._watch(wl)

    def _watch_addrs(self) -> list[str]:
        with self._mu:
            return [c.addr for c in self._pool.live()] or list(self._addresses)

    def _watch(self, wl: WatchLoop) -> Generator[Holder | None, None, None]:
        while not self._closing.is_set():
            addr = wl.next_addr(self._preferred, self._watch_addrs())
            try:
                sock, rest = dial(addr, self._dial_timeout, self._ssl_context, self._secret)
            except Exception as e:
                err: BaseException = e
            else:
                try:
                    yield from self._watch_on(wl, sock, rest)
                    return  # the client was closed
                except Exception as e:
                    err = e
            if isinstance(err, WatchMoved):
                self._on_moved(err.addr)
            pause = wl.ended(err)
            if pause > 0 and self._closing.wait(pause):
                return

    def _watch_on(
        self, wl: WatchLoop, sock: socket.socket, buf: bytes
    ) -> Generator[Holder | None, None, None]:
        """Runs the watch on one session until it ends there (raises why) or the client is
        closed (returns). Closing the generator sends U and closes the connection."""
        try:
            sock.settimeout(_WATCH_TICK)
            sock.sendall(wl.watch_line)
            live = WatchLiveness(time.monotonic())
            while True:
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line, buf = buf[:i], buf[i + 1 :]
                    if not line.strip():
                        continue
                    is_state, st = wl.state(parse_answer(line))
                    if is_state:
                        yield st
                if len(buf) > MAX_PARTIAL_LINE:
                    raise ConnectionError("answer line too long")
                if self._closing.is_set():
                    return
                try:
                    data = sock.recv(65536)
                except (TimeoutError, BlockingIOError):
                    data = None
                now = time.monotonic()
                if data is not None:
                    if not data:
                        raise ConnectionError("the server closed the watch's connection")
                    live.read(now)
                    buf += data
                elif live.tick(now):
                    sock.sendall(wl.probe_line)
        except GeneratorExit:
            with contextlib.suppress(OSError):
                sock.settimeout(1.0)
                sock.sendall(wl.unwatch_line)
            raise
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def election(self, key: str, *, lease: float) -> Election:
        """The leader election on key, whose leaders hold its lock with a lease of
        ``lease`` seconds (kept alive while they lead: a leader that dies is replaced
        within about a lease)."""
        from ._election import Election

        return Election(self, key, lease)
