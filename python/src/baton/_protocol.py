"""The wire protocol: validating fields, formatting requests, parsing answers."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ._errors import AcquireTimeout, BatonError, NotHeld

MAX_KEY = 250
MAX_OWNER = 64
OWNER_RANDOM_HEX = 32
MAX_OWNER_PREFIX = MAX_OWNER - OWNER_RANDOM_HEX
MAX_MS = 86_400_000
MAX_PERMITS = 1_000_000
MAX_LINE = 1024
HEARTBEAT_KEY = "__baton_heartbeat__"
# The longest unfinished answer line a connection keeps: far past any answer, so only
# a server that sends no line ends at all reaches it.
MAX_PARTIAL_LINE = 64 * 1024

# The timings CLIENTS.md sets, the same for the sync and the asyncio client.
RELEASE_WINDOW = 5.0  # a release is retried this long...
RELEASE_RETRY = 0.2  # ...this often
UNAVAILABLE_WINDOW = 5.0  # ERR unavailable is retried this long (but by acquires)
MOVED_HOPS = 3  # MOVED answers followed at once before backing off
BACKOFF_MIN = 0.025
BACKOFF_MAX = 1.0
MAX_CONNS = 64
DEFAULT_DIAL_TIMEOUT = 5.0
REFRESH_INTERVAL = 30.0  # the address list is refreshed from C - this often
ANSWER_TIMEOUT = 5.0  # C - (members, refresh) waits this long for its answer
WATCH_RETRY_FIRST = 0.05  # a watch that lost its node tries again after this...
WATCH_RETRY_MAX = 1.0  # ...doubling up to this
WATCH_PROBE_AFTER = 5.0  # a watch connection quiet this long gets a heartbeat (Q)...
WATCH_STALL = 5.0  # ...and counts as lost when nothing at all comes back this long after it
# An S answered ERR unavailable because the cluster's version is below shared holds' (4)
# is retried this long from the first such answer (the version is raised shard by shard,
# within about a second), then given up: waiting for an upgrade is not what a wait is for.
VERSION_WINDOW = 5.0


_BAD_BYTE = re.compile(rb"[\x00-\x20\x7f]")


def _valid_field(raw: bytes, limit: int) -> bool:
    return 0 < len(raw) <= limit and _BAD_BYTE.search(raw) is None


def check_key(key: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    raw = key.encode()
    if not _valid_field(raw, MAX_KEY):
        raise ValueError(
            f"bad key {key!r}: want 1 to {MAX_KEY} bytes, none of them a space, "
            "a control character or DEL"
        )
    return raw


def check_owner(owner: str) -> bytes:
    raw = owner.encode()
    if not _valid_field(raw, MAX_OWNER):
        raise ValueError(
            f"bad owner {owner!r}: want 1 to {MAX_OWNER} bytes, none of them a space, "
            "a control character or DEL"
        )
    return raw


def check_owner_prefix(prefix: str) -> str:
    raw = prefix.encode()
    if raw and (len(raw) > MAX_OWNER_PREFIX or not _valid_field(raw, MAX_OWNER_PREFIX)):
        raise ValueError(
            f"bad owner_prefix {prefix!r}: want at most {MAX_OWNER_PREFIX} bytes (so that "
            f"{OWNER_RANDOM_HEX} hex digits fit within {MAX_OWNER}), none of them a space, "
            "a control character or DEL"
        )
    return prefix


def check_secret(secret: str) -> str:
    raw = secret.encode()
    if not raw or len(raw) > MAX_LINE - 3 or any(b in (0x0A, 0x0D) for b in raw):
        raise ValueError("bad secret: want 1 to 1021 bytes on one line")
    return secret


def new_owner(prefix: str) -> str:
    return prefix + os.urandom(OWNER_RANDOM_HEX // 2).hex()  # as secrets.token_hex


def seconds_to_ms(seconds: float) -> int:
    """Rounds up, so that a short duration never becomes 0 on the wire."""
    return max(1, math.ceil(seconds * 1000 - 1e-9))


def lease_ms(lease: float) -> int:
    if isinstance(lease, bool) or not isinstance(lease, (int, float)):
        raise TypeError("lease must be a number of seconds")
    if not (lease > 0) or lease * 1000 > MAX_MS:
        raise ValueError(f"bad lease {lease!r}: want more than 0 and at most 86400 seconds")
    return seconds_to_ms(lease)


def check_permits(permits: int) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"permits must be an int, not {type(permits).__name__}")
    if not 1 <= permits <= MAX_PERMITS:
        raise ValueError(f"bad permits {permits!r}: want 1 to {MAX_PERMITS}")
    return permits


def check_wait(wait: float | None) -> None:
    if wait is None:
        return
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise TypeError("wait must be a number of seconds or None")
    if not (wait >= 0) or wait * 1000 > MAX_MS:
        raise ValueError(f"bad wait {wait!r}: want None, 0, or at most 86400 seconds")


@dataclass(slots=True)
class Answer:
    """One answer line: ``<op> <key> <status> [<values>]``."""

    op: str
    key: str
    status: str
    values: list[str]
    text: str = ""  # ERR: the text after the code


def parse_answer(line: bytes) -> Answer:
    """Parses an answer line (without its LF). Raises ValueError for a line it cannot read."""
    s = line.decode("utf-8", errors="surrogateescape").rstrip("\r")
    fields = s.split(" ")
    if "" in fields:
        fields = [p for p in fields if p]
    if len(fields) < 3 or len(fields[0]) != 1:
        raise ValueError(f"bad answer from server: {s!r}")
    op, key, status = fields[0], fields[1], fields[2]
    if status == "ERR":
        # Keep the text as sent (it may hold several spaces).
        rest = s.split(None, 4)
        text = rest[4] if len(rest) > 4 else ""
        return Answer(op, key, status, fields[3:4], text)
    return Answer(op, key, status, fields[3:])


def request_line(*fields: str | int | bytes) -> bytes:
    out = []
    for f in fields:
        if isinstance(f, bytes):
            out.append(f)
        else:
            out.append(str(f).encode())
    return b" ".join(out) + b"\n"


def parse_addresses(addresses: str | Sequence[str]) -> list[str]:
    """The configured addresses: one string or a list, stripped, without duplicates."""
    if isinstance(addresses, str):
        addresses = [addresses]
    uniq: list[str] = []
    for a in addresses:
        a = a.strip()
        if not a or a in uniq:
            continue
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bad server address {a!r}: want host:port")
        uniq.append(a)
    if not uniq:
        raise ValueError("no server address")
    if len(uniq) > MAX_CONNS // 2:
        raise ValueError(f"{len(uniq)} server addresses: at most {MAX_CONNS // 2}")
    return uniq


def pool_addresses(addresses: list[str]) -> list[str]:
    """One connection per address, two to a lone address (so that one connection cut for
    a moment does not interrupt the service)."""
    return list(addresses) if len(addresses) > 1 else list(addresses) * 2


def split_address(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a key, as ``query`` reports it.

    For an exclusive holder: ``token``, ``remaining`` (seconds), ``owner`` (or None),
    ``holders`` 1 and ``permits`` 1. For shared holds (protocol 1.4) ``token``,
    ``remaining`` and ``owner`` are None.
    """

    token: int | None
    remaining: float | None
    owner: str | None
    holders: int = 1
    permits: int = 1


def holder_from_answer(key: str, ans: Answer) -> Holder | None:
    """The answer to ``Q``: None when free."""
    if ans.status == "FREE":
        return None
    if ans.status == "HELD" and len(ans.values) >= 2:
        owner = ans.values[2] if len(ans.values) > 2 else None
        return Holder(int(ans.values[0]), int(ans.values[1]) / 1000.0, owner)
    if ans.status == "SHARED" and len(ans.values) >= 2:
        return Holder(None, None, None, int(ans.values[0]), int(ans.values[1]))
    raise BatonError(f"query {key}: unexpected answer {ans.status}")


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads an election: the value its leader campaigned with (the owner of its
    grant) and the grant's fencing token."""

    value: str
    token: int


def leader_of(state: Holder | None) -> Leader | None:
    """The leader a key's state says: None when free (or held shared, which no campaign
    does)."""
    if state is None or state.token is None:
        return None
    return Leader(state.owner or "", state.token)


def members_from_answer(ans: Answer) -> list[str]:
    """The answer to ``C -``: the voters' client addresses in priority order."""
    if ans.op != "C" or ans.status != "OK" or len(ans.values) != 1:
        raise BatonError(f"C -: unexpected answer {ans.op} {ans.key} {ans.status}")
    out: list[str] = []
    for a in ans.values[0].split(","):
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise BatonError(f"C -: bad address {a!r}")
        if a not in out:
            out.append(a)
    return out[: MAX_CONNS // 2]


def release_result(key: str, ans: Answer, ambiguous: bool) -> bool:
    """The answer to ``R <key> <token>``: True once the grant no longer holds the key (OK,
    or NOTHELD to a retry whose first answer may have been lost), False when the grant had
    already lost it."""
    if ans.status == "OK":
        return True
    if ans.status == "NOTHELD":
        return ambiguous
    raise BatonError(f"release {key}: unexpected answer {ans.status}")


def check_extend_answer(key: str, token: int, ans: Answer) -> None:
    if ans.status == "NOTHELD":
        raise NotHeld(f"extend {key}: token {token} no longer holds the key")
    if ans.status != "OK":
        raise BatonError(f"extend {key}: unexpected answer {ans.status}")


class AcquireRequest:
    """One acquire as the client sends it, and sends it again on each retry: the same key,
    lease and owner, with what is left of its wait (so a retry never waits longer than the
    caller asked). An exclusive acquire is ``A``; with permits, one of that many shared
    holds, ``S`` (protocol 1.4), which is answered as ``A`` is. Checks every argument
    before anything is sent."""

    def __init__(
        self,
        key: str,
        lease: float,
        wait: float | None,
        owner: str | None,
        prefix: str,
        permits: int | None = None,
    ) -> None:
        self.key = key
        self.kraw = check_key(key)
        self.lease = lease
        self.lease_ms = lease_ms(lease)
        check_wait(wait)
        self.wait = wait
        if permits is None:
            self.op, self.head = "A", b"A %s" % self.kraw
        else:
            self.op, self.head = "S", b"S %s %d" % (self.kraw, permits)  # checked by caller
        self.permits = permits
        # An owner named by the caller may hold the key already (a retry across restarts
        # of the caller): its grant is then older than this acquire, and renewed.
        self.explicit_owner = owner is not None
        if owner is not None:
            self.owner, self.oraw = owner, check_owner(owner)
        else:  # the prefix was checked when the client was made, and hex is fine
            self.owner = new_owner(prefix)
            self.oraw = self.owner.encode()
        now = time.monotonic()
        self.wait_end = None if wait is None or wait == 0 else now + wait
        # ERR unavailable is retried until the wait runs out (a try-lock: not at all).
        self.unavailable_deadline = self.wait_end if wait != 0 else now
        self.sent_at = 0.0  # when the last attempt was sent: the lease counts from there

    @property
    def what(self) -> str:
        return "acquire" if self.permits is None else "acquire_shared"

    def line(self) -> bytes:
        """The request line for the next attempt; raises AcquireTimeout once the wait is
        over."""
        self.sent_at = time.monotonic()
        if self.wait == 0:
            wms = -1
        elif self.wait_end is None:
            wms = 0
        else:
            left = self.wait_end - self.sent_at
            if left <= 0:
                raise AcquireTimeout(f"{self.what} {self.key}: not granted within {self.wait} s")
            wms = seconds_to_ms(left)
        return b"%s %d %d %s\n" % (self.head, self.lease_ms, wms, self.oraw)

    def cleanup_line(self) -> bytes:
        """For a caller that gave up after an attempt whose answer was lost (so that a
        grant may be held for its owner, unknown to it): a try of the same kind with the
        same owner (and permits), which returns that grant's token if it is held (or
        grants the key, if free), so that the grant can be released."""
        return b"%s %d -1 %s\n" % (self.head, self.lease_ms, self.oraw)

    def token(self, ans: Answer) -> int:
        """The token of the grant, from the final answer; raises AcquireTimeout."""
        if ans.status == "TIMEOUT":
            raise AcquireTimeout(f"{self.what} {self.key}: not granted in time")
        if ans.status != "OK" or not ans.values:
            raise BatonError(f"{self.what} {self.key}: unexpected answer {ans.status}")
        return int(ans.values[0])


def granted_token(ans: Answer) -> int | None:
    """The token of an ``A ... OK`` or ``S ... OK`` answer, else None (for grants nobody
    waits for)."""
    if ans.op in ("A", "S") and ans.status == "OK" and ans.values:
        try:
            return int(ans.values[0])
        except ValueError:
            return None
    return None


def split_lines(rest: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """The whole lines of rest + data, without their LF, and what follows the last LF
    (the start of a line still coming): how both clients' connections read answers."""
    if rest:
        data = rest + data
    if data.endswith(b"\n"):
        return data[:-1].split(b"\n"), b""
    lines = data.split(b"\n")
    return lines, lines.pop()
