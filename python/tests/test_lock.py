"""Keep-alive, loss notification and the ``with`` forms."""

from __future__ import annotations

import time

import pytest
from servers import Node, raw_lines

import baton


def test_keep_alive_keeps_a_short_lease(node: Node) -> None:
    with baton.Client(node.addr) as client:
        lock = client.acquire("ka/1", lease=0.6)
        lock.keep_alive()
        lock.keep_alive()  # a second call does nothing
        time.sleep(2.0)  # more than three leases
        assert not lock.lost
        lock.ensure_held()
        h = client.query("ka/1")
        assert h is not None and h.token == lock.token
        assert lock.release()
        assert client.query("ka/1") is None


def test_lease_running_out_without_keep_alive_is_lost(node: Node) -> None:
    with baton.Client(node.addr) as client:
        lock = client.acquire("ka/2", lease=0.3)
        assert not lock.lost
        time.sleep(0.5)
        assert lock.lost
        with pytest.raises(baton.LockLost):
            lock.ensure_held()
        assert lock.release() is False


def test_loss_is_noticed_when_the_server_is_paused(node: Node) -> None:
    with baton.Client(node.addr) as client:
        lock = client.acquire("ka/3", lease=1.0)
        lock.keep_alive()
        node.pause()
        try:
            t0 = time.monotonic()
            while not lock.lost and time.monotonic() - t0 < 5.0:
                time.sleep(0.02)
            assert lock.lost
            # Counted from when the last confirmed extend (or the acquire) was sent.
            assert time.monotonic() - t0 <= 1.2
            with pytest.raises(baton.LockLost):
                lock.ensure_held()
        finally:
            node.resume()


def test_loss_by_notheld_is_noticed_by_the_keep_alive(node: Node) -> None:
    with baton.Client(node.addr) as client:
        lock = client.acquire("ka/4", lease=0.6)
        lock.keep_alive()
        assert raw_lines(node.addr, ["R ka/4"]) == ["R ka/4 OK"]
        t0 = time.monotonic()
        while not lock.lost and time.monotonic() - t0 < 2.0:
            time.sleep(0.02)
        assert lock.lost
        assert time.monotonic() - t0 < 0.5  # the next extend (lease/3) said NOTHELD


def test_with_lock_holds_keeps_alive_and_releases(node: Node) -> None:
    with baton.Client(node.addr) as client:
        with client.lock("w/1", lease=0.6) as lock:
            time.sleep(1.5)
            assert not lock.lost
            h = client.query("w/1")
            assert h is not None and h.token == lock.token
        assert client.query("w/1") is None
        with pytest.raises(baton.NotHeld):
            lock.ensure_held()
        # An exception inside: released, and the exception goes on.
        with pytest.raises(RuntimeError), client.lock("w/1", lease=5.0):
            raise RuntimeError("boom")
        assert client.query("w/1") is None


def test_with_is_never_entered_without_the_lock(node: Node) -> None:
    with baton.Client(node.addr) as client:
        other = client.acquire("w/2", lease=30.0)
        entered = False
        with pytest.raises(baton.AcquireTimeout):
            with client.lock("w/2", lease=5.0, wait=0.2):
                entered = True
        assert not entered
        with pytest.raises(baton.AcquireTimeout):
            with client.lock("w/2", lease=5.0, wait=0):
                entered = True
        assert not entered
        h = client.query("w/2")
        assert h is not None and h.token == other.token
        assert other.release()
        # A lock used directly as a context manager: released at exit.
        with client.acquire("w/2", lease=5.0) as lock:
            assert client.query("w/2") is not None
        assert client.query("w/2") is None
        with pytest.raises(baton.NotHeld):
            with lock:
                entered = True
        assert not entered
