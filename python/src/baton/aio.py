"""The asyncio client of baton: ``baton.aio.Client``, the same client as ``baton.Client``
with coroutines.

    import baton.aio

    async with baton.aio.Client(["10.0.0.1:7700", "10.0.0.2:7700"]) as client:
        async with client.lock("deploy/prod", lease=10.0) as lock:
            ...  # kept alive while inside; released at exit

Cancellation is safe everywhere: a cancelled acquire leaves nothing held (a grant that
arrives after it was cancelled is released), a cancelled release goes on in the background
until the server confirmed it (or 5 s passed), and ``async with client.lock(...)`` never
enters its block without the lock. A client belongs to the event loop it is first used on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections.abc import AsyncGenerator, Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from ._aioconn import Call, Conn, ConnDown, dial
from ._core import (
    ClientBase,
    ElectionBase,
    LeaderFilter,
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
from ._errors import (
    AcquireTimeout,
    AuthError,
    BatonError,
    LockLost,
    NotHeld,
    ServerError,
    Unavailable,
)
from ._lock import KEEP_ALIVE_RETRY, LockBase
from ._pairing import ClientClosed
from ._protocol import (
    DEFAULT_DIAL_TIMEOUT,
    REFRESH_INTERVAL,
    RELEASE_WINDOW,
    AcquireRequest,
    Answer,
    Holder,
    Leader,
    check_extend_answer,
    check_key,
    check_permits,
    granted_token,
    holder_from_answer,
    leader_of,
    lease_ms,
    members_from_answer,
    parse_answer,
    pool_addresses,
    release_result,
    request_line,
)

__all__ = [
    "AcquireTimeout",
    "AuthError",
    "BatonError",
    "Client",
    "Election",
    "Holder",
    "Leader",
    "Lock",
    "LockLost",
    "NotHeld",
    "ServerError",
    "Unavailable",
]

T = TypeVar("T")

_WATCH_TICK = 0.25  # how often a watch waiting for a line looks at the clock


class Client(ClientBase):
    """An asyncio client of a baton cluster (the sync ``baton.Client``'s behaviour, with
    coroutines). Connections open in the background on first use; use ``async with``, or
    await ``close``."""

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
        self._closed = False  # close was called: no new request (but the client's own)
        self._closing = False  # the connections are being closed: no request at all
        self._start_process()
        self._watch_fork()

    def _start_process(self) -> None:
        """The state of this process's connections and tasks, bound to no loop yet."""
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: Pool[Conn] = Pool()
        self._closing_ev = asyncio.Event()
        self._changed = asyncio.Event()
        # Work that must outlive its caller: releases (of a cancelled release, of a grant
        # nobody waits for), clean-ups of acquires that gave up. close waits for them.
        self._tasks: set[asyncio.Task[Any]] = set()
        self._keepalives: set[asyncio.Task[None]] = set()
        # Lock releases under way in their callers' tasks (Client._release_lock): close
        # waits for them too.
        self._releasing: set[asyncio.Future[bool]] = set()
        self._refresher: asyncio.Task[None] | None = None
        # None: not known yet; False: the server answered C - with badrequest (before
        # protocol 1.3), or not at all, so only the periodic refresh asks again.
        self._refresh_supported: bool | None = None
        self._refresh_now = asyncio.Event()

    def _reset_after_fork(self) -> None:
        # In a child after fork: the parent's loop, tasks and connections are the
        # parent's. Close this process's copies of the sockets (without a shutdown, and
        # without the parent's loop, whose epoll set the child shares: the parent's
        # sessions go on) and start afresh, on the loop the child runs.
        for c in self._pool.conns:
            c.forget()
        self._start_process()
        if self._closed:
            self._closing = True

    def _start(self) -> None:
        """Binds the client to the running loop and opens the connections, on first use."""
        self._check_fork()
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            raise RuntimeError("a baton.aio.Client is used on the event loop it started on")
        if self._closed:
            raise ClientClosed("client closed")
        self._loop = loop
        for a in pool_addresses(self._addresses):
            self._add_conn(a)
        self._refresher = loop.create_task(self._refresh_loop(), name="baton-refresh")

    def _add_conn(self, addr: str) -> Conn:
        c = Conn(self, addr)
        self._pool.conns.append(c)
        c.start()
        return c

    def _notify_change(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Runs coro as a task of the client's, which close waits for."""
        self._check_fork()
        loop = self._loop or asyncio.get_running_loop()
        t = loop.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(_forget(self._tasks))
        return t

    # --- life cycle ------------------------------------------------------

    async def close(self) -> None:
        """Closes every connection and stops the background work, after the releases
        under way finished (each within its 5 s). Locks stay held on the server until
        released or their lease runs out. Idempotent."""
        self._check_fork()
        if self._closed:
            return
        self._closed = True
        if self._loop is None:
            self._closing = True
            return
        me = asyncio.current_task()
        for t in list(self._keepalives):
            t.cancel()
        pending: list[asyncio.Future[Any]] = [t for t in self._tasks if t is not me]
        pending += self._releasing
        if pending:
            await asyncio.wait(pending, timeout=RELEASE_WINDOW + 1.0)
        self._closing = True
        self._closing_ev.set()
        tasks: list[asyncio.Task[Any]] = [t for t in self._keepalives if t is not me]
        for c in list(self._pool.conns):
            c.drop()
            if c.task is not None:
                c.task.cancel()
                tasks.append(c.task)
        if self._refresher is not None:
            self._refresher.cancel()
            tasks.append(self._refresher)
        for t in list(self._tasks):
            if t is not me:
                t.cancel()
                tasks.append(t)
        self._notify_change()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> Client:
        self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- the pool --------------------------------------------------------

    async def _pick(
        self, target: str | None, avoid: str | None, deadline: float | None, own: bool = False
    ) -> Conn:
        """A connection that is up (Pool.choose says which); waits while a candidate is
        being dialled."""
        while True:
            self._check_open(own)
            if target is not None and self._pool.needs_conn(target):
                self._add_conn(target)
                self._refresh_now.set()  # MOVED named a node the client did not know
            conn, dialing = self._pool.choose(target, avoid)
            if conn is not None:
                return conn
            if not dialing:
                raise self._pool.nothing_up(target)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(dial_wait(deadline)):
                    await self._changed.wait()

    def _check_open(self, own: bool = False) -> None:
        """Raises ClientClosed once close was called, but for the client's own work (the
        releases close waits for: own, or run by its tasks) until the connections close."""
        if self._closing or (
            self._closed and not own and asyncio.current_task() not in self._tasks
        ):
            raise ClientClosed("client closed")

    def _conn_count(self) -> int:
        return len(self._pool.live())

    def _on_moved(self, target: str) -> None:
        self._pool.preferred = target

    def _conn_gone(self, conn: Conn) -> None:
        """A retired connection closed: it leaves the pool."""
        if conn in self._pool.conns:
            self._pool.conns.remove(conn)
        self._notify_change()

    # --- the address refresh (C -, protocol 1.3) ---------------------------

    def _conn_up(self, conn: Conn) -> None:
        if self._refresh_supported is not False:
            self._refresh_now.set()

    def _conn_lost(self, conn: Conn) -> None:
        if self._refresh_supported is not False:
            self._refresh_now.set()

    async def _refresh_loop(self) -> None:
        """Refreshes the address list from C - when asked (a connection came up or was
        lost, MOVED named an unknown node) and every 30 s."""
        while not self._closed:
            asked = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REFRESH_INTERVAL):
                    await self._refresh_now.wait()
                    asked = True
            self._refresh_now.clear()
            if self._closed:
                return
            if asked and self._refresh_supported is False:
                continue
            with contextlib.suppress(Exception):  # best effort: the next trigger retries
                await self._refresh()

    async def _refresh(self) -> None:
        try:
            members = await self._members(refresh=True)
        except Exception as e:
            if is_badrequest(e) or isinstance(e, NoAnswer):
                self._refresh_supported = False
            raise
        self._refresh_supported = True
        self._apply_members(members)

    def _apply_members(self, members: list[str]) -> None:
        if not members or self._closed:
            return
        add, retire = self._pool.plan(members)
        for a in add:
            self._add_conn(a)
        for c in retire:
            c.retire()
        self._notify_change()

    async def _members(self, refresh: bool) -> list[str]:
        res = await self._exchange("C", "-", request_line("C", "-"), members_policy(refresh))
        return members_from_answer(res.answer)

    async def members(self) -> list[str]:
        """The voters' client addresses, in priority order (``C -``, protocol 1.3). Raises
        ServerError (code ``badrequest``) against a server older than 1.3."""
        members = await self._members(refresh=False)
        self._refresh_supported = True
        self._apply_members(members)
        return members

    # --- the request loop ------------------------------------------------

    async def _exchange(self, op: str, key: str, line: bytes, policy: Policy) -> Result:
        """Sends the request until it gets an answer other than MOVED and the errors the
        policy retries (Retry decides, as for the sync client)."""
        self._start()
        r = Retry(op, key, policy, self._conn_count, self._on_moved)
        try:
            return await self._attempts(r, line)
        except BaseException:
            if r.ambiguous and policy.on_give_up is not None:
                policy.on_give_up()
            raise

    async def _attempts(self, r: Retry, line: bytes, run: _Run | None = None) -> Result:
        """The attempts of one request. With run, the request is work that close waits for,
        and a task that is cancelled while it runs leaves its state in run, so that another
        task goes on from there (run.call: an attempt sent, whose answer is awaited)."""
        op, key, policy = r.op, r.key, r.policy
        own = run is not None
        loop = asyncio.get_running_loop()
        while True:
            if run is not None and run.call is not None:
                call, addr = run.call, run.addr
            else:
                r.check_deadline()
                try:
                    conn = await self._pick(r.target, r.avoid, policy.deadline, own)
                except Unavailable as e:
                    if isinstance(e, ClientClosed):
                        raise
                    await self._pause(r.on_pick_error(e), own)
                    continue
                r.picked()
                line = r.next_line(line)
                call = Call(op, key, loop)
                call.on_abandoned = policy.on_abandoned
                try:
                    conn.send(call, line)
                except ConnDown:
                    continue
                addr = conn.addr
                if run is not None:
                    run.call, run.addr = call, addr
            try:
                await call.wait(policy.answer_timeout, keep=own)
            except TimeoutError:
                raise NoAnswer(f"{op} {key}: no answer within {policy.answer_timeout} s") from None
            if run is not None:
                run.call = None
            if call.error is not None:
                await self._pause(r.on_lost(call.error), own)
                continue
            ans = call.answer
            assert ans is not None
            d = r.on_answer(ans, addr)
            if d is None:
                return Result(ans, r.ambiguous)
            await self._pause(d, own)

    async def _pause(self, d: float, own: bool = False) -> None:
        if d <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(d):
                await self._closing_ev.wait()
        self._check_open(own)

    def _abandoned(self, req: AcquireRequest, ans: Answer | None) -> None:
        """An attempt of an acquire whose caller gave up was answered (ans), or its
        connection lost (None): whatever it may have been granted is released."""
        if self._closing:
            return
        if ans is None:
            self._spawn(self._clean_up(req))
            return
        token = granted_token(ans)
        if token is not None:
            self._spawn(self._release(req.key, token))

    # --- requests ----------------------------------------------------------

    async def acquire(
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
        of this acquire sends again. Cancelled, it leaves nothing held: a grant that comes
        after is released.
        """
        return await self._acquire(AcquireRequest(key, lease, wait, owner, self._owner_prefix))

    async def acquire_shared(
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

        Everything else is as for ``acquire`` (cancelled, it leaves nothing held). The
        Lock's token is this grant's own; its ``extend``, ``release`` and ``keep_alive``
        act on this grant only. A ``permits`` (1 to 1000000) other than that of the key's
        other shared holders and waiters raises ServerError with code ``badrequest``, as
        does an ``owner`` that holds the key exclusively. A cluster below version 4
        answers ERR unavailable saying so: retried for 5 s, then Unavailable.
        """
        return await self._acquire(
            AcquireRequest(key, lease, wait, owner, self._owner_prefix, check_permits(permits))
        )

    async def _acquire(self, req: AcquireRequest) -> Lock:
        """acquire and acquire_shared: the request until granted, renewed when the grant
        may be older than its last attempt."""
        key, lease = req.key, req.lease
        policy = acquire_policy(
            req,
            on_abandoned=lambda ans: self._abandoned(req, ans),
            on_give_up=lambda: self._give_up_acquire(req),
        )
        may_be_old = req.explicit_owner
        while True:
            res = await self._exchange(req.op, key, b"", policy)
            token = req.token(res.answer)
            if not may_be_old and not res.ambiguous:
                return Lock(self, key, token, req.owner, lease, req.sent_at)
            # The grant may be older than the last attempt (an earlier attempt got it, or
            # the caller's owner held the key before): renew it so that its lease is known.
            renewed = time.monotonic()
            try:
                await self._extend(key, token, lease)
            except NotHeld:
                may_be_old = False  # it ran out meanwhile: ask again, as a new acquire
                continue
            except BaseException:
                if not self._closing:
                    self._spawn(self._release(key, token))
                raise
            return Lock(self, key, token, req.owner, lease, renewed)

    def _give_up_acquire(self, req: AcquireRequest) -> None:
        if not self._closing:
            self._spawn(self._clean_up(req))

    async def _clean_up(self, req: AcquireRequest) -> None:
        """Releases the grant an acquire that gave up may hold unseen (its owner's)."""
        res = await self._exchange(req.op, req.key, req.cleanup_line(), release_policy())
        token = granted_token(res.answer)
        if token is not None:
            await self._release(req.key, token)

    def lock(
        self,
        key: str,
        *,
        lease: float,
        wait: float | None = None,
        owner: str | None = None,
    ) -> LockContext:
        """``async with client.lock(key, lease=...) as lock:`` acquires the lock (raising,
        and never entering the block, when it is not granted), keeps it alive while inside,
        and releases it at exit."""
        return LockContext(self, key, lease, wait, owner)

    async def _release_lock(self, lock: Lock) -> bool:
        """Lock.release's run. It runs in the caller's task (no task to start and await,
        which would cost rounds of the event loop); when the caller is cancelled, a task
        of the client's goes on from where it was (the attempt sent keeps its place), and
        the lock's later release() calls, and close, wait for it."""
        self._start()
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[bool] = loop.create_future()
        lock._release_task = outcome
        self._releasing.add(outcome)
        outcome.add_done_callback(_forget(self._releasing))
        key, token = lock.key, lock.token
        r = Retry("R", key, release_policy(), self._conn_count, self._on_moved)
        line = request_line("R", key.encode(), token)
        run = _Run()

        async def rest() -> bool:
            res = await self._attempts(r, line, run)
            return lock._released_as(release_result(key, res.answer, res.ambiguous))

        try:
            ok = await rest()
        except asyncio.CancelledError:
            if self._closing:
                outcome.cancel()
            else:
                _settle_with(outcome, self._spawn(rest()))
            raise
        except BaseException as e:
            outcome.set_exception(e)
            raise
        outcome.set_result(ok)
        return ok

    async def _release(self, key: str, token: int) -> bool:
        """True: the grant no longer holds the key (OK, or NOTHELD to a retry).
        False: NOTHELD to the first attempt. Raises Unavailable after 5 s."""
        line = request_line("R", key.encode(), token)
        res = await self._exchange("R", key, line, release_policy())
        return release_result(key, res.answer, res.ambiguous)

    async def _extend(
        self, key: str, token: int, lease: float, deadline: float | None = None
    ) -> None:
        line = request_line("K", key.encode(), token, lease_ms(lease))
        res = await self._exchange("K", key, line, extend_policy(deadline))
        check_extend_answer(key, token, res.answer)

    async def query(self, key: str) -> Holder | None:
        """The committed state of key: None when free, else a Holder."""
        res = await self._exchange("Q", key, request_line("Q", check_key(key)), query_policy())
        return holder_from_answer(key, res.answer)

    # --- watch and election (protocol 1.4) ---------------------------------

    def watch(self, key: str) -> AsyncGenerator[Holder | None, None]:
        """Watches the holders of key (``W``, protocol 1.4): ``async for`` gets the key's
        committed state at once (None when free, else a Holder), then its state after each
        commit that changes its holders, in commit order. An extend is not a change.

        The watch runs on a connection of its own, on the node that leads the key. After
        ``MOVED`` or a lost connection it is started again, on the leader, and yields the
        state it finds there (changes in between may be folded into it); while no node
        serves it, it retries with a backoff up to 1 s and yields nothing. ``aclose()``
        (or leaving ``async for``: then when the generator is finalized; wrap it in
        ``contextlib.aclosing`` to end it at once) sends ``U`` and closes the connection.
        The iteration ends when the client is closed; it raises AuthError when a server
        refuses the secret, and ServerError for an ERR other than unavailable or
        overloaded (``badrequest`` from a server before 1.4).
        """
        wl = WatchLoop(key)
        self._check_fork()
        if self._closed:
            raise ClientClosed("client closed")
        return self._watch(wl)

    async def _watch(self, wl: WatchLoop) -> AsyncGenerator[Holder | None, None]:
        self._start()
        while not self._closed:
            addrs = [c.addr for c in self._pool.live()] or list(self._addresses)
            addr = wl.next_addr(self._pool.preferred, addrs)
            try:
                _, reader, writer = await dial(
                    addr, self._dial_timeout, self._ssl_context, self._secret
                )
            except Exception as e:
                err: BaseException = e
            else:
                try:
                    # aclosing: closing this generator closes the session's (which sends U).
                    async with contextlib.aclosing(self._watch_on(wl, reader, writer)) as it:
                        async for st in it:
                            yield st
                    return  # the client was closed
                except Exception as e:
                    err = e
            if isinstance(err, WatchMoved):
                self._on_moved(err.addr)
            pause = wl.ended(err)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await self._closing_ev.wait()

    async def _watch_on(
        self, wl: WatchLoop, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> AsyncGenerator[Holder | None, None]:
        """Runs the watch on one session until it ends there (raises why) or the client is
        closed (returns). Closing the generator sends U and closes the connection."""
        try:
            writer.write(wl.watch_line)
            live = WatchLiveness(time.monotonic())
            while not self._closed:
                try:
                    async with asyncio.timeout(_WATCH_TICK):
                        line = await reader.readuntil(b"\n")
                except TimeoutError:
                    if live.tick(time.monotonic()):
                        writer.write(wl.probe_line)
                    continue
                except asyncio.IncompleteReadError:
                    raise ConnectionError("the server closed the watch's connection") from None
                except asyncio.LimitOverrunError:
                    raise ConnectionError("answer line too long") from None
                live.read(time.monotonic())
                line = line[:-1]
                if not line.strip():
                    continue
                is_state, st = wl.state(parse_answer(line))
                if is_state:
                    yield st
        except GeneratorExit:
            with contextlib.suppress(Exception):
                writer.write(wl.unwatch_line)
            raise
        finally:
            writer.close()  # sends what is buffered (U), then closes

    def election(self, key: str, *, lease: float) -> Election:
        """The leader election on key, whose leaders hold its lock with a lease of
        ``lease`` seconds (kept alive while they lead: a leader that dies is replaced
        within about a lease)."""
        return Election(self, key, lease)


class Election(ElectionBase):
    """Leader election on one key (the sync ``baton.Election``'s behaviour, with
    coroutines): the leader is the holder of the key's lock, and its value is the owner
    its acquire named. The leader's lock is kept alive; its ``lost`` and
    ``ensure_held()`` tell when leadership is lost. Made by ``Client.election``."""

    def __init__(self, client: Client, key: str, lease: float) -> None:
        super().__init__(key, lease)
        self._client = client

    async def campaign(self, value: str, *, wait: float | None = None) -> Lock:
        """Waits until this candidate leads (for ever with ``wait=None``, else at most
        ``wait`` seconds: AcquireTimeout) and returns its leadership: a lock of the key
        with ``value`` as its owner, kept alive (a task). ``release()`` resigns, and the
        next candidate in line leads. Cancelled, it leaves nothing held."""
        lk = await self._client.acquire(self._key, lease=self._lease, wait=wait, owner=value)
        lk.keep_alive()
        return lk

    async def leader(self) -> Leader | None:
        """Who leads now (committed), or None when nobody does."""
        return leader_of(await self._client.query(self._key))

    def observe(self) -> AsyncGenerator[Leader | None, None]:
        """``async for`` gets who leads now, then each change of leader, None when nobody
        leads. A leader seen again after the watch was started anew is not yielded twice
        in a row. ``aclose()`` ends the watch under it."""
        return self._observe(self._client.watch(self._key))

    async def _observe(
        self, states: AsyncGenerator[Holder | None, None]
    ) -> AsyncGenerator[Leader | None, None]:
        flt = LeaderFilter()
        async with contextlib.aclosing(states) as it:
            async for st in it:
                send, ld = flt.feed(st)
                if send:
                    yield ld


class Lock(LockBase):
    """One grant of a key, as ``Client.acquire`` returns it; ``async with`` releases it
    at exit.

    The client tracks the lease with its own clock, conservatively: from when the
    acquire (or the last confirmed extend) was sent, not from when the server granted it.
    """

    def __init__(
        self, client: Client, key: str, token: int, owner: str, lease: float, since: float
    ) -> None:
        super().__init__(key, token, owner, lease, since)
        self._client = client
        self._ka_task: asyncio.Task[None] | None = None
        # The release under way or done (Client._release_lock), for later release() calls.
        self._release_task: asyncio.Future[bool] | None = None

    async def extend(self, *, lease: float) -> None:
        """Sets the lease to ``lease`` seconds from now; a running keep-alive renews this
        new lease from then on. Raises NotHeld (and the lock counts as lost) when the grant
        no longer holds the key."""
        self._check_not_released()
        await self._extend(lease, None)

    async def _extend(self, lease: float, deadline: float | None) -> None:
        sent = time.monotonic()
        try:
            await self._client._extend(self._key, self._token, lease, deadline)
        except NotHeld:
            self._mark_lost()
            raise
        self._extended(sent, lease)

    async def release(self) -> bool:
        """Releases the lock (sending its token, so it can never free someone else's grant)
        and stops the keep-alive.

        Returns True once this grant no longer holds the key, False when it had already
        lost it. Retried every 200 ms for 5 s when no connection serves it; then raises
        Unavailable. A second release after a successful one returns True.

        The release runs as a task of its own: cancelling the caller does not stop it
        (it goes on until the server confirmed it, or 5 s passed), and a release called
        meanwhile waits for the same one.
        """
        self._stop_keep_alive()
        done = self._release_done()
        if done is not None:
            return done
        t = _ours(self._release_task)
        if t is None or (t.done() and (t.cancelled() or t.exception() is not None)):
            return await self._client._release_lock(self)
        return await asyncio.shield(t)

    def keep_alive(self) -> None:
        """Starts a task that extends the lease every lease/3 until the lock is released
        or lost, and returns at once. Calling it again does nothing."""
        if _ours(self._ka_task) is not None or self._keep_alive_due() is None:
            return
        client = self._client
        client._start()
        t = asyncio.get_running_loop().create_task(
            self._keep_alive(), name=f"baton-keepalive-{self._key}"
        )
        self._ka_task = t
        client._keepalives.add(t)
        t.add_done_callback(_forget(client._keepalives))

    def _stop_keep_alive(self) -> None:
        t = _ours(self._ka_task)
        if t is not None and t is not asyncio.current_task():
            t.cancel()

    async def _keep_alive(self) -> None:
        client = self._client
        try:
            while True:
                due = self._keep_alive_due()
                if due is None:
                    return
                lease, expires, next_at = due
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                while True:
                    if client._closed or time.monotonic() >= expires:
                        self._mark_lost()
                        return
                    try:
                        await self._extend(lease, expires)
                        break
                    except NotHeld:
                        return  # _extend marked it lost
                    except BatonError:
                        pass
                    await asyncio.sleep(KEEP_ALIVE_RETRY)
        except asyncio.CancelledError:
            if client._closed:
                self._mark_lost()  # as the sync client: nothing keeps it alive any more
            raise

    async def __aenter__(self) -> Lock:
        self.ensure_held()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()


class LockContext:
    """What ``Client.lock`` returns: ``async with`` acquires, keeps alive and releases."""

    def __init__(
        self, client: Client, key: str, lease: float, wait: float | None, owner: str | None
    ) -> None:
        self._client = client
        self._key = key
        self._lease = lease
        self._wait = wait
        self._owner = owner
        self._lock: Lock | None = None

    async def __aenter__(self) -> Lock:
        lk = await self._client.acquire(
            self._key, lease=self._lease, wait=self._wait, owner=self._owner
        )
        # No await between the grant and the block: a cancellation lands either in the
        # acquire (which then leaves nothing held) or in the block (which releases).
        try:
            lk.keep_alive()
            lk.ensure_held()
        except BaseException:
            self._client._spawn(lk.release())
            raise
        self._lock = lk
        return lk

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lk, self._lock = self._lock, None
        if lk is not None:
            await lk.release()


def _ours(task: asyncio.Future[T] | None) -> asyncio.Future[T] | None:
    """task, unless it runs on another loop than the running one: a lock's keep-alive or
    release started before a fork is the parent's, and the child leaves it alone."""
    if task is not None and task.get_loop() is not asyncio.get_running_loop():
        return None
    return task


class _Run:
    """What a request run by _attempts for work that close waits for (a lock's release)
    leaves to the task that goes on with it: the attempt sent, whose answer is awaited."""

    __slots__ = ("addr", "call")

    def __init__(self) -> None:
        self.call: Call | None = None
        self.addr = ""


def _settle_with(outcome: asyncio.Future[T], task: asyncio.Task[T]) -> None:
    """Settles outcome as task ends."""

    def done(t: asyncio.Task[T]) -> None:
        if outcome.done():
            return
        if t.cancelled():
            outcome.cancel()
        elif (e := t.exception()) is not None:
            outcome.set_exception(e)
        else:
            outcome.set_result(t.result())

    task.add_done_callback(done)


def _forget(tasks: set[Any]) -> Any:
    """A done callback that drops a finished task (or future) from tasks and reads its
    exception (so that nobody is told it was never retrieved)."""

    def done(t: asyncio.Future[Any]) -> None:
        tasks.discard(t)
        if not t.cancelled():
            t.exception()

    return done
