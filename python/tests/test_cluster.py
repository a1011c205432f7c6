"""A 3-node cluster: MOVED, a killed leader, a paused leader."""

from __future__ import annotations

import time

import pytest
from servers import Node, leader, wait_for

import baton


def settled_leader(nodes: list[Node]) -> Node:
    """The first node in priority order, once it leads: a cluster may elect another first
    and hand leadership over to it within seconds, which would move the leader under a
    test that looks at MOVED."""
    wait_for(nodes[0].leads, 15.0, "the first node in priority order to lead")
    return nodes[0]


def test_moved_is_followed_and_the_leader_preferred(cluster: list[Node]) -> None:
    lead = settled_leader(cluster)
    follower = next(n for n in cluster if n is not lead)
    with baton.Client(follower.addr) as client:
        lock = client.acquire("mv/1", lease=10.0)
        assert client._preferred == lead.addr
        assert any(c.addr == lead.addr for c in client._conns)
        h = client.query("mv/1")
        assert h is not None and h.token == lock.token
        assert lock.release()


def test_killed_leader(cluster: list[Node]) -> None:
    lead = leader(cluster)
    with baton.Client([n.addr for n in cluster]) as client:
        lock = client.acquire("kl/1", lease=30.0)
        lead.kill()  # SIGKILL
        t0 = time.monotonic()
        h = client.query("kl/1")  # committed: survives the leader
        assert h is not None and h.token == lock.token and h.owner == lock.owner
        lock.extend(lease=30.0)
        assert lock.release()
        again = client.acquire("kl/1", lease=5.0, wait=5.0)
        assert again.token > lock.token  # tokens keep growing across failover
        assert again.release()
        assert time.monotonic() - t0 < 15.0


def test_paused_leader(cluster: list[Node]) -> None:
    lead = leader(cluster)
    with baton.Client([n.addr for n in cluster]) as client:
        lock = client.acquire("pl/1", lease=30.0)
        lead.pause()  # SIGSTOP; the fixture's kill resumes it first
        try:
            t0 = time.monotonic()
            h = client.query("pl/1")
            assert h is not None and h.token == lock.token
            assert lock.release()
            assert time.monotonic() - t0 < 15.0
        finally:
            lead.resume()


def test_unavailable_without_a_majority(cluster: list[Node]) -> None:
    lead = leader(cluster)
    others = [n for n in cluster if n is not lead]
    with baton.Client(lead.addr) as client:
        assert client.query("um/1") is None
        for n in others:
            n.kill()
        t0 = time.monotonic()
        with pytest.raises(baton.BatonError):
            client.acquire("um/1", lease=5.0, wait=1.0)
        assert time.monotonic() - t0 < 8.0
