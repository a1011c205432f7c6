"""C - (protocol 1.3): members() and the address refresh, for both clients.

Every scenario runs once with baton.Client and once with baton.aio.Client (through a
driver that runs the asyncio client on a loop of its own), against scripted fake servers
(tests/fakeserver.py); one test asks real batond processes and is skipped while the
server does not answer C -.
"""

from __future__ import annotations

import asyncio
import socket

import drivers
import pytest
from fakeserver import FakeServer, Script, plain
from servers import Node, Proxy, wait_for

import baton
import baton._client
import baton._core
import baton.aio


class Driver(drivers.Driver):
    """The calls of C - and of the pool, on a client of either kind."""

    def query(self, key: str) -> baton.Holder | None:
        if self.sync is not None:
            return self.sync.query(key)
        return self.run(self.aio.query(key))

    def members(self) -> list[str]:
        if self.sync is not None:
            return self.sync.members()
        return self.run(self.aio.members())

    def addrs(self) -> list[str]:
        """The addresses of the pool's connections (retired ones left out), sorted."""
        if self.sync is not None:
            with self.sync._mu:
                return sorted(c.addr for c in self.sync._pool.live())

        async def get() -> list[str]:
            return sorted(c.addr for c in self.aio._pool.live())

        return self.run(get())

    def refresh_supported(self) -> bool | None:
        if self.sync is not None:
            return self.sync._refresh_supported
        return self.aio._refresh_supported


def members_script(members: list[str]) -> Script:
    """plain, and C - answered with the current contents of members."""

    def script(server: FakeServer, line: str) -> list[str]:
        if line == "C -":
            return ["C - OK " + ",".join(members)]
        return plain(server, line)

    return script


def test_refresh_on_connect_adds_the_members(kind: str, fakes: list[FakeServer]) -> None:
    members: list[str] = []
    a = FakeServer("a", members_script(members))
    b = FakeServer("b", members_script(members))
    fakes += [a, b]
    members += [a.addr, b.addr]
    d = Driver(kind, [a.addr])
    try:
        wait_for(lambda: d.addrs() == sorted([a.addr, b.addr]), 5.0, "b added, one a retired")
        wait_for(lambda: b.accepted >= 1 and a.open_conns() == 1, 5.0, "one connection each")
        assert d.members() == [a.addr, b.addr]
        assert d.refresh_supported() is True
        assert d.query("k") is None
    finally:
        d.close()


def test_refresh_follows_a_replaced_member(kind: str, fakes: list[FakeServer]) -> None:
    """The configured node was replaced: the client moves to the new one and stops
    dialling the old."""
    members: list[str] = []
    a = FakeServer("a", members_script(members))
    b = FakeServer("b", members_script(members))
    fakes += [a, b]
    members.append(b.addr)
    d = Driver(kind, [a.addr])
    try:
        wait_for(lambda: d.addrs() == [b.addr, b.addr], 5.0, "two connections to b")
        wait_for(lambda: a.open_conns() == 0, 5.0, "the connections to a closed")
        n = b.count("Q ")
        assert d.query("k") is None
        assert b.count("Q ") == n + 1
        assert d.members() == [b.addr]
    finally:
        d.close()


@pytest.mark.parametrize("answer", [
    "? - ERR badrequest op must be A, R, K, Q, H or M",
    "C - ERR badrequest unknown op",
])
def test_a_server_before_1_3_keeps_the_configured_list(
        kind: str, answer: str, fakes: list[FakeServer]) -> None:
    def script(server: FakeServer, line: str) -> list[str]:
        return [answer] if line == "C -" else plain(server, line)

    a = FakeServer("a", script)
    fakes.append(a)
    d = Driver(kind, [a.addr])
    try:
        assert d.query("k") is None
        wait_for(lambda: d.refresh_supported() is False, 5.0, "C - found unsupported")
        asked = a.count("C -")
        assert 1 <= asked <= 2
        assert d.addrs() == [a.addr, a.addr]
        with pytest.raises(baton.ServerError) as ei:
            d.members()
        assert ei.value.code == "badrequest"
        asked += 1
        # A lost connection and its redial ask no more.
        accepted = a.accepted
        a.drop_all()
        wait_for(lambda: a.accepted >= accepted + 2, 10.0, "both connections redialled")
        assert d.query("k") is None
        assert a.count("C -") == asked
        assert d.addrs() == [a.addr, a.addr]
    finally:
        d.close()


def test_moved_to_an_unknown_node_refreshes(kind: str, fakes: list[FakeServer]) -> None:
    members: list[str] = []
    b = FakeServer("b", members_script(members))

    def a_script(server: FakeServer, line: str) -> list[str]:
        if line.startswith("Q moved"):
            return [f"Q moved MOVED {b.addr}"]
        return members_script(members)(server, line)

    a = FakeServer("a", a_script)
    fakes += [a, b]
    members.append(a.addr)
    d = Driver(kind, [a.addr])
    try:
        wait_for(lambda: a.count("C -") >= 1, 5.0, "the first refresh")
        assert d.addrs() == [a.addr, a.addr]
        members.append(b.addr)  # b joins; the client hears of it by MOVED
        assert d.query("moved") is None  # answered by b
        # Without a refresh the pool would be a, a, b (b added for MOVED).
        wait_for(lambda: d.addrs() == sorted([a.addr, b.addr]), 5.0, "the pool = members")
    finally:
        d.close()


def test_lost_connection_and_timer_refresh(kind: str, fakes: list[FakeServer],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    members: list[str] = []
    a = FakeServer("a", members_script(members))
    fakes.append(a)
    members.append(a.addr)
    d = Driver(kind, [a.addr])
    try:
        wait_for(lambda: a.count("C -") >= 1, 5.0, "the first refresh")
        wait_for(lambda: a.open_conns() == 2, 5.0, "both connections up")
        n = a.count("C -")
        a.drop_one()
        # On the other connection, at once: well before the lost one is redialled (3 s).
        wait_for(lambda: a.count("C -") > n, 2.0, "a refresh after the lost connection")
    finally:
        d.close()
    # Every 30 s: here every 0.2 s.
    monkeypatch.setattr(baton._client, "REFRESH_INTERVAL", 0.2)
    monkeypatch.setattr(baton.aio, "REFRESH_INTERVAL", 0.2)
    d = Driver(kind, [a.addr])
    try:
        wait_for(lambda: a.count("C -") >= 1, 5.0, "the first refresh")
        n = a.count("C -")
        wait_for(lambda: a.count("C -") >= n + 3, 5.0, "three timed refreshes")
    finally:
        d.close()


def test_unanswered_c_is_given_up(kind: str, fakes: list[FakeServer],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that reads C - but never answers it: members() gives up, the client goes
    on with its configured list."""
    monkeypatch.setattr(baton._core, "ANSWER_TIMEOUT", 0.5)  # both clients

    def script(server: FakeServer, line: str) -> list[str]:
        return [] if line == "C -" else plain(server, line)

    a = FakeServer("a", script)
    fakes.append(a)
    d = Driver(kind, [a.addr])
    try:
        wait_for(lambda: d.refresh_supported() is False, 5.0, "C - given up")
        with pytest.raises(baton.Unavailable):
            d.members()
        assert d.query("k") is None
        assert d.addrs() == [a.addr, a.addr]
    finally:
        d.close()


def test_a_proxied_client_stays_behind_its_proxy(kind: str, fakes: list[FakeServer]) -> None:
    """The fault proxy of the tests puts its own address in C - answers, so that the
    tests through it keep working against a server that answers C -."""
    members: list[str] = []
    a = FakeServer("a", members_script(members))
    fakes.append(a)
    members.append(a.addr)
    proxy = Proxy(a.addr)
    try:
        d = Driver(kind, [proxy.addr])
        try:
            wait_for(lambda: a.count("C -") >= 1, 5.0, "the first refresh")
            assert d.members() == [proxy.addr]
            assert d.addrs() == [proxy.addr, proxy.addr]
        finally:
            d.close()
    finally:
        proxy.close()


def _answers_c(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.settimeout(1)
        s.sendall(b"C -\n")
        try:
            line = s.makefile("rb").readline().decode()
        except OSError:
            return False
    return line.startswith("C - OK")


def test_real_cluster_members(cluster: list[Node]) -> None:
    if not _answers_c(cluster[0].addr):
        pytest.skip("this batond does not answer C - yet (protocol 1.3)")
    want = [n.addr for n in cluster]
    with baton.Client(cluster[1].addr) as client:
        assert client.members() == want
        wait_for(lambda: sorted(c.addr for c in client._pool.live()) == sorted(want), 5.0,
                 "the pool to follow the members")

    async def aio() -> list[str]:
        async with baton.aio.Client(cluster[2].addr) as client:
            return await client.members()

    assert asyncio.run(aio()) == want
