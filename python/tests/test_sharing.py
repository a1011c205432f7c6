"""One client shared by threads, and a client used across fork."""

from __future__ import annotations

import os
import threading
import time

from servers import Node

import baton


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
