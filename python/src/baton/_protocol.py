"""The wire protocol: validating fields, formatting requests, parsing answers."""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

MAX_KEY = 250
MAX_OWNER = 64
OWNER_RANDOM_HEX = 32
MAX_OWNER_PREFIX = MAX_OWNER - OWNER_RANDOM_HEX
MAX_MS = 86_400_000
MAX_LINE = 1024
HEARTBEAT_KEY = "__baton_heartbeat__"


def _valid_field(raw: bytes, limit: int) -> bool:
    return 0 < len(raw) <= limit and all(b > 0x20 and b != 0x7F for b in raw)


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
    return prefix + secrets.token_hex(OWNER_RANDOM_HEX // 2)


def seconds_to_ms(seconds: float) -> int:
    """Rounds up, so that a short duration never becomes 0 on the wire."""
    return max(1, math.ceil(seconds * 1000 - 1e-9))


def lease_ms(lease: float) -> int:
    if isinstance(lease, bool) or not isinstance(lease, (int, float)):
        raise TypeError("lease must be a number of seconds")
    if not (lease > 0) or lease * 1000 > MAX_MS:
        raise ValueError(f"bad lease {lease!r}: want more than 0 and at most 86400 seconds")
    return seconds_to_ms(lease)


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
    parts = s.split(" ")
    fields = [p for p in parts if p]
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
