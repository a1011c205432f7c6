"""Shared holds (protocol 1.4): acquire_shared, on real nodes and on scripted fake servers,
with both clients."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import drivers
import pytest
from fakeserver import FakeServer
from servers import Node, raw_lines, wait_for, wait_until

import baton
import baton._core
import baton.aio

# --- real nodes: baton.Client ------------------------------------------------------------


def test_semaphore_third_waits_until_one_releases(node: Node) -> None:
    """Three holders of permits 2: the third waits until one of the two releases; every
    grant has its own token."""
    with baton.Client(node.addr) as client:
        a = client.acquire_shared("sem/1", permits=2, lease=10.0)
        b = client.acquire_shared("sem/1", permits=2, lease=10.0, wait=1.0)
        assert a.token != b.token and a.owner != b.owner
        h = client.query("sem/1")
        assert h == baton.Holder(None, None, None, holders=2, permits=2)
        got: list[baton.Lock] = []
        t = threading.Thread(
            target=lambda: got.append(client.acquire_shared("sem/1", permits=2, lease=10.0))
        )
        t.start()
        time.sleep(0.5)
        assert not got  # waits: two hold already
        with pytest.raises(baton.AcquireTimeout):
            client.acquire_shared("sem/1", permits=2, lease=10.0, wait=0)
        assert a.release() is True
        t.join(timeout=5.0)
        assert len(got) == 1
        c = got[0]
        assert len({a.token, b.token, c.token}) == 3
        assert c.token > max(a.token, b.token)  # greater than every token before
        assert client.query("sem/1") == baton.Holder(None, None, None, holders=2, permits=2)
        assert b.release() and c.release()
        assert client.query("sem/1") is None


def test_extend_and_release_act_on_their_own_grant(node: Node) -> None:
    with baton.Client(node.addr) as client:
        a = client.acquire_shared("sem/2", permits=3, lease=10.0)
        b = client.acquire_shared("sem/2", permits=3, lease=10.0)
        b.extend(lease=20.0)
        assert a.release() is True
        assert a.release() is True  # a second release after a successful one
        with pytest.raises(baton.NotHeld):
            a.extend(lease=5.0)
        assert client.query("sem/2") == baton.Holder(None, None, None, holders=1, permits=3)
        # b's token still holds: R with a's token freed a's grant only.
        assert raw_lines(node.addr, [f"R sem/2 {a.token}"]) == ["R sem/2 NOTHELD"]
        assert b.release() is True
        assert client.query("sem/2") is None


def test_permits_mismatch_is_badrequest(node: Node) -> None:
    with baton.Client(node.addr) as client:
        a = client.acquire_shared("sem/3", permits=2, lease=10.0)
        with pytest.raises(baton.ServerError) as ei:
            client.acquire_shared("sem/3", permits=3, lease=10.0, wait=1.0)
        assert ei.value.code == "badrequest"
        assert client.query("sem/3") == baton.Holder(None, None, None, holders=1, permits=2)
        assert a.release()


def test_owner_retry_and_kinds(node: Node) -> None:
    """An acquire_shared whose owner holds a shared grant gets it back (the same token); an
    owner keeps to one kind: acquire with it is badrequest, and the other way round."""
    with baton.Client(node.addr) as client:
        a = client.acquire_shared("sem/4", permits=2, lease=10.0, owner="worker-1")
        again = client.acquire_shared("sem/4", permits=2, lease=10.0, owner="worker-1")
        assert again.token == a.token and again.owner == "worker-1"
        assert client.query("sem/4") == baton.Holder(None, None, None, holders=1, permits=2)
        with pytest.raises(baton.ServerError) as ei:
            client.acquire("sem/4", lease=10.0, wait=0, owner="worker-1")
        assert ei.value.code == "badrequest"
        assert a.release()
        x = client.acquire("sem/5", lease=10.0, owner="writer-1")
        with pytest.raises(baton.ServerError) as ei:
            client.acquire_shared("sem/5", permits=2, lease=10.0, wait=0, owner="writer-1")
        assert ei.value.code == "badrequest"
        assert x.release()


def test_read_write_lock(node: Node) -> None:
    """Readers with acquire_shared beside a writer with acquire: the writer waits for the
    readers, and a reader that comes after the writer waits behind it (first come, first
    served)."""
    with baton.Client(node.addr) as client:
        r1 = client.acquire_shared("rw/1", permits=1000, lease=10.0)
        r2 = client.acquire_shared("rw/1", permits=1000, lease=10.0)
        order: list[str] = []
        writer: list[baton.Lock] = []

        def write() -> None:
            writer.append(client.acquire("rw/1", lease=10.0))
            order.append("writer")

        tw = threading.Thread(target=write)
        tw.start()
        wait_for(lambda: "0" in raw_lines(node.addr, ["Q rw/1"])[0], 2.0, "readers hold")
        time.sleep(0.3)  # the writer is queued
        late: list[baton.Lock] = []

        def read() -> None:
            late.append(client.acquire_shared("rw/1", permits=1000, lease=10.0))
            order.append("reader")

        tr = threading.Thread(target=read)
        tr.start()
        time.sleep(0.3)
        assert not writer and not late
        assert r1.release() and r2.release()
        tw.join(timeout=5.0)
        assert writer and not late  # the late reader waits for the writer
        h = client.query("rw/1")
        assert h is not None and h.token == writer[0].token and h.holders == 1
        assert writer[0].release()
        tr.join(timeout=5.0)
        assert order == ["writer", "reader"]
        assert late[0].token > writer[0].token
        assert late[0].release()


def test_keep_alive_of_a_shared_hold(node: Node) -> None:
    with baton.Client(node.addr) as client:
        a = client.acquire_shared("sem/6", permits=2, lease=0.6)
        a.keep_alive()
        time.sleep(2.0)  # more than three leases
        assert not a.lost
        a.ensure_held()
        assert client.query("sem/6") == baton.Holder(None, None, None, holders=1, permits=2)
        assert a.release()


def test_watch_sees_shared_holders(node: Node) -> None:
    with baton.Client(node.addr) as client:
        states = client.watch("sem/7")
        assert next(states) is None
        a = client.acquire_shared("sem/7", permits=2, lease=10.0)
        assert next(states) == baton.Holder(None, None, None, holders=1, permits=2)
        b = client.acquire_shared("sem/7", permits=2, lease=10.0)
        assert next(states) == baton.Holder(None, None, None, holders=2, permits=2)
        assert a.release() and b.release()
        assert next(states) == baton.Holder(None, None, None, holders=1, permits=2)
        assert next(states) is None
        states.close()


# --- real nodes: baton.aio.Client --------------------------------------------------------


async def test_aio_semaphore_third_waits(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        a = await client.acquire_shared("asem/1", permits=2, lease=10.0)
        b = await client.acquire_shared("asem/1", permits=2, lease=10.0)
        third = asyncio.create_task(client.acquire_shared("asem/1", permits=2, lease=10.0))
        await asyncio.sleep(0.5)
        assert not third.done()
        assert await a.release()
        c = await asyncio.wait_for(third, 5.0)
        assert len({a.token, b.token, c.token}) == 3
        assert await client.query("asem/1") == baton.Holder(None, None, None, 2, 2)
        with pytest.raises(baton.ServerError) as ei:
            await client.acquire_shared("asem/1", permits=5, lease=10.0)
        assert ei.value.code == "badrequest"
        await c.extend(lease=20.0)
        assert await b.release() and await c.release()
        assert await client.query("asem/1") is None


async def test_aio_cancelled_shared_acquire_leaves_nothing_held(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        a = await client.acquire_shared("asem/2", permits=1, lease=10.0)
        waiting = asyncio.create_task(client.acquire_shared("asem/2", permits=1, lease=10.0))
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await a.release()
        # The grant the cancelled acquire may get is released by the client.
        await wait_until(lambda: raw_lines(node.addr, ["Q asem/2"]) == ["Q asem/2 FREE"],
                         5.0, "nothing held")


# --- arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize("permits", [0, -1, 1_000_001])
def test_bad_permits_value(permits: int) -> None:
    server = FakeServer("a")
    try:
        with baton.Client(server.addr) as client, pytest.raises(ValueError):
            client.acquire_shared("k", permits=permits, lease=1.0)

        async def aio() -> None:
            async with baton.aio.Client(server.addr) as client:
                with pytest.raises(ValueError):
                    await client.acquire_shared("k", permits=permits, lease=1.0)

        asyncio.run(aio())
        assert server.count("S") == 0
    finally:
        server.close()


@pytest.mark.parametrize("permits", [2.0, "2", True, None])
def test_bad_permits_type(permits: object) -> None:
    with baton.Client("127.0.0.1:1") as client, pytest.raises(TypeError):
        client.acquire_shared("k", permits=permits, lease=1.0)  # type: ignore[arg-type]


def test_permits_bounds_accepted() -> None:
    def script(server: FakeServer, line: str) -> list[str]:
        f = line.split()
        return [f"S {f[1]} OK 9"] if f[0] == "S" else ["? - ERR badrequest op must be A"]

    server = FakeServer("a", script)
    try:
        with baton.Client(server.addr) as client:
            assert client.acquire_shared("k", permits=1, lease=1.0).token == 9
            assert client.acquire_shared("k", permits=1_000_000, lease=1.0).token == 9
        assert server.count("S k 1 1000 0 ") == 1 and server.count("S k 1000000 1000 0 ") == 1
    finally:
        server.close()


# --- scripted fake servers, both clients ---------------------------------------------------


class Driver(drivers.Driver):
    """acquire_shared on a client of either kind, as a blocking call."""

    def acquire_shared(self, key: str, **kw: object) -> baton.Lock | baton.aio.Lock:
        if self.sync is not None:
            return self.sync.acquire_shared(key, **kw)  # type: ignore[arg-type]
        return self.run(self.aio.acquire_shared(key, **kw))  # type: ignore[arg-type]


OLD_13 = "? - ERR badrequest op must be A, R, K, Q, H, C or M"


def test_server_before_14_answers_badrequest(kind: str, fakes: list[FakeServer]) -> None:
    """A server of protocol 1.3 cannot read S: its '? - ERR badrequest' answers the S (not
    a C - that waits, nor anything else), which raises ServerError badrequest at once, and
    the connection stays."""

    def script(server: FakeServer, line: str) -> list[str]:
        if line == "C -":
            return []  # left unanswered: the S's answer must not be taken for its
        if line.startswith("S "):
            return [OLD_13]
        return [f"Q {line.split()[1]} FREE"]

    a = FakeServer("a", script)
    fakes.append(a)
    d = Driver(kind, a.addr)
    try:
        wait_for(lambda: a.count("C -") >= 1, 5.0, "C - sent")
        t0 = time.monotonic()
        with pytest.raises(baton.ServerError) as ei:
            d.acquire_shared("k", permits=2, lease=5.0)
        assert ei.value.code == "badrequest" and "op must be" in ei.value.text
        assert time.monotonic() - t0 < 2.0  # not retried
        assert a.count("S ") == 1
        assert a.accepted == 2  # no connection was lost over it
    finally:
        d.close()


VERSION_TEXT = "shared holds need cluster version 4 (the cluster is at 3)"


def test_cluster_below_version_4(kind: str, fakes: list[FakeServer],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """ERR unavailable because of the cluster's version is retried for the version window
    (5 s; shortened here), then raised as Unavailable with the server's text; an acquire
    whose wait is shorter times out first."""
    monkeypatch.setattr(baton._core, "VERSION_WINDOW", 0.6)

    def script(server: FakeServer, line: str) -> list[str]:
        if line == "C -":
            return [f"C - OK {server.addr}"]
        return [f"S {line.split()[1]} ERR unavailable {VERSION_TEXT}"]

    a = FakeServer("a", script)
    fakes.append(a)
    d = Driver(kind, a.addr)
    try:
        t0 = time.monotonic()
        with pytest.raises(baton.Unavailable) as ei:
            d.acquire_shared("k", permits=2, lease=5.0)
        took = time.monotonic() - t0
        assert "cluster version 4" in str(ei.value)
        assert 0.6 <= took < 3.0
        assert a.count("S k 2 5000 0 ") >= 2  # retried
        with pytest.raises(baton.AcquireTimeout) as et:
            d.acquire_shared("k", permits=2, lease=5.0, wait=0.3)
        assert "cluster version 4" in str(et.value)  # what was being retried
        with pytest.raises(baton.Unavailable):  # a try is not retried
            d.acquire_shared("k", permits=2, lease=5.0, wait=0)
    finally:
        d.close()


class CutFirstS(FakeServer):
    """The first S is cut (its answer lost), the second left unanswered; the try that
    cleans up is granted token 9, and R k 9 answered OK."""

    def answer(self, conn: socket.socket, line: str) -> list[str]:
        f = line.split()
        if f[0] == "C":
            return [f"C - OK {self.addr}"]
        if f[0] == "S" and f[4] == "0":
            if self.count("S k 2 5000 0 ") == 1:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            return []
        if f[0] == "S" and f[4] == "-1":
            return ["S k OK 9"]
        if f[0] == "R":
            return ["R k OK"]
        return []


async def test_aio_give_up_after_a_lost_answer_cleans_up(fakes: list[FakeServer]) -> None:
    """An acquire_shared cancelled after an attempt whose answer may have been lost sends,
    in the background, an S try with the same owner and permits, and releases the grant it
    gets back."""
    a = CutFirstS("a")
    fakes.append(a)
    async with baton.aio.Client(a.addr) as client:
        task = asyncio.create_task(client.acquire_shared("k", permits=2, lease=5.0))
        await wait_until(lambda: a.count("S k 2 5000 0 ") == 2, 5.0, "the retry")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: a.count("R k 9") == 1, 5.0, "the release of the grant")
        with a.mu:
            s = [x for x in a.lines if x.startswith("S ")]
        owner = s[0].split()[5]
        assert s[1].split()[5] == owner
        assert s[2] == f"S k 2 5000 -1 {owner}"
