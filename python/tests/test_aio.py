"""baton.aio.Client against real batond processes: the sync client's behaviour, and
cancellation at every point."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from servers import Node, Proxy, leader, raw_lines, wait_until

import baton
import baton.aio
from baton._core import UP


def free_on_server(node: Node, key: str) -> Callable[[], bool]:
    return lambda: raw_lines(node.addr, [f"Q {key}"]) == [f"Q {key} FREE"]


async def test_acquire_query_extend_release(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        assert await client.query("a/1") is None
        lock = await client.acquire("a/1", lease=10.0)
        assert isinstance(lock, baton.aio.Lock)
        assert lock.key == "a/1" and lock.token > 0 and len(lock.owner) == 32
        h = await client.query("a/1")
        assert isinstance(h, baton.Holder)
        assert (h.token, h.owner) == (lock.token, lock.owner)
        await lock.extend(lease=30.0)
        h = await client.query("a/1")
        assert h is not None and h.remaining is not None and 29.0 < h.remaining <= 30.0
        assert not lock.lost
        lock.ensure_held()
        assert await lock.release() is True
        assert await client.query("a/1") is None
        assert not lock.lost
        with pytest.raises(baton.NotHeld):
            lock.ensure_held()
        assert await lock.release() is True
        again = await client.acquire("a/1", lease=5.0, wait=0, owner="me-1")
        assert again.token > lock.token and again.owner == "me-1"
        # The same owner gets the same grant back.
        same = await client.acquire("a/1", lease=5.0, wait=0, owner="me-1")
        assert same.token == again.token
        assert await same.release()


async def test_two_connections_round_robin_and_redial(proxy: Proxy, node: Node) -> None:
    """Two connections to a lone address, requests spread over both; one cut is left out
    and redialled within 3 s, and the service goes on meanwhile."""
    async with baton.aio.Client(proxy.addr) as client:
        conns = client._pool.conns
        assert len(conns) == 2 and {c.addr for c in conns} == {proxy.addr}
        await wait_until(lambda: all(c.state == UP for c in conns), 5.0, "both up")
        used: set[int] = set()
        for i in range(4):
            task = asyncio.create_task(client.query(f"rr/{i}"))
            await asyncio.sleep(0)  # sent: see which connection owes it
            used |= {id(c) for c in conns if len(c._pairing)}
            assert await task is None
        assert used == {id(c) for c in conns}
        proxy.cut_on_request("Q rr/cut")
        assert await client.query("rr/cut") is None  # moved to the other connection
        await wait_until(lambda: any(c.state != UP for c in conns), 2.0, "one left out")
        t0 = time.monotonic()
        for i in range(5):
            assert await client.query(f"rr/during/{i}") is None
        await wait_until(lambda: all(c.state == UP for c in conns), 5.0, "redialled")
        assert time.monotonic() - t0 < 3.5


async def test_try_lock_timeout_and_release_of_a_lost_grant(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        held = await client.acquire("t/1", lease=30.0)
        with pytest.raises(baton.AcquireTimeout) as ei:
            await client.acquire("t/1", lease=5.0, wait=0)
        assert isinstance(ei.value, TimeoutError)
        t0 = time.monotonic()
        with pytest.raises(baton.AcquireTimeout):
            await client.acquire("t/1", lease=5.0, wait=0.3)
        assert 0.25 <= time.monotonic() - t0 < 2.0
        assert raw_lines(node.addr, ["R t/1"]) == ["R t/1 OK"]  # freed behind its back
        with pytest.raises(baton.NotHeld):
            await held.extend(lease=10.0)
        assert held.lost
        with pytest.raises(baton.LockLost):
            held.ensure_held()
        assert await held.release() is False


async def test_waiters_are_granted_in_turn(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        inside = 0
        tokens: list[int] = []

        async def worker() -> None:
            nonlocal inside
            for _ in range(5):
                async with client.lock("turn", lease=10.0, wait=20.0) as lock:
                    inside += 1
                    assert inside == 1
                    tokens.append(lock.token)
                    await asyncio.sleep(0)
                    inside -= 1

        async with asyncio.timeout(60):
            await asyncio.gather(*(worker() for _ in range(6)))
        assert len(tokens) == 30 and tokens == sorted(tokens)
        assert await client.query("turn") is None


async def test_async_with_lock_keeps_alive_and_releases(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        async with client.lock("w/1", lease=0.6) as lock:
            await asyncio.sleep(1.5)  # more than two leases: only the keep-alive holds it
            assert not lock.lost
            h = await client.query("w/1")
            assert h is not None and h.token == lock.token
        assert await client.query("w/1") is None
        with pytest.raises(baton.NotHeld):
            lock.ensure_held()
        with pytest.raises(RuntimeError):
            async with client.lock("w/1", lease=5.0):
                raise RuntimeError("boom")
        assert await client.query("w/1") is None
        # A lock used directly: released at exit.
        async with await client.acquire("w/1", lease=5.0) as lk:
            assert (await client.query("w/1")) is not None
        assert await client.query("w/1") is None
        entered = False
        with pytest.raises(baton.NotHeld):
            async with lk:
                entered = True
        assert not entered


async def test_async_with_is_never_entered_without_the_lock(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        other = await client.acquire("w/2", lease=30.0)
        entered = False
        with pytest.raises(baton.AcquireTimeout):
            async with client.lock("w/2", lease=5.0, wait=0.2):
                entered = True
        with pytest.raises(baton.AcquireTimeout):
            async with client.lock("w/2", lease=5.0, wait=0):
                entered = True
        # Cancelled (by a time-out around it) while waiting: not entered either.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3), client.lock("w/2", lease=30.0):
                entered = True
        assert not entered
        h = await client.query("w/2")
        assert h is not None and h.token == other.token
        assert await other.release()
        # The cancelled waiter was granted next, and its grant released at once.
        await wait_until(free_on_server(node, "w/2"), 5.0, "the abandoned grant released")


async def test_keep_alive_and_loss(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        lock = await client.acquire("ka/1", lease=0.6)
        lock.keep_alive()
        lock.keep_alive()  # a second call does nothing
        await asyncio.sleep(2.0)  # more than three leases
        assert not lock.lost
        assert raw_lines(node.addr, ["R ka/1"]) == ["R ka/1 OK"]
        t0 = time.monotonic()
        await wait_until(lambda: lock.lost, 2.0, "the loss to be noticed")
        assert time.monotonic() - t0 < 0.5  # the next extend (lease/3) said NOTHELD
        with pytest.raises(baton.LockLost):
            lock.ensure_held()
        assert await lock.release() is False
        # Without keep-alive, the lease running out is a loss.
        short = await client.acquire("ka/2", lease=0.3)
        await wait_until(lambda: short.lost, 2.0, "the lease to run out")
        # The client counts the lease from when it sent the acquire, the server from the
        # grant, a little later: once the server has let it go too, release says so.
        await wait_until(free_on_server(node, "ka/2"), 2.0, "the server's lease to run out")
        assert await short.release() is False


async def test_loss_is_noticed_when_the_server_is_paused(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        lock = await client.acquire("ka/3", lease=1.0)
        lock.keep_alive()
        node.pause()
        try:
            t0 = time.monotonic()
            await wait_until(lambda: lock.lost, 5.0, "the loss")
            assert time.monotonic() - t0 <= 1.2
        finally:
            node.resume()


async def test_cancel_at_every_point_leaves_nothing_held(node: Node) -> None:
    """An acquire cancelled after any number of event loop steps, then after growing
    delays (so that some cancellations land after the grant was sent, some after it was
    read): either it returned the lock (released here) or nothing stays held."""
    async with baton.aio.Client(node.addr) as client:
        outcomes = {"lock": 0, "cancelled": 0}
        for steps in range(40):
            key = f"cx/{steps}"
            task = asyncio.create_task(client.acquire(key, lease=30.0, wait=5.0))
            if steps < 20:
                for _ in range(steps):
                    await asyncio.sleep(0)
            else:
                await asyncio.sleep((steps - 20) * 0.001)  # 0 to 19 ms
            task.cancel()
            try:
                lock = await task
            except asyncio.CancelledError:
                outcomes["cancelled"] += 1
            else:
                outcomes["lock"] += 1
                assert await lock.release()
        assert outcomes["cancelled"] > 0
        for steps in range(40):
            await wait_until(free_on_server(node, f"cx/{steps}"), 5.0, f"cx/{steps} free")


async def test_a_grant_after_cancellation_is_released(node: Node) -> None:
    """A cancelled acquire keeps its place in the (op, key) pairing; its late grant is
    released, and the next acquire of the key on the same connections gets its own
    answer."""
    async with baton.aio.Client(node.addr) as client, baton.aio.Client(node.addr) as other:
        holder = await other.acquire("ab/1", lease=30.0)
        task = asyncio.create_task(client.acquire("ab/1", lease=30.0, wait=None))
        await wait_until(lambda: any(len(c._pairing) for c in client._pool.conns), 5.0,
                         "the acquire to be sent")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        second = asyncio.create_task(client.acquire("ab/1", lease=30.0, wait=10.0))
        await wait_until(lambda: sum(len(c._pairing) for c in client._pool.conns) >= 2, 5.0,
                         "the second acquire to be sent")
        assert await holder.release()
        async with asyncio.timeout(15):
            lock = await second
        # The abandoned acquire (lease 30 s) was queued first: had the client not
        # released its grant, the second (wait 10 s) would have timed out.
        assert lock.token > holder.token + 1
        h = await client.query("ab/1")
        assert h is not None and h.token == lock.token and h.owner == lock.owner
        assert await lock.release()
        await wait_until(free_on_server(node, "ab/1"), 5.0, "the key to be free")


async def test_cancelled_while_its_answer_is_lost_leaves_nothing_held(
        proxy: Proxy, node: Node) -> None:
    """The grant is made but its answer never arrives (the connection hangs, then is
    closed by the heartbeat): the acquire, cancelled meanwhile, gets the grant back with
    its owner on another connection and releases it."""
    async with baton.aio.Client(proxy.addr) as client:
        assert await client.query("warm") is None
        proxy.freeze_on("A amb/1 OK")
        task = asyncio.create_task(client.acquire("amb/1", lease=60.0, wait=5.0))
        await wait_until(lambda: bool(proxy.frozen_pairs()), 5.0, "the grant to be held back")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert raw_lines(node.addr, ["Q amb/1"])[0].startswith("Q amb/1 HELD")
        await wait_until(free_on_server(node, "amb/1"), 8.0, "the unseen grant released")


async def test_cancelled_release_still_releases(proxy: Proxy, node: Node) -> None:
    """redis-py#3847: a release cancelled while it cannot reach the server goes on, and the
    lock is not left held; a second release waits for the same one."""
    async with baton.aio.Client(proxy.addr) as client:
        lock = await client.acquire("cr/1", lease=60.0)
        proxy.block()
        task = asyncio.create_task(lock.release())
        await wait_until(lambda: bool(client._releasing), 2.0, "the release to start")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert raw_lines(node.addr, ["Q cr/1"])[0].startswith("Q cr/1 HELD")
        proxy.unblock()
        await wait_until(free_on_server(node, "cr/1"), 6.0, "the release to go through")
        assert await lock.release() is True
        assert not lock.lost


async def test_close_waits_for_a_release_under_way(proxy: Proxy, node: Node) -> None:
    client = baton.aio.Client(proxy.addr)
    lock = await client.acquire("cw/1", lease=60.0)
    proxy.block()
    task = asyncio.create_task(lock.release())
    await wait_until(lambda: bool(client._releasing), 2.0, "the release to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    asyncio.get_running_loop().call_later(0.5, proxy.unblock)
    t0 = time.monotonic()
    await client.close()
    assert time.monotonic() - t0 < 6.5
    assert raw_lines(node.addr, ["Q cw/1"]) == ["Q cw/1 FREE"]
    with pytest.raises(baton.BatonError):
        await client.query("cw/1")


async def test_cancelled_body_releases(node: Node) -> None:
    async with baton.aio.Client(node.addr) as client:
        started = asyncio.Event()

        async def body() -> None:
            async with client.lock("cb/1", lease=30.0):
                started.set()
                await asyncio.Event().wait()  # until cancelled

        task = asyncio.create_task(body())
        async with asyncio.timeout(5):
            await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await client.query("cb/1") is None


async def test_acquire_moves_to_the_next_connection(proxy: Proxy, node: Node) -> None:
    async with baton.aio.Client(proxy.addr) as client:
        assert await client.query("warm") is None
        proxy.cut_on_request("A fo/1 ")
        lock = await client.acquire("fo/1", lease=10.0, wait=5.0)
        assert any(e.startswith("cut-request A fo/1 ") for e in proxy.events)
        h = await client.query("fo/1")
        assert h is not None and h.token == lock.token and h.owner == lock.owner
        assert await lock.release()


async def test_lost_answer_retry_returns_the_same_grant(proxy: Proxy, node: Node) -> None:
    async with baton.aio.Client(proxy.addr) as client:
        assert await client.query("warm") is None
        proxy.cut_on_answer("A lost/1 OK")
        lock = await client.acquire("lost/1", lease=10.0, wait=5.0)
        cut = [e for e in proxy.events if e.startswith("cut-answer A lost/1 OK")]
        assert len(cut) == 1
        assert lock.token == int(cut[0].split()[-1])
        h = await client.query("lost/1")
        assert h is not None and h.remaining is not None and h.remaining > 9.0
        assert await lock.release()


async def test_heartbeat_gives_up_a_silent_connection(proxy: Proxy, node: Node) -> None:
    async with baton.aio.Client(proxy.addr) as client:
        assert await client.query("warm") is None
        proxy.freeze_on("A hb/1 OK")
        t0 = time.monotonic()
        lock = await client.acquire("hb/1", lease=10.0, wait=5.0)
        elapsed = time.monotonic() - t0
        frozen = proxy.frozen_pairs()
        assert len(frozen) == 1
        assert 1.3 <= elapsed < 3.5, elapsed
        await wait_until(frozen[0].client_closed.is_set, 2.0, "the silent one closed")
        held = frozen[0].held.decode()
        assert held.startswith(f"A hb/1 OK {lock.token}")
        assert "Q __baton_heartbeat__" in held
        assert await lock.release()


async def test_release_is_retried_through_an_outage(proxy: Proxy, node: Node) -> None:
    async with baton.aio.Client(proxy.addr) as client:
        lock = await client.acquire("rel/1", lease=30.0)
        proxy.block()
        asyncio.get_running_loop().call_later(1.0, proxy.unblock)
        t0 = time.monotonic()
        assert await lock.release() is True
        assert time.monotonic() - t0 < 5.5
        assert raw_lines(node.addr, ["Q rel/1"]) == ["Q rel/1 FREE"]


async def test_release_gives_up_after_5s(proxy: Proxy, node: Node) -> None:
    async with baton.aio.Client(proxy.addr) as client:
        lock = await client.acquire("rel/2", lease=30.0)
        proxy.block()
        t0 = time.monotonic()
        with pytest.raises(baton.Unavailable):
            await lock.release()
        assert 4.8 <= time.monotonic() - t0 < 7.0
        assert raw_lines(node.addr, ["Q rel/2"])[0].startswith("Q rel/2 HELD")


async def test_errors_and_closed_client(node: Node) -> None:
    from servers import free_ports

    with pytest.raises(ValueError):
        baton.aio.Client([])
    client = baton.aio.Client(node.addr)
    with pytest.raises(ValueError):
        await client.query("has space")
    with pytest.raises(ValueError):
        await client.acquire("k", lease=0)
    assert await client.query("k") is None
    await client.close()
    await client.close()
    with pytest.raises(baton.Unavailable, match="closed"):
        await client.query("k")
    async with baton.aio.Client(f"127.0.0.1:{free_ports(1)[0]}") as down:
        t0 = time.monotonic()
        with pytest.raises(baton.Unavailable):
            await down.query("k")
        assert time.monotonic() - t0 < 3.0


async def test_cluster_moved_and_killed_leader(cluster: list[Node]) -> None:
    from test_cluster import settled_leader

    lead = settled_leader(cluster)
    follower = next(n for n in cluster if n is not lead)
    async with baton.aio.Client(follower.addr) as client:
        lock = await client.acquire("mv/1", lease=30.0)
        assert client._pool.preferred == lead.addr
        assert any(c.addr == lead.addr for c in client._pool.conns)
        assert await lock.release()
    async with baton.aio.Client([n.addr for n in cluster]) as client:
        lock = await client.acquire("kl/1", lease=30.0)
        lead.kill()  # SIGKILL
        t0 = time.monotonic()
        h = await client.query("kl/1")  # committed: survives the leader
        assert h is not None and h.token == lock.token and h.owner == lock.owner
        await lock.extend(lease=30.0)
        assert await lock.release()
        again = await client.acquire("kl/1", lease=5.0, wait=5.0)
        assert again.token > lock.token
        assert await again.release()
        assert time.monotonic() - t0 < 15.0


async def test_cancel_during_failover_leaves_nothing_held(cluster: list[Node]) -> None:
    """Acquires cancelled while the leader is paused (SIGSTOP) and the cluster elects
    another: none of them leaves a grant behind."""
    lead = leader(cluster)
    others = [n for n in cluster if n is not lead]
    async with baton.aio.Client([n.addr for n in cluster]) as client:
        assert await client.query("warm") is None
        lead.pause()
        try:
            tasks = [asyncio.create_task(client.acquire(f"cf/{i}", lease=60.0, wait=30.0))
                     for i in range(10)]
            await wait_until(lambda: sum(len(c._pairing) for c in client._pool.conns) >= 10,
                             5.0, "the acquires in flight")
            for t in tasks:
                t.cancel()
            got = await asyncio.gather(*tasks, return_exceptions=True)
            for g in got:
                if isinstance(g, baton.aio.Lock):
                    assert await g.release()
                else:
                    assert isinstance(g, asyncio.CancelledError), g
            new = leader(others)

            def all_free() -> bool:
                return all(raw_lines(new.addr, [f"Q cf/{i}"]) == [f"Q cf/{i} FREE"]
                           for i in range(10))

            await wait_until(all_free, 15.0, "every cancelled acquire's key free")
        finally:
            lead.resume()
