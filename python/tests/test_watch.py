"""Watch (W, U) and leader election, sync and asyncio, against real batond processes."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import signal
import threading
from collections.abc import AsyncGenerator, Generator
from typing import Any

import pytest
from servers import Node, Proxy, leader, wait_for, wait_until

import baton
import baton.aio

ITEM_TIMEOUT = 10.0  # a watch item that should come comes within this


class Watcher:
    """Consumes a sync watch (or observe) on a thread of its own, so that the test waits
    for each item with a time limit. The iteration ends when the client closes."""

    def __init__(self, it: Generator[Any, None, None]) -> None:
        self.q: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(it,), daemon=True)
        self.thread.start()

    def _run(self, it: Generator[Any, None, None]) -> None:
        try:
            for st in it:
                self.q.put(("item", st))
            self.q.put(("end", None))
        except BaseException as e:
            self.q.put(("error", e))

    def next(self, timeout: float = ITEM_TIMEOUT) -> Any:
        try:
            kind, v = self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no watch item within {timeout}s") from None
        if kind == "error":
            raise v
        assert kind == "item", f"the watch ended ({kind})"
        return v


def watch_pair(proxy: Proxy, key: str) -> Any:
    """The proxy's connection that carried W <key>."""
    found: list[Any] = []

    def look() -> bool:
        with proxy.mu:
            found[:] = [p for p in proxy.pairs if f"W {key}" in p.requests]
        return bool(found)

    wait_for(look, 5.0, f"W {key} through the proxy")
    return found[0]


def stop(node: Node, how: str) -> None:
    assert node.proc is not None
    if how == "term":
        node.proc.send_signal(signal.SIGTERM)  # a graceful stop: hands leadership over
    else:
        node.proc.kill()
    node.proc.wait(timeout=20)


# --- sync ------------------------------------------------------------------


def test_watch_grant_release_and_extend(node: Node) -> None:
    with baton.Client(node.addr) as client, baton.Client(node.addr) as other:
        w = Watcher(client.watch("w/1"))
        assert w.next() is None  # free
        lk = other.acquire("w/1", lease=10.0, owner="alice")
        h = w.next()
        assert isinstance(h, baton.Holder)
        assert (h.token, h.owner, h.holders, h.permits) == (lk.token, "alice", 1, 1)
        assert h.remaining is not None and 0 < h.remaining <= 10.0
        lk.extend(lease=20.0)  # answered: the extend is committed
        assert lk.release()
        # The extend showed nothing: the next item is the release's.
        assert w.next() is None
        lk2 = other.acquire("w/1", lease=10.0)
        h2 = w.next()
        assert h2 is not None and h2.token == lk2.token and h2.token > lk.token
        assert lk2.release()
        assert w.next() is None


def test_watch_starts_with_the_holder(node: Node) -> None:
    with baton.Client(node.addr) as client:
        lk = client.acquire("w/2", lease=10.0, owner="bob")
        w = Watcher(client.watch("w/2"))
        h = w.next()
        assert h is not None and h.token == lk.token and h.owner == "bob"
        assert lk.release()
        assert w.next() is None


def test_watch_ends_when_the_client_closes(node: Node) -> None:
    client = baton.Client(node.addr)
    w = Watcher(client.watch("w/3"))
    assert w.next() is None
    client.close()
    kind, _ = w.q.get(timeout=5.0)
    assert kind == "end"


@pytest.mark.parametrize("how", ["close", "break"])
def test_leaving_the_watch_sends_u(proxy: Proxy, how: str) -> None:
    key = f"w/u-{how}"
    with baton.Client(proxy.addr) as client:
        it = client.watch(key)
        if how == "close":
            assert next(it) is None
            it.close()
            with pytest.raises(StopIteration):
                next(it)
        else:
            for st in it:
                assert st is None
                break
            del it  # the loop's generator is finalized (closed) once nobody holds it
        pair = watch_pair(proxy, key)
        wait_for(lambda: f"U {key}" in pair.requests, 5.0, "U through the proxy")
        assert pair.requests[-1] == f"U {key}"  # nothing after U
        # ... and the watch's connection closed (by EOF, or a reset when an answer was
        # still unread): the server can send nothing more on it.
        wait_for(lambda: pair.closed, 5.0, "the watch's connection closed")
        # The client's other connections go on.
        assert client.query(key) is None


@pytest.mark.parametrize("how", ["term", "kill"])
def test_watch_follows_a_new_leader(cluster: list[Node], how: str) -> None:
    addrs = [n.addr for n in cluster]
    with baton.Client(addrs) as client, baton.Client(addrs) as other:
        lk = other.acquire("w/fo", lease=60.0, owner="keeper")
        lead = leader(cluster)
        w = Watcher(client.watch("w/fo"))
        h = w.next()
        assert h is not None and h.token == lk.token
        stop(lead, how)
        # Re-established on the new leader: the state there comes again (the same grant).
        h2 = w.next(timeout=30.0)
        assert h2 is not None and h2.token == lk.token and h2.owner == "keeper"
        new = leader(cluster)
        assert new is not lead
        assert lk.release()  # goes on: the watch serves on the new leader
        assert w.next(timeout=15.0) is None


def test_election(node: Node) -> None:
    with (
        baton.Client(node.addr) as c1,
        baton.Client(node.addr) as c2,
        baton.Client(node.addr) as c3,
    ):
        e1 = c1.election("el/1", lease=5.0)
        e2 = c2.election("el/1", lease=5.0)
        obs = Watcher(c3.election("el/1", lease=5.0).observe())
        assert obs.next() is None
        assert e1.leader() is None

        l1 = e1.campaign("alpha")
        assert l1.owner == "alpha" and not l1.lost
        assert l1._ka_thread is not None  # kept alive while it leads
        assert obs.next() == baton.Leader("alpha", l1.token)
        assert e2.leader() == baton.Leader("alpha", l1.token)

        with pytest.raises(baton.AcquireTimeout):  # the second waits while the first leads
            e2.campaign("beta", wait=0.3)
        got: queue.Queue[baton.Lock] = queue.Queue()
        threading.Thread(target=lambda: got.put(e2.campaign("beta")), daemon=True).start()
        wait_for(lambda: e1.leader() == baton.Leader("alpha", l1.token), 5.0, "alpha leads")
        assert got.empty()

        assert l1.release()
        l2 = got.get(timeout=ITEM_TIMEOUT)
        assert l2.owner == "beta" and l2.token > l1.token
        assert e1.leader() == baton.Leader("beta", l2.token)
        seen = obs.next()
        if seen is None:  # the release and the grant may show as two commits
            seen = obs.next()
        assert seen == baton.Leader("beta", l2.token)
        assert l2.release()
        assert obs.next() is None
        assert e2.leader() is None


# --- asyncio -----------------------------------------------------------------


async def anext_in(it: AsyncGenerator[Any, None], timeout: float = ITEM_TIMEOUT) -> Any:
    return await asyncio.wait_for(anext(it), timeout)


async def test_aio_watch_grant_release_and_extend(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client, baton.aio.Client(node.addr) as other:
        async with contextlib.aclosing(client.watch("aw/1")) as it:
            assert await anext_in(it) is None
            lk = await other.acquire("aw/1", lease=10.0, owner="alice")
            h = await anext_in(it)
            assert h is not None and (h.token, h.owner) == (lk.token, "alice")
            await lk.extend(lease=20.0)
            assert await lk.release()
            assert await anext_in(it) is None  # the extend showed nothing
            lk2 = await other.acquire("aw/1", lease=10.0)
            h2 = await anext_in(it)
            assert h2 is not None and h2.token == lk2.token
            assert await lk2.release()
            assert await anext_in(it) is None


async def test_aio_watch_ends_when_the_client_closes(node: Node) -> None:
    client = baton.aio.Client(node.addr)
    it = client.watch("aw/3")
    assert await anext_in(it) is None
    nxt = asyncio.ensure_future(anext(it))
    await client.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(nxt, 5.0)


@pytest.mark.parametrize("how", ["aclose", "break"])
async def test_aio_leaving_the_watch_sends_u(proxy: Proxy, how: str) -> None:
    key = f"aw/u-{how}"
    async with baton.aio.Client(proxy.addr) as client:
        if how == "aclose":
            it = client.watch(key)
            assert await anext_in(it) is None
            await it.aclose()
            with pytest.raises(StopAsyncIteration):
                await anext(it)
        else:
            async for st in client.watch(key):
                assert st is None
                break  # the generator is finalized by the loop's asyncgen hook
        pair = await asyncio.to_thread(watch_pair, proxy, key)
        await wait_until(lambda: f"U {key}" in pair.requests, 5.0, "U through the proxy")
        assert pair.requests[-1] == f"U {key}"
        await wait_until(lambda: pair.closed, 5.0, "the watch's connection closed")
        assert await client.query(key) is None


@pytest.mark.parametrize("how", ["term", "kill"])
async def test_aio_watch_follows_a_new_leader(cluster: list[Node], how: str) -> None:
    addrs = [n.addr for n in cluster]
    async with baton.aio.Client(addrs) as client, baton.aio.Client(addrs) as other:
        lk = await other.acquire("aw/fo", lease=60.0, owner="keeper")
        lead = await asyncio.to_thread(leader, cluster)
        async with contextlib.aclosing(client.watch("aw/fo")) as it:
            h = await anext_in(it)
            assert h is not None and h.token == lk.token
            await asyncio.to_thread(stop, lead, how)
            h2 = await anext_in(it, 30.0)
            assert h2 is not None and h2.token == lk.token and h2.owner == "keeper"
            assert await lk.release()
            assert await anext_in(it, 15.0) is None


async def test_aio_election(node: Node) -> None:
    async with (
        baton.aio.Client(node.addr) as c1,
        baton.aio.Client(node.addr) as c2,
        baton.aio.Client(node.addr) as c3,
    ):
        e1 = c1.election("ael/1", lease=5.0)
        e2 = c2.election("ael/1", lease=5.0)
        async with contextlib.aclosing(c3.election("ael/1", lease=5.0).observe()) as obs:
            assert await anext_in(obs) is None
            l1 = await e1.campaign("alpha")
            assert l1.owner == "alpha" and l1._ka_task is not None
            assert await anext_in(obs) == baton.Leader("alpha", l1.token)
            assert await e2.leader() == baton.Leader("alpha", l1.token)
            with pytest.raises(baton.AcquireTimeout):
                await e2.campaign("beta", wait=0.3)
            second = asyncio.ensure_future(e2.campaign("beta"))
            assert await e1.leader() == baton.Leader("alpha", l1.token)
            assert not second.done()
            assert await l1.release()
            l2 = await asyncio.wait_for(second, ITEM_TIMEOUT)
            assert l2.owner == "beta" and l2.token > l1.token
            assert await e1.leader() == baton.Leader("beta", l2.token)
            seen = await anext_in(obs)
            if seen is None:
                seen = await anext_in(obs)
            assert seen == baton.Leader("beta", l2.token)
            assert await l2.release()
            assert await anext_in(obs) is None
