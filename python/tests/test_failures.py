"""Lost connections, silent servers, retries and abandoned grants, through a proxy."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from servers import Node, Proxy, raw_lines, wait_for

import baton


def test_acquire_moves_to_the_next_connection(proxy: Proxy, node: Node) -> None:
    with baton.Client(proxy.addr) as client:
        assert client.query("warm") is None
        proxy.cut_on_request("A fo/1 ")  # that request never reaches the server
        lock = client.acquire("fo/1", lease=10.0, wait=5.0)
        assert any(e.startswith("cut-request A fo/1 ") for e in proxy.events)
        h = client.query("fo/1")
        assert h is not None and h.token == lock.token and h.owner == lock.owner
        assert lock.release()


def test_lost_answer_retry_returns_the_same_grant(proxy: Proxy, node: Node) -> None:
    with baton.Client(proxy.addr) as client:
        assert client.query("warm") is None
        proxy.cut_on_answer("A lost/1 OK")  # granted, but the answer never arrives
        lock = client.acquire("lost/1", lease=10.0, wait=5.0)
        cut = [e for e in proxy.events if e.startswith("cut-answer A lost/1 OK")]
        assert len(cut) == 1
        assert lock.token == int(cut[0].split()[-1])  # the first grant, not a new one
        h = client.query("lost/1")
        assert h is not None and h.token == lock.token and h.owner == lock.owner
        assert h.remaining is not None and h.remaining > 9.0  # renewed by the retry
        assert lock.release()
        assert client.query("lost/1") is None


def test_heartbeat_gives_up_a_silent_connection(proxy: Proxy, node: Node) -> None:
    with baton.Client(proxy.addr) as client:
        assert client.query("warm") is None
        proxy.freeze_on("A hb/1 OK")  # the server seems to hang after granting
        t0 = time.monotonic()
        lock = client.acquire("hb/1", lease=10.0, wait=5.0)
        elapsed = time.monotonic() - t0
        frozen = proxy.frozen_pairs()
        assert len(frozen) == 1
        # Rescued by the stall detection (0.5 s, then a heartbeat, 1.5 s in all), not
        # by anything quicker or slower.
        assert 1.3 <= elapsed < 3.5, elapsed
        assert frozen[0].client_closed.wait(2.0), "the client did not close the silent one"
        held = frozen[0].held.decode()
        assert held.startswith(f"A hb/1 OK {lock.token}")
        assert "Q __baton_heartbeat__" in held  # the heartbeat was sent and answered
        assert lock.release()


def test_release_is_retried_through_an_outage(proxy: Proxy, node: Node) -> None:
    with baton.Client(proxy.addr) as client:
        lock = client.acquire("rel/1", lease=30.0)
        proxy.block()
        threading.Timer(1.0, proxy.unblock).start()
        t0 = time.monotonic()
        assert lock.release() is True
        assert time.monotonic() - t0 < 5.5
        assert raw_lines(node.addr, ["Q rel/1"]) == ["Q rel/1 FREE"]


def test_release_gives_up_after_5s(proxy: Proxy, node: Node) -> None:
    with baton.Client(proxy.addr) as client:
        lock = client.acquire("rel/2", lease=30.0)
        proxy.block()
        t0 = time.monotonic()
        with pytest.raises(baton.Unavailable):
            lock.release()
        assert 4.8 <= time.monotonic() - t0 < 7.0
        assert raw_lines(node.addr, ["Q rel/2"])[0].startswith("Q rel/2 HELD")


class _GiveUp(Exception):
    pass


def test_a_grant_after_the_caller_gave_up_is_released(node: Node) -> None:
    """An acquire interrupted while it waits keeps its place in the (op, key) pairing;
    its late grant is released, and the next acquire of the key on the same connections
    gets its own answer."""
    with baton.Client(node.addr) as client, baton.Client(node.addr) as other:
        holder = other.acquire("ab/1", lease=30.0)

        def handler(signum: int, frame: object) -> None:
            raise _GiveUp

        old = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(_GiveUp):
                client.acquire("ab/1", lease=30.0, wait=None)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        # Both waiters queue behind the holder: the given-up one first.
        got: list[baton.Lock] = []
        t = threading.Thread(target=lambda: got.append(client.acquire("ab/1", lease=30.0,
                                                                      wait=10.0)))
        t.start()
        time.sleep(0.3)
        assert holder.release()
        t.join(timeout=10)
        assert got, "the second acquire got no answer (paired with the wrong request?)"
        lock = got[0]
        # The abandoned acquire (lease 30 s) was queued first: had the client not
        # released its grant, this acquire (wait 10 s) would have timed out.
        assert lock.token > holder.token + 1
        h = client.query("ab/1")
        assert h is not None and h.token == lock.token and h.owner == lock.owner
        assert lock.release()
        wait_for(lambda: client.query("ab/1") is None, 5.0, "the key to be free")


def test_interrupted_while_its_answer_is_lost_leaves_nothing_held(proxy: Proxy,
                                                                   node: Node) -> None:
    """The grant is made but its answer never arrives (the connection hangs, then is
    closed by the heartbeat), and the caller was interrupted meanwhile: the client takes
    the grant back with its owner on another connection and releases it."""
    with baton.Client(proxy.addr) as client:
        assert client.query("warm") is None
        proxy.freeze_on("A amb/2 OK")

        def handler(signum: int, frame: object) -> None:
            raise _GiveUp

        old = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # before the heartbeat gives up (1.5 s)
            with pytest.raises(_GiveUp):
                client.acquire("amb/2", lease=60.0, wait=5.0)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert proxy.frozen_pairs()
        assert raw_lines(node.addr, ["Q amb/2"])[0].startswith("Q amb/2 HELD")
        wait_for(lambda: raw_lines(node.addr, ["Q amb/2"]) == ["Q amb/2 FREE"], 8.0,
                 "the unseen grant released")
