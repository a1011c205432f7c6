"""A scripted fake baton server on 127.0.0.1, for what real servers cannot be made to do
on cue (a membership that changes, a server older than protocol 1.3).

Each request line is handed to the script, which returns the answer lines (none: the
request is left unanswered). Every line received is recorded; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable

Script = Callable[["FakeServer", str], list[str]]


def plain(server: FakeServer, line: str) -> list[str]:
    """A free key for every Q, OK for every R, a grant for every A; no C -."""
    f = line.split()
    op, key = f[0], f[1] if len(f) > 1 else "-"
    if op == "Q":
        return [f"Q {key} FREE"]
    if op == "R":
        return [f"R {key} OK"]
    if op == "A":
        return [f"A {key} OK 7"]
    return [f"? - ERR badrequest op must be A, R, K, Q or H (fake {server.name})"]


class FakeServer:
    """Serves on a free port of 127.0.0.1, or on port (a server coming back)."""

    def __init__(self, name: str, script: Script = plain, port: int = 0) -> None:
        self.name = name
        self.script = script
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.mu = threading.Lock()
        self.lines: list[str] = []
        self.conns: list[socket.socket] = []
        self.accepted = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                r, _, _ = select.select([self.listener], [], [], 0.05)
                if not r:
                    continue
                c, _ = self.listener.accept()
            except (OSError, ValueError):  # closed under us (close)
                return
            with self.mu:
                self.conns.append(c)
                self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        buf = b""
        try:
            while not self.stopped:
                data = c.recv(65536)
                if not data:
                    break
                buf += data
                out = b""
                while b"\n" in buf:
                    raw, _, buf = buf.partition(b"\n")
                    line = raw.decode().strip()
                    if not line:
                        continue
                    with self.mu:
                        self.lines.append(line)
                    for ans in self.answer(c, line):
                        out += ans.encode() + b"\n"
                if out:
                    c.sendall(out)
        except OSError:
            pass
        finally:
            with self.mu:
                if c in self.conns:
                    self.conns.remove(c)
            with contextlib.suppress(OSError):
                c.close()

    def answer(self, conn: socket.socket, line: str) -> list[str]:
        """The answer lines to a request that came on conn: the script's. A subclass may
        answer (or cut conn) itself and return none."""
        return self.script(self, line)

    def count(self, prefix: str) -> int:
        """How many request lines starting with prefix came in."""
        with self.mu:
            return sum(1 for x in self.lines if x.startswith(prefix))

    def open_conns(self) -> int:
        with self.mu:
            return len(self.conns)

    def drop_all(self) -> None:
        """Cuts every connection (the client sees the server go away)."""
        with self.mu:
            conns = list(self.conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def drop_one(self) -> None:
        """Cuts the oldest connection."""
        with self.mu:
            conns = self.conns[:1]
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.listener.close()
        self.drop_all()
        self.thread.join(timeout=2)
