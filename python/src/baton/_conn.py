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

import select
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING

from ._core import DIALING, DOWN, UP
from ._pairing import (
    Call as BaseCall,
)
from ._pairing import (
    ClientClosed,
    ConnectionLost,
    Pairing,
    hello_error,
    session_error,
    tls_refusal,
    unexpected_answer,
)
from ._protocol import HEARTBEAT_KEY, Answer, parse_answer, request_line, split_address

if TYPE_CHECKING:
    from ._client import Client

__all__ = [
    "DIALING",
    "DOWN",
    "UP",
    "Call",
    "ClientClosed",
    "Conn",
    "ConnDown",
    "ConnectionLost",
    "dial",
]

REDIAL_INTERVAL = 3.0
MIN_REDIAL_GAP = 0.1
_TICK = 0.1  # how often the reader looks at the clock while it reads nothing


class ConnDown(Exception):
    """The connection was not up: nothing was sent."""


class Call(BaseCall):
    """A call whose caller waits on a thread."""

    __slots__ = ("done",)

    def __init__(self, op: str, key: str) -> None:
        super().__init__(op, key)
        self.done = threading.Event()

    def _wake(self) -> None:
        self.done.set()


class Conn:
    """One connection slot: a thread that dials, reads answers and redials."""

    def __init__(self, client: Client, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.host, self.port = split_address(addr)
        self.state = DIALING
        self.last_error: BaseException | None = None
        # Retired: the address left the cluster's membership. Nothing new is sent on it;
        # it closes once it owes nothing, and is not redialled.
        self.retired = False
        self._mu = threading.Lock()  # the pairing, the socket, the state
        self._wlock = threading.Lock()  # pairing push + bytes on the wire, in one order
        self._io = threading.Lock()  # one socket operation at a time (TLS)
        self._sock: socket.socket | None = None
        self._pairing: Pairing[Call] = Pairing()
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
                self._pairing.push(call, time.monotonic())
            try:
                self._send_all(sock, line)
            except OSError as e:
                self._fail(sock, self._tls_alert(sock) or e)

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

    def _tls_alert(self, sock: socket.socket) -> ssl.SSLError | None:
        """After a write failed on a TLS connection: the alert the server sent before it
        closed, if it waits to be read (with TLS 1.3 a server refuses a client certificate
        only after the handshake, so the first writes may still go out). It says more
        than the write's own error ("EOF occurred in violation of protocol")."""
        if not isinstance(sock, ssl.SSLSocket):
            return None
        try:
            with self._io:
                sock.recv(65536)  # the session is over: what it reads is dropped
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, ssl.SSLEOFError):
            return None
        except ssl.SSLError as e:
            return e
        except OSError:
            return None
        return None

    # --- the session loop --------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def redial_soon(self) -> None:
        self._redial_now.set()

    def retire(self) -> None:
        self.retired = True
        self._redial_now.set()

    def _run(self) -> None:
        last_dial = 0.0
        first = True
        while not self.client._closing.is_set() and not self.retired:
            if not first:
                if not self._wait_to_redial(last_dial):
                    break
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
        if self.retired and not self.client._closing.is_set():
            self._set_state(DOWN, ConnectionError("retired: no longer a member"))
            self.client._conn_gone(self)
            return
        self._set_state(DOWN, ClientClosed("client closed"))

    def _wait_to_redial(self, last_dial: float) -> bool:
        interval = REDIAL_INTERVAL
        while True:
            wait = last_dial + interval - time.monotonic()
            if self.client._closing.is_set() or self.retired:
                return False
            if wait <= 0:
                return True
            if self._redial_now.wait(min(wait, 0.25)):
                self._redial_now.clear()
                interval = MIN_REDIAL_GAP

    def _open(self) -> tuple[socket.socket, bytes]:
        c = self.client
        return dial(self.addr, c._dial_timeout, c._ssl_context, c._secret)

    def _serve(self, sock: socket.socket, rest: bytes) -> None:
        with self._mu:
            if self.client._closing.is_set() or self.retired:
                sock.close()
                return
            self._sock = sock
            self._silent = False
            self._pairing = Pairing()
            self.state = UP
        self.client._notify_change()
        self.client._conn_up(self)
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
                    with self._mu:
                        self._pairing.read(time.monotonic())
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
            call = self._pairing.pop(ans)
        if call is None:
            raise unexpected_answer(self.addr, ans)
        call.deliver(ans)

    def _check_stall(self, sock: socket.socket) -> BaseException | None:
        now = time.monotonic()
        with self._mu:
            if self.retired and len(self._pairing) == 0:
                return ConnectionError("retired: no longer a member")
            probe, dead = self._pairing.check(now)
            if dead is not None:
                self._silent = True
                return ConnectionError(f"{self.addr} {dead}")
        if probe and self._wlock.acquire(timeout=0.05):
            try:
                with self._mu:
                    if self._sock is not sock:
                        return None
                    self._pairing.push_probe(Call("Q", HEARTBEAT_KEY), now)
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
            tls = self.client._ssl_context is not None
            if tls and not self._pairing.read_any and not self._silent:
                err = tls_refusal(err)
            calls = self._pairing.drain()
            self.state = DOWN
            self.last_error = err
        try:
            sock.close()
        except OSError:
            pass
        closing = self.client._closing.is_set()
        for c in calls:
            c.fail(session_error(self.addr, err, closing))
        self.client._notify_change()
        if not closing and not self.retired:
            self.client._conn_lost(self)

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


def dial(
    addr: str, timeout: float, ctx: ssl.SSLContext | None, secret: str | None
) -> tuple[socket.socket, bytes]:
    """Opens a session to addr: TCP, then the TLS handshake and ``H <secret>`` when
    configured. Returns the socket, non-blocking, and what was read after the hello."""
    host, port = split_address(addr)
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_hostname=host)
        rest = b""
        if secret is not None:
            sock.sendall(request_line("H", secret.encode()))
            buf = b""
            while b"\n" not in buf:
                chunk = sock.recv(4096)
                if not chunk:
                    raise ConnectionError(f"{addr} closed the connection after H")
                buf += chunk
            line, _, rest = buf.partition(b"\n")
            err = hello_error(addr, parse_answer(line), line)
            if err is not None:
                raise err
        sock.setblocking(False)
        return sock, rest
    except BaseException:
        sock.close()
        raise
