"""H (protocol 1.2): the secret, from secret= or BATON_AUTH."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import Node, start_cluster

import baton
import baton.aio


@pytest.fixture
def secured(batond: Path, tmp_path: Path) -> Iterator[Node]:
    nodes = start_cluster(batond, tmp_path, 1, secret="s3cret")
    try:
        yield nodes[0]
    finally:
        nodes[0].kill()


def test_secret(secured: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATON_AUTH", raising=False)
    with baton.Client(secured.addr, secret="s3cret") as client:
        lock = client.acquire("auth/1", lease=5.0)
        assert lock.release()
    with baton.Client(secured.addr, secret="wrong") as client, pytest.raises(baton.AuthError):
        client.query("auth/1")
    with baton.Client(secured.addr) as client, pytest.raises(baton.AuthError):
        client.query("auth/1")


def test_secret_from_the_environment(secured: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_AUTH", "s3cret")
    with baton.Client(secured.addr) as client:
        assert client.query("auth/2") is None
    # secret= wins over BATON_AUTH.
    monkeypatch.setenv("BATON_AUTH", "wrong")
    with baton.Client(secured.addr, secret="s3cret") as client:
        assert client.query("auth/2") is None


async def test_aio_secret(secured: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATON_AUTH", raising=False)
    async with baton.aio.Client(secured.addr, secret="s3cret") as client:
        lock = await client.acquire("auth/3", lease=5.0)
        assert await lock.release()
    async with baton.aio.Client(secured.addr, secret="wrong") as client:
        with pytest.raises(baton.AuthError):
            await client.query("auth/3")
    async with baton.aio.Client(secured.addr) as client:
        with pytest.raises(baton.AuthError):
            await client.query("auth/3")
    monkeypatch.setenv("BATON_AUTH", "s3cret")
    async with baton.aio.Client(secured.addr) as client:
        assert await client.query("auth/3") is None
