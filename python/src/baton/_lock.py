"""A held lock: one grant of a key."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import BatonError, LockLost, NotHeld

if TYPE_CHECKING:
    from ._client import Client

KEEP_ALIVE_RETRY = 0.2  # a failed extend of the keep-alive is retried this often


class LockBase:
    """What every lock knows of its grant, sync or asyncio: the key, token and owner, and
    whether it still holds, tracked with the client's own clock, conservatively: from
    when the acquire (or the last confirmed extend) was sent, not from when the server
    granted it."""

    def __init__(self, key: str, token: int, owner: str, lease: float, since: float) -> None:
        self._key = key
        self._token = token
        self._owner = owner
        self._mu = threading.Lock()
        self._lease = lease
        self._expires = since + lease
        self._lost = False
        self._released = False

    @property
    def key(self) -> str:
        return self._key

    @property
    def token(self) -> int:
        """The grant's fencing token: greater than every token the key had before."""
        return self._token

    @property
    def owner(self) -> str:
        """The owner the acquire named (shown by ``query`` for the holder)."""
        return self._owner

    @property
    def lost(self) -> bool:
        """True once the lock is lost: an extend was answered NOTHELD, or its lease ran out
        (by the client's clock) before an extend was confirmed. False after a release."""
        with self._mu:
            if self._released:
                return self._lost
            if not self._lost and time.monotonic() >= self._expires:
                self._lost = True
            return self._lost

    def ensure_held(self) -> None:
        """Raises LockLost once the lock is lost, NotHeld after it was released."""
        if self.lost:
            raise LockLost(f"lock {self._key} (token {self._token}) was lost")
        self._check_not_released()

    def _check_not_released(self) -> None:
        with self._mu:
            if self._released:
                raise NotHeld(f"lock {self._key} (token {self._token}) was released")

    def _mark_lost(self) -> None:
        with self._mu:
            self._lost = True

    def _extended(self, sent: float, lease: float) -> None:
        """An extend sent at ``sent`` was confirmed: the lease counts from then."""
        with self._mu:
            if not self._lost and not self._released:
                self._lease = lease
                self._expires = max(self._expires, sent + lease)

    def _released_as(self, ok: bool) -> bool:
        """The release was answered: True (no longer held) or False (it had lost the key)."""
        with self._mu:
            self._released = True
            if not ok:
                self._lost = True
        return ok

    def _release_done(self) -> bool | None:
        """The result of an earlier release, or None when there was none."""
        with self._mu:
            if self._released:
                return not self._lost
        return None

    def _keep_alive_due(self) -> tuple[float, float, float] | None:
        """For the keep-alive: (lease, when the lease runs out, when to extend next), or
        None once the lock is lost or released. Extends every lease/3."""
        with self._mu:
            if self._lost or self._released:
                return None
            lease, expires = self._lease, self._expires
        return lease, expires, expires - lease + max(lease / 3, 0.001)

    def __repr__(self) -> str:
        mod = type(self).__module__
        mod = "baton" if mod.startswith("baton._") else mod
        return (
            f"<{mod}.{type(self).__qualname__} "
            f"key={self._key!r} token={self._token} owner={self._owner!r}>"
        )


class Lock(LockBase):
    """One grant of a key, as ``Client.acquire`` returns it. Safe to use from several
    threads (any thread may release it).

    The client tracks the lease with its own clock, conservatively: from when the
    acquire (or the last confirmed extend) was sent, not from when the server granted it.
    """

    def __init__(
        self, client: Client, key: str, token: int, owner: str, lease: float, since: float
    ) -> None:
        super().__init__(key, token, owner, lease, since)
        self._client = client
        self._ka_stop: threading.Event | None = None
        self._ka_thread: threading.Thread | None = None

    def extend(self, *, lease: float) -> None:
        """Sets the lease to ``lease`` seconds from now; a running keep-alive renews this
        new lease from then on. Raises NotHeld (and the lock counts as lost) when the grant
        no longer holds the key."""
        self._check_not_released()
        self._extend(lease, None)

    def _extend(self, lease: float, deadline: float | None) -> None:
        sent = time.monotonic()
        try:
            self._client._extend(self._key, self._token, lease, deadline)
        except NotHeld:
            self._mark_lost()
            raise
        self._extended(sent, lease)

    def release(self) -> bool:
        """Releases the lock (sending its token, so it can never free someone else's grant)
        and stops the keep-alive.

        Returns True once this grant no longer holds the key, False when it had already
        lost it. Retried every 200 ms for 5 s when no connection serves it; then raises
        Unavailable. A second release after a successful one returns True.
        """
        self._stop_keep_alive()
        done = self._release_done()
        if done is not None:
            return done
        return self._released_as(self._client._release(self._key, self._token))

    def keep_alive(self) -> None:
        """Extends the lease every lease/3 in a background thread until the lock is
        released or lost. Calling it again does nothing."""
        with self._mu:
            if self._ka_thread is not None or self._released or self._lost:
                return
            stop = threading.Event()
            t = threading.Thread(
                target=self._keep_alive, args=(stop,), name=f"baton-keepalive-{self._key}",
                daemon=True,
            )
            self._ka_stop, self._ka_thread = stop, t
        t.start()

    def _stop_keep_alive(self) -> None:
        with self._mu:
            stop, t = self._ka_stop, self._ka_thread
        if stop is not None and t is not None:
            stop.set()
            if t is not threading.current_thread():
                t.join(timeout=10.0)

    def _keep_alive(self, stop: threading.Event) -> None:
        closing = self._client._closing
        while True:
            due = self._keep_alive_due()
            if due is None:
                return
            lease, expires, next_at = due
            if stop.wait(max(0.0, next_at - time.monotonic())):
                return
            while True:
                if stop.is_set():
                    return
                if closing.is_set() or time.monotonic() >= expires:
                    self._mark_lost()
                    return
                try:
                    self._extend(lease, expires)
                    break
                except NotHeld:
                    return  # _extend marked it lost
                except BatonError:
                    pass
                if stop.wait(KEEP_ALIVE_RETRY):
                    return

    def __enter__(self) -> Lock:
        self.ensure_held()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
