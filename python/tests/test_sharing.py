"""One client shared by threads, and a client used across fork."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from servers import Node, wait_until

import baton
import baton.aio
from baton._core import UP


def test_threads_share_a_client(node: Node) -> None:
    with baton.Client(node.addr) as client:
        inside = 0
        overlap = False
        tokens: list[int] = []
        errors: list[BaseException] = []
        mu = threading.Lock()

        def worker() -> None:
            nonlocal inside, overlap
            try:
                for _ in range(10):
                    lock = client.acquire("shared", lease=10.0, wait=20.0)
                    with mu:
                        inside += 1
                        overlap = overlap or inside > 1
                        tokens.append(lock.token)
                    time.sleep(0.001)
                    with mu:
                        inside -= 1
                    assert lock.release()
                    assert client.query(f"other/{threading.get_ident()}") is None
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        assert not overlap
        assert len(tokens) == 80 and len(set(tokens)) == 80


def test_release_from_another_thread(node: Node) -> None:
    with baton.Client(node.addr) as client:
        lock = client.acquire("t/x", lease=10.0)
        out: list[bool] = []
        t = threading.Thread(target=lambda: out.append(lock.release()))
        t.start()
        t.join(timeout=10)
        assert out == [True]
        assert client.query("t/x") is None


def test_fork_child_opens_its_own_connections(node: Node) -> None:
    with baton.Client(node.addr) as client:
        parent_lock = client.acquire("fork/p", lease=30.0)
        pid = os.fork()
        if pid == 0:  # the child: report by exit status only
            code = 1
            try:
                h = client.query("fork/p")
                lock = client.acquire("fork/c", lease=10.0, wait=5.0)
                ok = h is not None and h.token == parent_lock.token and lock.release()
                code = 0 if ok else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            wpid, st = os.waitpid(pid, os.WNOHANG)
            if wpid:
                status = st
                break
            time.sleep(0.05)
        if status is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the child hung")
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's connections still work.
        assert client.query("fork/c") is None
        assert parent_lock.release()


async def _aio_child(client: baton.aio.Client, parent_token: int, given: baton.aio.Lock) -> int:
    """In the child of test_aio_fork: its own event loop, the parent's client."""
    h = await client.query("afork/p")
    lock = await client.acquire("afork/c", lease=10.0, wait=5.0)
    ok = h is not None and h.token == parent_token and await lock.release()
    ok = ok and await given.release()  # a lock of the parent's, kept alive there
    await client.close()
    return 0 if ok else 2


async def test_aio_fork_child_opens_its_own_connections(node: Node) -> None:
    """A child that runs an event loop of its own uses the parent's baton.aio.Client with
    connections of its own, and leaves the parent's sessions alone."""
    async with baton.aio.Client(node.addr) as client:
        parent_lock = await client.acquire("afork/p", lease=30.0)
        given = await client.acquire("afork/given", lease=30.0)
        given.keep_alive()
        conns = client._pool.conns
        await wait_until(lambda: all(c.state == UP for c in conns), 5.0, "both up")
        sessions = [c._writer for c in conns]
        pid = os.fork()
        if pid == 0:  # the child: report by exit status only
            code = 1
            try:
                code = asyncio.run(_aio_child(client, parent_lock.token, given))
            finally:
                os._exit(code)
        status: list[int] = []

        def exited() -> bool:
            wpid, st = os.waitpid(pid, os.WNOHANG)
            if wpid:
                status.append(st)
            return bool(wpid)

        try:
            await wait_until(exited, 20.0, "the child")
        finally:
            if not status:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status[0]) == 0
        # The parent's sessions are the ones it had, and each still serves.
        for i in range(2 * len(conns)):
            assert await client.query(f"afork/after/{i}") is None
        assert [c._writer for c in conns] == sessions
        assert all(c.state == UP for c in conns)
        assert await client.query("afork/c") is None
        assert await client.query("afork/given") is None  # the child released it
        assert await parent_lock.release()
