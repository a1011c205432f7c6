"""One persistent connection slot: dialled, served and redialled in the background.

Each slot has one thread. It dials the address (TCP, then the TLS handshake
and ``H <secret>`` when configured), then reads answers until the session
fails, pairs every answer with the oldest unanswered request of its
``(op, key)``, watches for a silent server (heartbeats), and redials.
Callers write their requests themselves, under the slot's write lock, so
that the order of the pending table is the order of the bytes on the wire.
Sockets are non-blocking; one I/O lock serializes reads and writes, which a
TLS socket needs.
"""

from __future__ import annotations

import collections
import collections.abc
import select
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING

from ._errors import AuthError, BatonError
from ._protocol import HEARTBEAT_KEY, Answer, parse_answer, request_line

if TYPE_CHECKING:
    from ._client import Client

DIALING, UP, DOWN = 0, 1, 2

REDIAL_INTERVAL = 3.0
MIN_REDIAL_GAP = 0.1
HEARTBEAT_AFTER = 0.5
STALL_TIMEOUT = 1.5
_TICK = 0.1  # how often the reader looks at the clock while it reads nothing

_PENDING, _DONE, _ABANDONED = 0, 1, 2


class ConnectionLost(BatonError):
    """The connection failed before the answer came: the request may or may not have
    taken effect."""


class ClientClosed(BatonError):
    """The client was closed."""


class ConnDown(Exception):
    """The connection was not up: nothing was sent."""


class Call:
    """One request sent on one connection, waiting for its answer."""

    __slots__ = ("_lock", "answer", "done", "error", "key", "on_abandoned", "op", "state")

    def __init__(self, op: str, key: str) -> None:
        self.op = op
        self.key = key
        self.answer: Answer | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.state = _PENDING
        self._lock = threading.Lock()
        # Run (on the reader's thread) with the answer of a call its caller gave up.
        self.on_abandoned: collections.abc.Callable[[Answer], None] | None = None

    def finish(self) -> bool:
        """Marks the call answered; False when its caller had given up."""
        with self._lock:
            if self.state != _PENDING:
                return False
            self.state = _DONE
        self.done.set()
        return True

    def abandon(self) -> bool:
        """The caller gives up; False when the answer already came (use it)."""
        with self._lock:
            if self.state != _PENDING:
                return False
            self.state = _ABANDONED
            return True

    @property
    def pending(self) -> bool:
        return self.state == _PENDING


class Conn:
    def __init__(self, client: Client, addr: str) -> None:
        self.client = client
        self.addr = addr
        host, _, port = addr.rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self.state = DIALING
        self.last_error: BaseException | None = None
        self._mu = threading.Lock()  # the pending table, the socket, the stall state
        self._wlock = threading.Lock()  # pending push + bytes on the wire, in one order
        self._io = threading.Lock()  # one socket operation at a time (TLS)
        self._sock: socket.socket | None = None
        self._pending: dict[tuple[str, str], collections.deque[Call]] = {}
        self._npending = 0
        self._busy_since = 0.0
        self._last_read = 0.0
        self._probing = False
        self._probe_at = 0.0
        self._probe: Call | None = None
        self._silent = False
        self._redial_now = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"baton-conn-{addr}", daemon=True)

    # --- sending -----------------------------------------------------------

    def send(self, call: Call, line: bytes) -> None:
        """Sends line and registers call for its answer. Raises ConnDown when the
        connection is not up (nothing was sent)."""
        with self._wlock:
            with self._mu:
                sock = self._sock
                if sock is None:
                    raise ConnDown
                self._push_locked(call)
            try:
                self._send_all(sock, line)
            except OSError as e:
                self._fail(sock, e)

    def _push_locked(self, call: Call) -> None:
        if self._npending == 0:
            self._busy_since = time.monotonic()
            self._probing = False
        self._pending.setdefault((call.op, call.key), collections.deque()).append(call)
        self._npending += 1

    def _send_all(self, sock: socket.socket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                with self._io:
                    n = sock.send(view)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                n = 0
            view = view[n:]
            if view:
                if self._sock is not sock:
                    raise OSError("connection closed while sending")
                select.select([], [sock], [], _TICK)

    # --- the session loop --------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def redial_soon(self) -> None:
        self._redial_now.set()

    def _run(self) -> None:
        last_dial = 0.0
        first = True
        while not self.client._closing.is_set():
            if not first:
                if not self._wait_to_redial(last_dial):
                    return
                self._set_state(DIALING, None)
            first = False
            last_dial = time.monotonic()
            try:
                sock, rest = self._open()
            except BaseException as e:  # every failure is a down connection
                self._set_state(DOWN, e)
                continue
            self._serve(sock, rest)
            if self._silent:
                last_dial = time.monotonic()
        self._set_state(DOWN, ClientClosed("client closed"))

    def _wait_to_redial(self, last_dial: float) -> bool:
        interval = REDIAL_INTERVAL
        while True:
            wait = last_dial + interval - time.monotonic()
            if self.client._closing.is_set():
                return False
            if wait <= 0:
                return True
            if self._redial_now.wait(min(wait, 0.25)):
                self._redial_now.clear()
                interval = MIN_REDIAL_GAP

    def _open(self) -> tuple[socket.socket, bytes]:
        timeout = self.client._dial_timeout
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ctx = self.client._ssl_context
            if ctx is not None:
                sock = ctx.wrap_socket(sock, server_hostname=self.host)
            rest = b""
            secret = self.client._secret
            if secret is not None:
                sock.sendall(request_line("H", secret.encode()))
                buf = b""
                while b"\n" not in buf:
                    chunk = sock.recv(4096)
                    if not chunk:
                        raise ConnectionError(f"{self.addr} closed the connection after H")
                    buf += chunk
                line, _, rest = buf.partition(b"\n")
                ans = parse_answer(line)
                if ans.op == "H" and ans.status == "ERR" and ans.values[:1] == ["auth"]:
                    raise AuthError(f"{self.addr} refused the secret")
                if not (ans.op == "H" and ans.status == "OK"):
                    raise ConnectionError(f"unexpected answer from {self.addr} to H: {line!r}")
            sock.setblocking(False)
            return sock, rest
        except BaseException:
            sock.close()
            raise

    def _serve(self, sock: socket.socket, rest: bytes) -> None:
        with self._mu:
            if self.client._closing.is_set():
                sock.close()
                return
            self._sock = sock
            self._silent = False
            self._last_read = 0.0
            self._probing = False
            self._probe = None
            self.state = UP
        self.client._notify_change()
        try:
            err = self._read(sock, rest)
        except BaseException as e:
            err = e
        self._fail(sock, err)

    def _read(self, sock: socket.socket, buf: bytes) -> BaseException:
        buf = self._deliver_lines(buf)
        while True:
            if self._sock is not sock:
                return ConnectionError("connection closed")
            pending_tls = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
            if not pending_tls:
                try:
                    readable, _, _ = select.select([sock], [], [], _TICK)
                except (OSError, ValueError) as e:
                    return e
            else:
                readable = [sock]
            if readable:
                try:
                    with self._io:
                        data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    data = None
                except OSError as e:
                    return e
                if data is not None:
                    if not data:
                        return ConnectionError(f"{self.addr} closed the connection")
                    self._last_read = time.monotonic()
                    buf = self._deliver_lines(buf + data)
                    if len(buf) > 64 * 1024:
                        return ConnectionError("answer line too long")
            stall = self._check_stall(sock)
            if stall is not None:
                return stall

    def _deliver_lines(self, buf: bytes) -> bytes:
        while True:
            i = buf.find(b"\n")
            if i < 0:
                return buf
            line, buf = buf[:i], buf[i + 1 :]
            if not line.strip():
                continue
            self._deliver(parse_answer(line))

    def _deliver(self, ans: Answer) -> None:
        with self._mu:
            q = self._pending.get((ans.op, ans.key))
            call = q.popleft() if q else None
            if q is not None and not q:
                del self._pending[(ans.op, ans.key)]
            if call is not None:
                self._npending -= 1
        if call is None:
            if ans.op == "H" and ans.status == "ERR" and ans.values[:1] == ["auth"]:
                raise AuthError(f"{self.addr} wants a secret (H)")
            raise ConnectionError(
                f"unexpected answer from {self.addr}: {ans.op} {ans.key} {ans.status}"
            )
        call.answer = ans
        if not call.finish() and call.on_abandoned is not None:
            call.on_abandoned(ans)

    def _check_stall(self, sock: socket.socket) -> BaseException | None:
        now = time.monotonic()
        send_probe: Call | None = None
        with self._mu:
            if self._npending == 0:
                self._probing = False
                return None
            if self._probing and self._last_read > self._probe_at:
                self._probing = False
            quiet_since = max(self._busy_since, self._last_read)
            if not self._probing:
                if now - quiet_since < HEARTBEAT_AFTER:
                    return None
                if self._probe is None or not self._probe.pending:
                    send_probe = Call("Q", HEARTBEAT_KEY)
                self._probing, self._probe_at = True, now
            elif now - self._probe_at >= STALL_TIMEOUT - HEARTBEAT_AFTER:
                self._silent = True
                return ConnectionError(
                    f"{self.addr} stopped answering: nothing read for "
                    f"{now - quiet_since:.1f}s while requests waited, not even a heartbeat"
                )
        if send_probe is not None and self._wlock.acquire(timeout=0.05):
            # An internal call: in the pending table like any other, so that pairing
            # stays exact, but nobody waits for its answer.
            try:
                with self._mu:
                    if self._sock is not sock:
                        return None
                    self._push_locked(send_probe)
                    self._probe = send_probe
                    self._probing, self._probe_at = True, now
                self._send_all(sock, request_line("Q", HEARTBEAT_KEY))
            except OSError as e:
                return e
            finally:
                self._wlock.release()
        return None

    def _fail(self, sock: socket.socket, err: BaseException) -> None:
        """Ends the session on sock (if still current): every unanswered call fails."""
        with self._mu:
            if self._sock is not sock:
                return
            self._sock = None
            calls = [c for q in self._pending.values() for c in q]
            self._pending.clear()
            self._npending = 0
            self.state = DOWN
            self.last_error = err
        try:
            sock.close()
        except OSError:
            pass
        closing = self.client._closing.is_set()
        for c in calls:
            if closing:
                c.error = ClientClosed("client closed")
            elif isinstance(err, AuthError):
                c.error = err
            else:
                c.error = ConnectionLost(f"connection to {self.addr} lost: {err}")
            c.finish()
        self.client._notify_change()

    def _set_state(self, state: int, err: BaseException | None) -> None:
        with self._mu:
            self.state = state
            if err is not None:
                self.last_error = err
        self.client._notify_change()

    def drop(self) -> None:
        """Cuts the current session, as the network would."""
        with self._mu:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._fail(sock, ConnectionError("connection dropped"))

    def forget(self) -> None:
        """After fork, in the child: closes this process's copy of the socket without
        touching the parent's session (no shutdown)."""
        sock = self._sock
        self._sock = None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
