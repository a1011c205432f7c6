"""The decisions of the client, without I/O, shared by the sync and the asyncio client:
which connection a request goes to, what an answer or a lost connection means for it (try
again, where, after how long, or give up), and how the pool follows the cluster's
membership. Each client adds only its way of waiting and of doing I/O."""

from __future__ import annotations

import os
import random
import ssl
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, NoReturn, Protocol, TypeVar

from ._errors import AcquireTimeout, AuthError, BatonError, ServerError, Unavailable
from ._pairing import ClientClosed
from ._protocol import (
    ANSWER_TIMEOUT,
    BACKOFF_MAX,
    BACKOFF_MIN,
    HEARTBEAT_KEY,
    MAX_CONNS,
    MOVED_HOPS,
    RELEASE_RETRY,
    RELEASE_WINDOW,
    UNAVAILABLE_WINDOW,
    VERSION_WINDOW,
    WATCH_PROBE_AFTER,
    WATCH_RETRY_FIRST,
    WATCH_RETRY_MAX,
    WATCH_STALL,
    AcquireRequest,
    Answer,
    Holder,
    Leader,
    check_key,
    check_owner_prefix,
    check_secret,
    holder_from_answer,
    leader_of,
    lease_ms,
    parse_addresses,
    pool_addresses,
    request_line,
)

DIALING, UP, DOWN = 0, 1, 2


@dataclass(slots=True)
class Policy:
    """How one request is retried."""

    # Give up (Unavailable) when this deadline passes while retrying; None: never.
    deadline: float | None
    # Retry every failure this often instead of failing fast (releases).
    steady: float = 0.0
    # ERR unavailable is retried until this deadline (None: for ever).
    unavailable_deadline: float | None = None
    # Recomputes the line before each attempt (acquire's wait); may raise.
    line: Callable[[], bytes] | None = None
    # Runs with the answer of an attempt its caller gave up (on the reader's side), or
    # with None when its connection was lost before the answer came.
    on_abandoned: Callable[[Answer | None], None] | None = None
    # Runs when the request ends in an exception (the caller gave up, or no connection
    # served it) after an attempt may have taken effect unseen (see Retry.ambiguous).
    on_give_up: Callable[[], None] | None = None
    # Wait at most this long for one answer, then raise Unavailable (None: as long as the
    # connection lives; the heartbeat catches a dead one).
    answer_timeout: float | None = None
    # When positive: ERR unavailable that says the cluster's version is too low for the
    # request (an S below cluster version 4) is retried this long from the first such
    # answer, then raised as Unavailable. Zero: retried as any other.
    version_window: float = 0.0


def acquire_policy(
    req: AcquireRequest,
    on_abandoned: Callable[[Answer | None], None],
    on_give_up: Callable[[], None],
) -> Policy:
    """An acquire: ERR unavailable is retried until its wait runs out, each attempt with
    what is left of the wait."""
    return Policy(
        deadline=None,
        unavailable_deadline=req.unavailable_deadline,
        line=req.line,
        on_abandoned=on_abandoned,
        on_give_up=on_give_up,
        version_window=VERSION_WINDOW if req.op == "S" else 0.0,
    )


def release_policy() -> Policy:
    """A release (and the clean-up of an acquire that gave up): retried every 200 ms for
    5 s, whatever fails."""
    return Policy(deadline=time.monotonic() + RELEASE_WINDOW, steady=RELEASE_RETRY)


def extend_policy(deadline: float | None) -> Policy:
    """An extend: ERR unavailable is retried for 5 s, and never past deadline (the
    keep-alive's: when the lease runs out)."""
    window = time.monotonic() + UNAVAILABLE_WINDOW
    return Policy(
        deadline=deadline,
        unavailable_deadline=window if deadline is None else min(window, deadline),
    )


def query_policy() -> Policy:
    return Policy(deadline=None, unavailable_deadline=time.monotonic() + UNAVAILABLE_WINDOW)


def members_policy(refresh: bool) -> Policy:
    """C -: its answer is awaited for 5 s at most; a refresh gives up after that too."""
    now = time.monotonic()
    return Policy(
        deadline=now + ANSWER_TIMEOUT if refresh else None,
        unavailable_deadline=now + UNAVAILABLE_WINDOW,
        answer_timeout=ANSWER_TIMEOUT,
    )


@dataclass(slots=True)
class Result:
    answer: Answer
    ambiguous: bool  # an earlier attempt may have taken effect


class TargetDown(Unavailable):
    """The node that MOVED named cannot be reached (try elsewhere)."""


class NoAnswer(Unavailable):
    """A request with an answer time-out got none in time."""


class Retry:
    """The state of one request's retry loop.

    The loop (sync or asyncio) asks ``pick_args`` where to send, sends, and reports what
    happened: ``on_pick_error``, ``on_lost`` or ``on_answer``, each of which raises when
    the request is over, or returns how long to pause before the next attempt
    (``on_answer`` returns None for the final answer).
    """

    def __init__(
        self,
        op: str,
        key: str,
        policy: Policy,
        conn_count: Callable[[], int],
        on_moved: Callable[[str], None],
    ) -> None:
        self.op = op
        self.key = key
        self.policy = policy
        self._conn_count = conn_count
        self._on_moved = on_moved
        self.target: str | None = None  # the node MOVED named, for the next attempt
        self.avoid: str | None = None  # the node that answered ERR unavailable
        self.drops = 0
        self.hops = 0
        self.ambiguous = False
        self.backoff = BACKOFF_MIN
        self.last_error: BaseException | None = None
        self.refused_at: float | None = None  # the first version refusal (Policy)

    def give_up(self) -> NoReturn:
        raise Unavailable(
            f"{self.op} {self.key}: no answer in time (last error: {self.last_error})"
        )

    def check_deadline(self) -> None:
        if self.policy.deadline is not None and time.monotonic() >= self.policy.deadline:
            self.give_up()

    def pause(self) -> float:
        """The pause before the next attempt: steady, or a growing backoff with jitter."""
        d = self.policy.steady
        if d <= 0:
            d = self.backoff / 2 + random.uniform(0, self.backoff / 2)
            self.backoff = min(2 * self.backoff, BACKOFF_MAX)
        if self.policy.deadline is not None:
            left = self.policy.deadline - time.monotonic()
            if left <= 0:
                self.give_up()
            d = min(d, left)
        return d

    def next_line(self, line: bytes) -> bytes:
        """The line of the next attempt: the policy's (an acquire's, with what is left of
        its wait), else line. An acquire's AcquireTimeout, once its wait ran out while a
        failure was being retried, says what that failure was."""
        if self.policy.line is None:
            return line
        try:
            return self.policy.line()
        except AcquireTimeout as e:
            if self.last_error is None:
                raise
            raise AcquireTimeout(f"{e} (retrying: {self.last_error})") from self.last_error

    def picked(self) -> None:
        self.target = self.avoid = None

    def on_pick_error(self, err: Unavailable) -> float:
        if not isinstance(err, TargetDown) and self.policy.steady <= 0:
            raise err
        self.last_error = err
        self.target = self.avoid = None
        return self.pause()

    def on_lost(self, err: BaseException) -> float:
        """The connection was lost before the answer came: the request may have taken
        effect. Another connection is tried at once, until each has failed it."""
        if isinstance(err, (ClientClosed, AuthError)):
            raise err
        self.last_error = err
        self.ambiguous = True
        self.drops += 1
        if self.policy.steady > 0:
            return self.pause()
        if self.drops >= self._conn_count():
            raise Unavailable(f"{self.op} {self.key}: {err}") from err
        return 0.0

    def on_answer(self, ans: Answer, addr: str) -> float | None:
        if ans.status == "MOVED" and ans.values:
            self.target = ans.values[0]
            self._on_moved(self.target)
            self.last_error = BatonError(f"MOVED {self.target}")
            self.hops += 1
            return self.pause() if self.hops > MOVED_HOPS else 0.0
        if ans.status == "ERR":
            code = ans.values[0] if ans.values else ""
            se = ServerError(code, ans.text)
            if code != "unavailable" and not (code == "overloaded" and self.policy.steady > 0):
                raise se
            self.last_error = se
            if code == "unavailable" and self.policy.version_window > 0 and (
                "cluster version" in ans.text
            ):
                # Refused for the cluster's version: nothing was done (ambiguous stays as
                # it was); retried for the version window, at most.
                now = time.monotonic()
                if self.refused_at is None:
                    self.refused_at = now
                ud = self.policy.unavailable_deadline
                if now - self.refused_at >= self.policy.version_window or (
                    ud is not None and now >= ud
                ):
                    raise Unavailable(f"{self.op} {self.key}: {se}") from se
                self.avoid = addr
                return self.pause()
            self.ambiguous = True
            if code == "unavailable":
                self.avoid = addr
                ud = self.policy.unavailable_deadline
                if ud is not None and time.monotonic() >= ud and self.policy.steady <= 0:
                    raise Unavailable(f"{self.op} {self.key}: {se}") from se
            return self.pause()
        return None


class Slot(Protocol):
    """What the pool needs to know of a connection."""

    addr: str
    state: int
    last_error: BaseException | None
    retired: bool

    def redial_soon(self) -> None: ...


S = TypeVar("S", bound=Slot)


class Pool(Generic[S]):
    """The connections of a client and the choice among them. Not locked: the sync client
    holds its lock around it, the asyncio one runs on one loop."""

    def __init__(self) -> None:
        self.conns: list[S] = []
        self.preferred: str | None = None
        self.rr = 0

    def live(self) -> list[S]:
        return [c for c in self.conns if not c.retired]

    def choose(self, target: str | None, avoid: str | None) -> tuple[S | None, bool]:
        """A connection that is up: to target (a MOVED address), else to the preferred
        node, else any, round robin; avoid is taken only when nothing else is up. Also
        says whether a candidate is being dialled (worth waiting for)."""
        want = target
        if want is None and self.preferred != avoid:
            want = self.preferred
        conn, dialing = None, False
        if want is not None:
            conn, dialing = self._choose(want, None)
        if conn is None and target is None:
            conn, d2 = self._choose(None, avoid)
            dialing = dialing or d2
            if conn is None and not dialing and avoid is not None:
                conn, dialing = self._choose(None, None)
        return conn, dialing

    def _choose(self, addr: str | None, avoid: str | None) -> tuple[S | None, bool]:
        n = len(self.conns)
        if n == 0:
            return None, False
        start = self.rr % n
        self.rr += 1
        dialing = False
        for i in range(n):
            c = self.conns[(start + i) % n]
            if c.retired:
                continue
            if (addr is not None and c.addr != addr) or (avoid is not None and c.addr == avoid):
                continue
            if c.state == UP:
                return c, False
            if c.state == DIALING:
                dialing = True
        return None, dialing

    def needs_conn(self, target: str) -> bool:
        """MOVED named a node the pool has no connection to: one is to be added."""
        if any(c.addr == target and not c.retired for c in self.conns):
            return False
        if len(self.conns) >= MAX_CONNS:
            raise Unavailable(f"MOVED to {target}: too many connections")
        return True

    def nothing_up(self, target: str | None) -> BaseException:
        """The error when no connection is up and none is being dialled (a connection to
        target, a node MOVED named, is redialled soon for the next attempt)."""
        if target is not None:
            for c in self.conns:
                if c.addr == target:
                    c.redial_soon()
        for c in self.conns:
            if (target is None or c.addr == target) and isinstance(c.last_error, AuthError):
                return c.last_error
        if target is not None:
            return TargetDown(f"{target}, named by MOVED, is not reachable")
        reasons = sorted(
            {f"{c.addr}: {c.last_error or 'not connected yet'}" for c in self.live()}
        )
        return Unavailable("cannot connect: " + "; ".join(reasons))

    def plan(self, members: Sequence[str]) -> tuple[list[str], list[S]]:
        """Following the membership: the addresses to open connections to and the
        connections to retire, so that the pool holds one connection per member (two to a
        lone one)."""
        want = pool_addresses(list(members))[:MAX_CONNS]
        keep: list[S] = []
        retire: list[S] = []
        for c in self.live():
            if c.addr in want:
                want.remove(c.addr)
                keep.append(c)
            else:
                retire.append(c)
        if self.preferred is not None and self.preferred not in members:
            self.preferred = None
        return want, retire


def dial_wait(deadline: float | None) -> float:
    """How long to wait for a connection being dialled before looking again; raises
    Unavailable once deadline has passed."""
    timeout = 0.25
    if deadline is not None:
        timeout = min(timeout, deadline - time.monotonic())
        if timeout <= 0:
            raise Unavailable("no connection came up in time")
    return timeout


def is_badrequest(err: BaseException) -> bool:
    return isinstance(err, ServerError) and err.code == "badrequest"


class WatchMoved(Exception):
    """A watch ended with ``W <key> MOVED <addr>``: watch again there."""

    def __init__(self, addr: str) -> None:
        super().__init__(f"MOVED {addr}")
        self.addr = addr


class WatchLoop:
    """The decisions of one watch (W and U, protocol 1.4), without I/O: where to watch
    next, what a line means, how long to pause after the watch ended on a node.

    A watch runs on a connection of its own. When its node stops leading the key (MOVED)
    or the connection is lost, it is started again (on the node MOVED named, else the
    node that last said it leads, then each address in turn), with a backoff from 50 ms
    doubling to 1 s while it fails; the first state on the new node is always yielded.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.kraw = check_key(key)
        self.watch_line = request_line("W", self.kraw)
        self.unwatch_line = request_line("U", self.kraw)
        self.probe_line = request_line("Q", HEARTBEAT_KEY)
        self.to: str | None = None  # the node MOVED named
        self.turn = 0
        self.backoff = WATCH_RETRY_FIRST
        self.served = False  # the current session yielded a state

    def next_addr(self, preferred: str | None, addrs: Sequence[str]) -> str:
        """The node to watch on next: the one MOVED named, else (on the first try) the
        preferred one, else each address in turn."""
        turn, self.turn = self.turn, self.turn + 1
        self.served = False
        if self.to is not None:
            addr, self.to = self.to, None
            return addr
        if turn == 0 and preferred is not None:
            return preferred
        uniq = list(dict.fromkeys(addrs))
        return uniq[turn % len(uniq)]

    def state(self, ans: Answer) -> tuple[bool, Holder | None]:
        """What a line read on the watch's connection means: (True, the state) for a state
        line, (False, None) for a line to skip (U's OK, a heartbeat's answer). Raises
        WatchMoved, AuthError, or ServerError for ERR."""
        if ans.op == "H" and ans.status == "ERR" and ans.values[:1] == ["auth"]:
            raise AuthError("the server refused the secret (H)")
        if ans.op != "W" or ans.key != self.key:
            return False, None
        if ans.status == "MOVED" and ans.values:
            raise WatchMoved(ans.values[0])
        if ans.status == "ERR":
            raise ServerError(ans.values[0] if ans.values else "", ans.text)
        st = holder_from_answer(self.key, ans)
        self.served = True
        return True, st

    def ended(self, err: BaseException) -> float:
        """The watch ended on its node with err: the pause before the next try (raises err
        when it is not worth another: a refused secret, an ERR other than unavailable or
        overloaded, say badrequest from a server before 1.4)."""
        if isinstance(err, WatchMoved):
            self.to = err.addr
            self.backoff = WATCH_RETRY_FIRST
            return 0.0
        if isinstance(err, AuthError):
            raise err
        if isinstance(err, ServerError) and err.code not in ("unavailable", "overloaded"):
            raise err
        if self.served:
            self.backoff = WATCH_RETRY_FIRST
        d = self.backoff
        self.backoff = min(2 * self.backoff, WATCH_RETRY_MAX)
        return d


class WatchLiveness:
    """Whether a watch's node still answers: after WATCH_PROBE_AFTER without a byte a
    heartbeat (``Q``) goes out, and with nothing back within WATCH_STALL the connection
    counts as lost (a node cut off or paused would otherwise leave the watch silent)."""

    def __init__(self, now: float) -> None:
        self.last_read = now
        self.probe_at: float | None = None

    def read(self, now: float) -> None:
        self.last_read = now
        self.probe_at = None

    def tick(self, now: float) -> bool:
        """True: send a heartbeat now. Raises ConnectionError once the node is silent."""
        if self.probe_at is None:
            if now - self.last_read >= WATCH_PROBE_AFTER:
                self.probe_at = now
                return True
            return False
        if now - self.probe_at >= WATCH_STALL:
            raise ConnectionError(
                f"watch: nothing read for {now - self.last_read:.1f}s, not even a heartbeat"
            )
        return False


class ElectionBase:
    """Leader election on one key, sync or asyncio: the leader is the holder of the key's
    lock, and its value is the owner its acquire named."""

    def __init__(self, key: str, lease: float) -> None:
        check_key(key)
        lease_ms(lease)
        self._key = key
        self._lease = lease

    @property
    def key(self) -> str:
        return self._key

    @property
    def lease(self) -> float:
        return self._lease

    def __repr__(self) -> str:
        mod = type(self).__module__
        mod = "baton" if mod.startswith("baton._") else mod
        return f"<{mod}.Election key={self._key!r} lease={self._lease}>"


class LeaderFilter:
    """observe's mapping of watched states to leaders: consecutive duplicates (a leader
    seen again after the watch started anew) are dropped."""

    def __init__(self) -> None:
        self._first = True
        self._last: Leader | None = None

    def feed(self, state: Holder | None) -> tuple[bool, Leader | None]:
        """(whether to yield, the leader)."""
        ld = leader_of(state)
        if not self._first and ld == self._last:
            return False, ld
        self._first, self._last = False, ld
        return True, ld


class ClientBase:
    """What the sync and the asyncio client share: their arguments, checked, and the watch
    for a fork (a child process starts afresh: ``_reset_after_fork``)."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        secret: str | None,
        ssl_context: ssl.SSLContext | None,
        owner_prefix: str,
        dial_timeout: float,
    ) -> None:
        self._addresses = parse_addresses(addresses)
        if secret is None:
            secret = os.environ.get("BATON_AUTH") or None
        self._secret = check_secret(secret) if secret is not None else None
        self._ssl_context = ssl_context
        self._owner_prefix = check_owner_prefix(owner_prefix)
        self._dial_timeout = dial_timeout
        self._pid = os.getpid()

    def _watch_fork(self) -> None:
        """Once the client is set up: a child after fork resets it at once."""
        _clients.add(self)

    def _reset_after_fork(self) -> None:
        """In a child after fork: drops the parent's connections and background work
        without touching the parent's sessions, and starts afresh (sets ``_pid``)."""
        raise NotImplementedError

    def _check_fork(self) -> None:
        """For a fork that the at-fork hook did not see."""
        if self._pid != os.getpid():
            self._reset_after_fork()


_clients: weakref.WeakSet[ClientBase] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for c in list(_clients):
        c._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
