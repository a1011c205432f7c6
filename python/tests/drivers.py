"""A client of either kind, sync or asyncio, behind blocking calls: the tests that run
one scenario with both clients drive them through it (test_members, test_shared)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import baton
import baton.aio

T = TypeVar("T")


class Driver:
    """One client, baton.Client or baton.aio.Client (on an event loop of its own, in a
    thread), of addrs. Subclasses add the blocking calls their tests need, through run."""

    def __init__(self, kind: str, addrs: list[str] | str) -> None:
        self.kind = kind
        self.loop: asyncio.AbstractEventLoop | None = None
        if kind == "sync":
            self.sync: baton.Client | None = baton.Client(addrs)
            return
        self.sync = None
        loop = asyncio.new_event_loop()
        self.loop = loop
        self.thread = threading.Thread(target=loop.run_forever, daemon=True)
        self.thread.start()
        self.aio = baton.aio.Client(addrs)
        self.run(self.aio.__aenter__())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs coro on the asyncio client's loop and returns its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
            return
        assert self.loop is not None
        self.run(self.aio.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()
