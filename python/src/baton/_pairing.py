"""What one connection owes: its unanswered calls, paired with answers by ``(op, key)``,
and the watch for a server that stops answering. Shared by the sync and the asyncio
connections, which add only the I/O (and the way a caller waits)."""

from __future__ import annotations

import collections
import ssl
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from ._errors import AuthError, BatonError, Unavailable
from ._protocol import Answer

HEARTBEAT_AFTER = 0.5  # quiet this long while answers are awaited: send a heartbeat
STALL_TIMEOUT = 1.5  # quiet this long, heartbeat included: the connection is dead

PENDING, DONE, ABANDONED = 0, 1, 2  # a call's state

# The ops the client sends on its connections that an older server cannot read: C (protocol
# 1.3) and S (1.4).
UNREAD_OPS = ("C", "S")


class ConnectionLost(BatonError):
    """The connection failed before the answer came: the request may or may not have
    taken effect."""


class ClientClosed(Unavailable):
    """The client was closed: no connection serves it any more."""


class Call:
    """One request sent on one connection, waiting for its answer.

    A caller that gives up (interrupted, cancelled, timed out) leaves the call in the
    pairing, so that the answer still lands on it and not on a later request of the same
    ``(op, key)``; that answer then goes to ``on_abandoned`` (which releases a grant that
    nobody waits for any more), and so does None when the connection is lost before the
    answer came (the request may have taken effect all the same).
    """

    __slots__ = ("_mu", "answer", "error", "key", "on_abandoned", "op", "seq", "state")

    def __init__(
        self, op: str, key: str, on_abandoned: Callable[[Answer | None], None] | None = None
    ) -> None:
        self.op = op
        self.key = key
        self.answer: Answer | None = None
        self.error: BaseException | None = None
        self.state = PENDING
        self.seq = 0  # its place in the order the connection sent its calls
        # The sync client answers calls on reader threads while callers give up on
        # theirs; the lock costs the asyncio client next to nothing.
        self._mu = threading.Lock()
        self.on_abandoned = on_abandoned

    def _wake(self) -> None:
        """Tells the waiting caller that the call is done (the subclass's way)."""

    def finish(self) -> bool:
        """Marks the call done (answer or error set before); False when its caller had
        given up."""
        with self._mu:
            if self.state != PENDING:
                return False
            self.state = DONE
        self._wake()
        return True

    def deliver(self, ans: Answer) -> None:
        self.answer = ans
        if not self.finish() and self.on_abandoned is not None:
            self.on_abandoned(ans)

    def fail(self, err: BaseException) -> None:
        self.error = err
        if not self.finish() and self.on_abandoned is not None:
            self.on_abandoned(None)

    def give_up(self) -> None:
        """The caller stops waiting. An answer that already came, unread, is handed to
        on_abandoned here; one still to come, when it comes."""
        with self._mu:
            if self.state == PENDING:
                self.state = ABANDONED
                return
            if self.state == ABANDONED:
                return
            self.state = ABANDONED
        if self.answer is not None and self.on_abandoned is not None:
            self.on_abandoned(self.answer)

    @property
    def pending(self) -> bool:
        return self.state == PENDING


C = TypeVar("C", bound=Call)


class Pairing(Generic[C]):
    """The calls of one connection session that wait for their answers, and its stall
    watch. Not locked: the sync connection holds its own lock around it, the asyncio one
    runs on one loop."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], collections.deque[C]] = {}
        self._n = 0
        self._seq = 0
        self._busy_since = 0.0
        self._last_read = 0.0
        self._probing = False
        self._probe_at = 0.0
        self._probe: C | None = None

    def __len__(self) -> int:
        return self._n

    def push(self, call: C, now: float) -> None:
        if self._n == 0:
            self._busy_since = now
            self._probing = False
        self._seq += 1
        call.seq = self._seq
        pair = (call.op, call.key)
        q = self._pending.get(pair)
        if q is None:
            self._pending[pair] = q = collections.deque()
        q.append(call)
        self._n += 1

    def pop(self, ans: Answer) -> C | None:
        """The oldest call that ans answers, removed; None when ans answers nothing."""
        pair = (ans.op, ans.key)
        if pair == ("?", "-"):
            pair = self._unread(ans.text)
        q = self._pending.get(pair)
        if not q:
            return None
        call = q.popleft()
        if not q:
            del self._pending[pair]
        self._n -= 1
        return call

    def _unread(self, text: str) -> tuple[str, str]:
        """The call a server that cannot read a line at all answers, ``? - ERR badrequest
        <text>``, echoing neither op nor key: of the ops an older server cannot read (C
        before protocol 1.3, S before 1.4; every other request the client sends, any
        server reads), the oldest call still unanswered (such a server answers that line as
        soon as it reads it). The text names the ops the server reads ("op must be A, R,
        K, Q, H, C or M"), which rules those out; a text that names none rules out none."""
        known: set[str] = set()
        if text.startswith("op must be "):
            known = {f for f in text[11:].replace(",", " ").split(" ") if len(f) == 1}
        oldest: C | None = None
        for (op, _), q in self._pending.items():
            if op in UNREAD_OPS and op not in known and (oldest is None or q[0].seq < oldest.seq):
                oldest = q[0]
        return ("?", "-") if oldest is None else (oldest.op, oldest.key)

    def drain(self) -> list[C]:
        """Every unanswered call, removed (the session ended)."""
        calls = [c for q in self._pending.values() for c in q]
        self._pending.clear()
        self._n = 0
        self._probing = False
        self._probe = None
        return calls

    def read(self, now: float) -> None:
        """Bytes came in."""
        self._last_read = now

    @property
    def read_any(self) -> bool:
        """Whether anything came in during this session."""
        return self._last_read > 0

    def check(self, now: float) -> tuple[bool, str | None]:
        """The stall watch, run every tick: (send a heartbeat now, why the connection is
        dead or None). After HEARTBEAT_AFTER without a byte while answers are awaited, a
        heartbeat goes out; with nothing at all back within STALL_TIMEOUT, it is dead."""
        if self._n == 0:
            self._probing = False
            return False, None
        if self._probing and self._last_read > self._probe_at:
            self._probing = False
        quiet_since = max(self._busy_since, self._last_read)
        if not self._probing:
            if now - quiet_since < HEARTBEAT_AFTER:
                return False, None
            self._probing, self._probe_at = True, now
            # One heartbeat at a time: an unanswered one need not be followed by another.
            return self._probe is None or not self._probe.pending, None
        if now - self._probe_at >= STALL_TIMEOUT - HEARTBEAT_AFTER:
            return False, (
                f"stopped answering: nothing read for {now - quiet_since:.1f}s while "
                "requests waited, not even a heartbeat"
            )
        return False, None

    def push_probe(self, call: C, now: float) -> None:
        """A heartbeat: in the pairing like any call, so that pairing stays exact, but
        nobody waits for its answer."""
        self.push(call, now)
        self._probe = call
        self._probing, self._probe_at = True, now


def unexpected_answer(addr: str, ans: Answer) -> BaseException:
    """The error that ends a session whose server sent an answer to nothing."""
    if ans.op == "H" and ans.status == "ERR" and ans.values[:1] == ["auth"]:
        return AuthError(f"{addr} wants a secret (H)")
    return ConnectionError(f"unexpected answer from {addr}: {ans.op} {ans.key} {ans.status}")


def hello_error(addr: str, ans: Answer, line: bytes) -> BaseException | None:
    """The answer to ``H <secret>``: None when accepted."""
    if ans.op == "H" and ans.status == "ERR" and ans.values[:1] == ["auth"]:
        return AuthError(f"{addr} refused the secret")
    if not (ans.op == "H" and ans.status == "OK"):
        return ConnectionError(f"unexpected answer from {addr} to H: {line!r}")
    return None


def tls_refusal(err: BaseException) -> BaseException:
    """The error of a TLS session that the server ended before it sent anything, without a
    TLS alert that says why (a reset, an EOF: with TLS 1.3 the client's handshake is over
    before the server checked its certificate, and a write that races the server's alert
    loses it). The usual reason is a client certificate the server wants and did not get,
    or does not trust: say so."""
    if not isinstance(err, OSError) or (
        isinstance(err, ssl.SSLError) and not isinstance(err, ssl.SSLEOFError)
    ):
        return err  # not a lost connection, or an alert that says why itself
    return ConnectionError(
        f"{err} (the server ended the TLS session before it answered anything: does it "
        "want a client certificate, or not trust this one?)"
    )


def session_error(addr: str, err: BaseException, closing: bool) -> BaseException:
    """What the unanswered calls of a session that ended with err fail with."""
    if closing:
        return ClientClosed("client closed")
    if isinstance(err, AuthError):
        return err
    return ConnectionLost(f"connection to {addr} lost: {err}")
