"""Leader election on one key, for the sync client (``Client.election``)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import TYPE_CHECKING

from ._core import ElectionBase, LeaderFilter
from ._lock import Lock
from ._protocol import Holder, Leader, leader_of

if TYPE_CHECKING:
    from ._client import Client


class Election(ElectionBase):
    """Leader election on one key: the leader is the holder of the key's lock, and its
    value, which every candidate and observer reads, is the owner its acquire named.

    The leader's lock is kept alive, and ``lost`` / ``ensure_held()`` tell when leadership
    is lost, in time for the leader to stop acting before another candidate can be granted
    the key (the client counts the lease from when the acquire or the last extend was
    sent). A leader passes its token (``lock.token``) to what it writes to, which can
    refuse a smaller one (fencing). Made by ``Client.election``.
    """

    def __init__(self, client: Client, key: str, lease: float) -> None:
        super().__init__(key, lease)
        self._client = client

    def campaign(self, value: str, *, wait: float | None = None) -> Lock:
        """Waits until this candidate leads (for ever with ``wait=None``, else at most
        ``wait`` seconds: AcquireTimeout) and returns its leadership: a lock of the key
        with ``value`` as its owner, kept alive. ``release()`` resigns, and the next
        candidate in line leads. ``value`` names the candidate to everybody (``leader``,
        ``observe``): 1 to 64 bytes without spaces or control bytes, one candidate's own
        (a campaign with the leader's value is that leader's retry, and gets its lock
        back). Candidates are served first come, first served."""
        lk = self._client.acquire(self._key, lease=self._lease, wait=wait, owner=value)
        lk.keep_alive()
        return lk

    def leader(self) -> Leader | None:
        """Who leads now (committed), or None when nobody does."""
        return leader_of(self._client.query(self._key))

    def observe(self) -> Generator[Leader | None, None, None]:
        """Yields who leads now, then each change of leader, None when nobody leads. A
        leader seen again after the watch was started anew is not yielded twice in a
        row. Leaving the loop (or ``close()``) ends the watch under it."""
        return self._observe(self._client.watch(self._key))

    def _observe(
        self, states: Generator[Holder | None, None, None]
    ) -> Generator[Leader | None, None, None]:
        flt = LeaderFilter()
        with contextlib.closing(states) as it:
            for st in it:
                send, ld = flt.feed(st)
                if send:
                    yield ld
