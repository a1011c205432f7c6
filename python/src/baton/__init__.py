"""baton: the official Python client of the baton distributed lock service.

    import baton

    with baton.Client(["10.0.0.1:7700", "10.0.0.2:7700"]) as client:
        with client.lock("deploy/prod", lease=10.0) as lock:
            ...  # kept alive while inside; released at exit
"""

from . import aio
from ._client import Client
from ._election import Election
from ._errors import (
    AcquireTimeout,
    AuthError,
    BatonError,
    LockLost,
    NotHeld,
    ServerError,
    Unavailable,
)
from ._lock import Lock
from ._protocol import HEARTBEAT_KEY, Holder, Leader

__all__ = [
    "HEARTBEAT_KEY",
    "AcquireTimeout",
    "AuthError",
    "BatonError",
    "Client",
    "Election",
    "Holder",
    "Leader",
    "Lock",
    "LockLost",
    "NotHeld",
    "ServerError",
    "Unavailable",
    "aio",
]

__version__ = "0.1.0"
