from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeServer
from servers import Node, Proxy, go_binary, start_cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def batond(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """batond, built once per session from this repository (or BATON_TEST_BATOND, a
    batond built before, say from another commit while the tree does not build)."""
    prebuilt = os.environ.get("BATON_TEST_BATOND")
    if prebuilt:
        return Path(prebuilt)
    out = tmp_path_factory.mktemp("bin") / "batond"
    env = dict(os.environ)
    env["GOFLAGS"] = ("-buildvcs=false " + env.get("GOFLAGS", "")).strip()
    subprocess.run([go_binary(), "build", "-o", str(out), "./cmd/batond"], cwd=REPO,
                   env=env, check=True, timeout=600)
    return out


@pytest.fixture
def node(batond: Path, tmp_path: Path) -> Iterator[Node]:
    """One single-node batond on free ports."""
    nodes = start_cluster(batond, tmp_path, 1)
    try:
        yield nodes[0]
    finally:
        for nd in nodes:
            nd.kill()


@pytest.fixture
def cluster(batond: Path, tmp_path: Path) -> Iterator[list[Node]]:
    """A 3-node cluster (one shard) on free ports."""
    nodes = start_cluster(batond, tmp_path, 3)
    try:
        yield nodes
    finally:
        for nd in nodes:
            nd.kill()


@pytest.fixture
def proxy(node: Node) -> Iterator[Proxy]:
    p = Proxy(node.addr)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture(params=["sync", "aio"])
def kind(request: pytest.FixtureRequest) -> str:
    """Which client a test drives (tests/drivers.py): each test runs with both."""
    return str(request.param)


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    """The fake servers a test starts, closed after it."""
    made: list[FakeServer] = []
    yield made
    for f in made:
        f.close()
