"""The exceptions of the baton client."""


class BatonError(Exception):
    """The base of every error the client raises (but ValueError for bad arguments)."""


class AcquireTimeout(BatonError, TimeoutError):
    """An acquire was not granted within its wait (or a try-lock found the key taken).

    Nothing is held when it is raised.
    """


class NotHeld(BatonError):
    """The grant no longer holds the key (or the lock was released)."""


class LockLost(BatonError):
    """The lock was lost while held: an extend was answered NOTHELD, or its lease ran out."""


class Unavailable(BatonError):
    """No connection could serve the request (or the client is closed)."""


class AuthError(BatonError):
    """A server refused the client's secret (or wants one and got none)."""


class ServerError(BatonError):
    """An ``ERR <code> [<text>]`` answer that the client does not retry."""

    def __init__(self, code: str, text: str = "") -> None:
        self.code = code
        self.text = text
        super().__init__(f"server error {code}: {text}" if text else f"server error {code}")
