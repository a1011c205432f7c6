"""TLS (protocol 1.2) against real batond processes: ``ssl_context=`` on both clients, a
server that wants client certificates, and TLS with a secret."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from servers import Node, free_ports, start_cluster, wait_for
from tlsfiles import CA, Cert

import baton
import baton.aio

SECRET = "tls-s3cret"
# What a refused client certificate looks like in the error: the server's TLS alert (no
# certificate, or one of a CA it does not trust), or, when a write raced the alert and
# lost it, the client's own explanation.
REFUSED = "CERTIFICATE_REQUIRED|UNKNOWN_CA|want a client certificate"


@dataclass
class Certs:
    server_ca: CA
    server: Cert
    client_ca: CA
    client: Cert
    stranger: Cert  # a client certificate of a CA the server does not trust


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    server_ca, client_ca, other_ca = CA(d, "server"), CA(d, "clients"), CA(d, "other")
    return Certs(server_ca, server_ca.issue("server"), client_ca, client_ca.issue("app"),
                 other_ca.issue("stranger"))


@dataclass
class TLSNode:
    node: Node
    addr: str  # the TLS client address


def _listening(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def start_tls_node(batond: Path, root: Path, certs: Certs, *, client_ca: bool = False,
                   secret: str = "") -> TLSNode:
    """A single node serving TLS too. --tls-peers names its TLS address, so that C - on a
    TLS connection names it (and not the plain port, which a TLS client cannot use)."""
    tls_addr = f"127.0.0.1:{free_ports(1)[0]}"
    extra = ["--tls-peers", tls_addr, "--tls-cert", str(certs.server.cert),
             "--tls-key", str(certs.server.key)]
    if client_ca:
        extra += ["--tls-client-ca", str(certs.client_ca.file)]
    nd = start_cluster(batond, root, 1, extra=extra, secret=secret)[0]
    try:
        wait_for(lambda: _listening(tls_addr), 10.0, "the TLS listener")
    except BaseException:
        nd.kill()
        raise
    return TLSNode(nd, tls_addr)


@pytest.fixture
def tls_node(batond: Path, tmp_path: Path, certs: Certs) -> Iterator[TLSNode]:
    n = start_tls_node(batond, tmp_path, certs)
    try:
        yield n
    finally:
        n.node.kill()


@pytest.fixture
def mtls_node(batond: Path, tmp_path: Path, certs: Certs) -> Iterator[TLSNode]:
    n = start_tls_node(batond, tmp_path, certs, client_ca=True)
    try:
        yield n
    finally:
        n.node.kill()


@pytest.fixture
def tls_secret_node(batond: Path, tmp_path: Path, certs: Certs,
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[TLSNode]:
    monkeypatch.delenv("BATON_AUTH", raising=False)
    n = start_tls_node(batond, tmp_path, certs, secret=SECRET)
    try:
        yield n
    finally:
        n.node.kill()


def context(certs: Certs, client: Cert | None = None) -> ssl.SSLContext:
    """A context that trusts the server's CA (and presents client, if given)."""
    ctx = ssl.create_default_context(cafile=str(certs.server_ca.file))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def test_tls(tls_node: TLSNode, certs: Certs) -> None:
    with baton.Client(tls_node.addr, ssl_context=context(certs)) as client:
        lock = client.acquire("tls/1", lease=10.0, wait=5.0)
        h = client.query("tls/1")
        assert h is not None and (h.token, h.owner) == (lock.token, lock.owner)
        with client.lock("tls/2", lease=10.0) as l2:
            assert l2.token > 0
        assert lock.release() is True
        assert client.query("tls/1") is None
        # C - on a TLS connection names the TLS address (--tls-peers), which the client
        # keeps using.
        assert client.members() == [tls_node.addr]
        assert {c.addr for c in client._pool.live()} == {tls_node.addr}
        assert client.query("tls/2") is None


def test_tls_port_is_tls_and_checks_the_server(tls_node: TLSNode, certs: Certs) -> None:
    # Plain text on the TLS port is not served.
    with baton.Client(tls_node.addr) as client, pytest.raises(baton.Unavailable):
        client.query("tls/plain")
    # A context that does not trust the server's CA refuses it at the handshake.
    with baton.Client(tls_node.addr, ssl_context=ssl.create_default_context()) as client:
        with pytest.raises(baton.Unavailable, match="CERTIFICATE_VERIFY_FAILED"):
            client.query("tls/untrusted")
    # The certificate must name the host of the address (it names 127.0.0.1 only).
    port = tls_node.addr.rpartition(":")[2]
    with baton.Client(f"localhost:{port}", ssl_context=context(certs)) as client:
        with pytest.raises(baton.Unavailable, match="CERTIFICATE_VERIFY_FAILED"):
            client.query("tls/hostname")


async def test_aio_tls(tls_node: TLSNode, certs: Certs) -> None:
    async with baton.aio.Client(tls_node.addr, ssl_context=context(certs)) as client:
        lock = await client.acquire("tls/a1", lease=10.0, wait=5.0)
        h = await client.query("tls/a1")
        assert h is not None and (h.token, h.owner) == (lock.token, lock.owner)
        async with client.lock("tls/a2", lease=10.0) as l2:
            assert l2.token > 0
        assert await lock.release() is True
        assert await client.query("tls/a1") is None
        assert await client.members() == [tls_node.addr]
        assert {c.addr for c in client._pool.live()} == {tls_node.addr}
    async with baton.aio.Client(tls_node.addr) as client:
        with pytest.raises(baton.Unavailable):
            await client.query("tls/plain")
    async with baton.aio.Client(tls_node.addr, ssl_context=ssl.create_default_context()) as c:
        with pytest.raises(baton.Unavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await c.query("tls/untrusted")


def test_client_certificate(mtls_node: TLSNode, certs: Certs) -> None:
    """A server with --tls-client-ca serves a client with a certificate of that CA, and
    no client without one or with one of another CA."""
    with baton.Client(mtls_node.addr, ssl_context=context(certs, certs.client)) as client:
        lock = client.acquire("mtls/1", lease=10.0, wait=5.0)
        assert lock.release() is True
    for who in (None, certs.stranger):
        with baton.Client(mtls_node.addr, ssl_context=context(certs, who)) as client:
            with pytest.raises(baton.Unavailable, match=REFUSED) as ei:
                client.query("mtls/1")
            assert mtls_node.addr in str(ei.value)
    # The node still serves the client with a certificate.
    with baton.Client(mtls_node.addr, ssl_context=context(certs, certs.client)) as client:
        assert client.query("mtls/1") is None


async def test_aio_client_certificate(mtls_node: TLSNode, certs: Certs) -> None:
    ctx = context(certs, certs.client)
    async with baton.aio.Client(mtls_node.addr, ssl_context=ctx) as client:
        lock = await client.acquire("mtls/a", lease=10.0, wait=5.0)
        assert await lock.release() is True
    for who in (None, certs.stranger):
        async with baton.aio.Client(mtls_node.addr, ssl_context=context(certs, who)) as client:
            with pytest.raises(baton.Unavailable, match=REFUSED) as ei:
                await client.query("mtls/a")
            assert mtls_node.addr in str(ei.value)


def test_tls_with_secret(tls_secret_node: TLSNode, certs: Certs) -> None:
    addr, ctx = tls_secret_node.addr, context(certs)
    with baton.Client(addr, ssl_context=ctx, secret=SECRET) as client:
        lock = client.acquire("tlsauth/1", lease=10.0, wait=5.0)
        assert lock.release() is True
    with baton.Client(addr, ssl_context=ctx, secret="wrong") as client:
        with pytest.raises(baton.AuthError):
            client.query("tlsauth/1")
    with baton.Client(addr, ssl_context=ctx) as client, pytest.raises(baton.AuthError):
        client.query("tlsauth/1")


async def test_aio_tls_with_secret(tls_secret_node: TLSNode, certs: Certs,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    addr, ctx = tls_secret_node.addr, context(certs)
    async with baton.aio.Client(addr, ssl_context=ctx, secret=SECRET) as client:
        lock = await client.acquire("tlsauth/a", lease=10.0, wait=5.0)
        assert await lock.release() is True
    async with baton.aio.Client(addr, ssl_context=ctx, secret="wrong") as client:
        with pytest.raises(baton.AuthError):
            await client.query("tlsauth/a")
    async with baton.aio.Client(addr, ssl_context=ctx) as client:
        with pytest.raises(baton.AuthError):
            await client.query("tlsauth/a")
    monkeypatch.setenv("BATON_AUTH", SECRET)
    async with baton.aio.Client(addr, ssl_context=ctx) as client:
        assert await client.query("tlsauth/a") is None
