"""Acquire, release, extend, query, time-outs, owners and argument checks."""

from __future__ import annotations

import time

import pytest
from servers import Node, raw_lines

import baton


def test_acquire_query_extend_release(node: Node) -> None:
    with baton.Client(node.addr) as client:
        assert client.query("orders/42") is None
        lock = client.acquire("orders/42", lease=10.0)
        assert lock.key == "orders/42"
        assert lock.token > 0
        assert len(lock.owner) == 32
        h = client.query("orders/42")
        assert isinstance(h, baton.Holder)
        assert (h.token, h.owner, h.holders, h.permits) == (lock.token, lock.owner, 1, 1)
        assert h.remaining is not None and 9.0 < h.remaining <= 10.0
        lock.extend(lease=30.0)
        h = client.query("orders/42")
        assert h is not None and h.remaining is not None and 29.0 < h.remaining <= 30.0
        assert lock.lost is False
        lock.ensure_held()
        assert lock.release() is True
        assert client.query("orders/42") is None
        # After a release: not lost, ensure_held raises NotHeld, a second release is True.
        assert lock.lost is False
        with pytest.raises(baton.NotHeld):
            lock.ensure_held()
        assert lock.release() is True
        # The next grant's token is greater.
        lock2 = client.acquire("orders/42", lease=5.0, wait=0)
        assert lock2.token > lock.token
        assert lock2.release()


def test_release_of_a_lost_grant_is_false(node: Node) -> None:
    with baton.Client(node.addr) as client:
        lock = client.acquire("k", lease=10.0)
        assert raw_lines(node.addr, ["R k"]) == ["R k OK"]  # freed behind its back
        with pytest.raises(baton.NotHeld):
            lock.extend(lease=10.0)
        assert lock.lost is True
        with pytest.raises(baton.LockLost):
            lock.ensure_held()
        assert lock.release() is False


def test_try_lock_and_timeout(node: Node) -> None:
    with baton.Client(node.addr) as client:
        held = client.acquire("busy", lease=30.0)
        t0 = time.monotonic()
        with pytest.raises(baton.AcquireTimeout) as ei:
            client.acquire("busy", lease=5.0, wait=0)
        assert time.monotonic() - t0 < 1.0
        assert isinstance(ei.value, TimeoutError)
        assert isinstance(ei.value, baton.BatonError)
        t0 = time.monotonic()
        with pytest.raises(baton.AcquireTimeout):
            client.acquire("busy", lease=5.0, wait=0.4)
        elapsed = time.monotonic() - t0
        assert 0.35 <= elapsed < 2.0
        # Nothing of the timed-out acquires is held or queued: the holder releases
        # and a try-lock gets it.
        h = client.query("busy")
        assert h is not None and h.token == held.token
        assert held.release()
        other = client.acquire("busy", lease=5.0, wait=0)
        assert other.release()


def test_waiting_acquire_is_granted_on_release(node: Node) -> None:
    with baton.Client(node.addr) as client:
        held = client.acquire("q", lease=30.0)
        import threading

        got: list[baton.Lock] = []
        t = threading.Thread(target=lambda: got.append(client.acquire("q", lease=5.0, wait=10)))
        t.start()
        time.sleep(0.3)
        assert not got
        assert held.release()
        t.join(timeout=5)
        assert got and got[0].token > held.token
        assert got[0].release()


def test_owner_prefix_and_explicit_owner(node: Node) -> None:
    with pytest.raises(ValueError):
        baton.Client(node.addr, owner_prefix="x" * 33)
    with pytest.raises(ValueError):
        baton.Client(node.addr, owner_prefix="has space")
    with baton.Client(node.addr, owner_prefix="web-3:" + "p" * 26) as client:
        lock = client.acquire("own", lease=10.0)
        assert lock.owner.startswith("web-3:")
        assert len(lock.owner) == 64
        h = client.query("own")
        assert h is not None and h.owner == lock.owner
        # Another acquire of the same owner gets the same grant back, at once.
        again = client.acquire("own", lease=10.0, wait=0, owner=lock.owner)
        assert again.token == lock.token
        assert again.release()
        # Every acquire has its own random owner otherwise.
        a = client.acquire("own/a", lease=5.0)
        b = client.acquire("own/b", lease=5.0)
        assert a.owner != b.owner
        a.release()
        b.release()


def test_argument_checks(node: Node) -> None:
    with baton.Client([node.addr]) as client:
        for bad in ("", "has space", "x" * 251, "tab\there"):
            with pytest.raises(ValueError):
                client.query(bad)
        with pytest.raises(ValueError):
            client.acquire("k", lease=0)
        with pytest.raises(ValueError):
            client.acquire("k", lease=10.0, wait=-1)
        with pytest.raises(ValueError):
            client.acquire("k", lease=10.0, owner="o" * 65)
        with pytest.raises(TypeError):
            client.acquire("k", 10.0)  # type: ignore[misc]
    with pytest.raises(ValueError):
        baton.Client([])
    with pytest.raises(ValueError):
        baton.Client("no-port")


def test_unreachable_server_is_unavailable() -> None:
    from servers import free_ports

    port = free_ports(1)[0]
    with baton.Client(f"127.0.0.1:{port}") as client:
        t0 = time.monotonic()
        with pytest.raises(baton.Unavailable):
            client.query("k")
        assert time.monotonic() - t0 < 3.0


def test_closed_client(node: Node) -> None:
    client = baton.Client(node.addr)
    assert client.query("k") is None
    client.close()
    client.close()
    with pytest.raises(baton.Unavailable, match="closed"):
        client.query("k")
