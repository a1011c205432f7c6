"""One persistent connection slot: dialled, served and redialled in the background.

Each slot has one thread. It dials the address (TCP, then the TLS handshake
and ``H <secret>`` when configured), watches the session for a silent server
(heartbeats) and for its end, and redials. Callers write their requests
themselves, under the slot's write lock, so that the order of the pending
table is the order of the bytes on the wire.

Answers are read by one thread at a time, the reader, which pairs every
answer with the oldest unanswered request of its ``(op, key)`` and wakes its
caller. A caller that waits for its answer while nobody reads becomes the
reader itself (so with one request in flight, the answer is read by the
thread that waits for it, with no hand-off between threads); when its own
answer has come it hands the reading on to another waiting caller, or to
the slot's thread when only answers that nobody waits for (a caller that
gave up, a heartbeat) are owed. While nothing is owed the slot's thread looks
at the socket every tick, for a server that closed it.

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
    PENDING,
    ClientClosed,
    ConnectionLost,
    Pairing,
    hello_error,
    session_error,
    tls_refusal,
    unexpected_answer,
)
from ._pairing import Call as BaseCall
from ._protocol import (
    HEARTBEAT_KEY,
    MAX_PARTIAL_LINE,
    Answer,
    parse_answer,
    request_line,
    split_address,
    split_lines,
)

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
    """A call whose caller waits on a thread. ``wake``, made when its caller first waits
    without reading, is set when the call is done, and when its caller is asked to read
    the connection."""

    __slots__ = ("wake",)

    def __init__(self, op: str, key: str) -> None:
        super().__init__(op, key)
        self.wake: threading.Event | None = None

    def _wake(self) -> None:
        w = self.wake
        if w is not None:
            w.set()


class Conn:
    """One connection slot: a thread that dials, watches and redials; answers are read by
    the callers that wait for them, or by that thread (see the module's doc)."""

    def __init__(self, client: Client, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.host, self.port = split_address(addr)
        self.state = DIALING
        self.last_error: BaseException | None = None
        # Retired: the address left the cluster's membership. Nothing new is sent on it;
        # it closes once it owes nothing, and is not redialled.
        self.retired = False
        # The pairing, the socket, the state, the reader and the waiting callers.
        self._mu = threading.Lock()
        self._wlock = threading.Lock()  # pairing push + bytes on the wire, in one order
        self._io = threading.Lock()  # one socket operation at a time (TLS)
        self._sock: socket.socket | None = None
        self._pairing: Pairing[Call] = Pairing()
        self._silent = False
        self._reading = False  # a thread reads the session's answers now
        self._rbuf = b""  # the start of an answer line not wholly read yet
        self._waiters: list[Call] = []  # callers waiting for their answer, not reading
        self._torn: socket.socket | None = None  # a read there was interrupted halfway
        self._tend_now = threading.Event()  # the slot's thread is wanted as the reader
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
        try:
            with self._io:
                n = sock.send(data)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            n = 0
        if n == len(data):
            return
        view = memoryview(data)[n:]
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

    # --- waiting for an answer, and reading --------------------------------

    def wait(self, call: Call, timeout: float | None) -> bool:
        """Waits until call, sent on this connection, is done (answered or failed): reads
        the connection itself while no other thread does. False: timeout ran out first
        (the call is given up).

        A caller that gives up (the time-out, or an exception such as KeyboardInterrupt
        from a signal handler) leaves its call in the pairing, whose answer then goes to
        call.on_abandoned. One interrupted halfway through handing out answers it read
        (some may be lost) ends the session: every call it owed fails, as when the
        connection is lost."""
        end = None if timeout is None else time.monotonic() + timeout
        reading: socket.socket | None = None
        waited = False
        try:
            while True:
                wake = call.wake
                if wake is not None:
                    wake.clear()  # before looking: a wake from then on is not lost
                with self._mu:
                    if call.state != PENDING:
                        return True
                    sock = self._sock
                    if not self._reading and sock is not None:
                        self._reading = True
                        reading = sock
                    elif wake is None:
                        # Made before the call's state is looked at again (below), so that
                        # its answer, if it comes meanwhile, sets it.
                        wake = call.wake = threading.Event()
                        continue
                    elif not waited:
                        waited = True
                        self._waiters.append(call)
                if reading is not None:
                    # The reader: reads until the call is done, the session ended (then
                    # its calls failed), or end.
                    while call.state == PENDING and self._sock is reading:
                        t = _TICK
                        if end is not None:
                            t = min(t, end - time.monotonic())
                            if t <= 0:
                                break
                        err = self._read_some(reading, t)
                        if err is not None:
                            self._fail(reading, err)
                            break
                    reading = None
                    self._leave_reading()
                else:
                    assert wake is not None
                    wake.wait(1.0 if end is None else max(0.0, end - time.monotonic()))
                if end is not None and call.pending and time.monotonic() >= end:
                    call.give_up()
                    return False
        except BaseException:
            call.give_up()
            if reading is not None:
                if self._torn is reading:
                    self._fail(reading, ConnectionError("a read of answers was interrupted"))
                self._leave_reading()
            raise
        finally:
            if waited:
                with self._mu:
                    self._waiters.remove(call)
                self._hand_on()  # the reading may have been handed to it

    def _leave_reading(self) -> None:
        """The reader stops reading; answers still owed are read by another (_hand_on)."""
        with self._mu:
            self._reading = False
            if len(self._pairing) == 0:
                return
        self._hand_on()

    def _hand_on(self) -> None:
        """While answers are owed and nobody reads: a waiting caller is asked to read (the
        first whose call is pending), else the slot's thread."""
        with self._mu:
            if self._reading or len(self._pairing) == 0 or self._sock is None:
                return
            for c in self._waiters:
                if c.state == PENDING and c.wake is not None:
                    c.wake.set()
                    return
        self._tend_now.set()

    def _read_some(self, sock: socket.socket, timeout: float) -> BaseException | None:
        """One read of the reader: waits up to timeout for sock to be readable, then reads
        what came and hands out every whole answer line in it. Returns why the session is
        over, or None."""
        if not (isinstance(sock, ssl.SSLSocket) and sock.pending() > 0):
            try:
                readable, _, _ = select.select([sock], [], [], timeout)
            except (OSError, ValueError) as e:
                return e
            if not readable:
                return None
        whole = False
        try:
            try:
                with self._io:
                    data = sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                whole = True
                return None
            except OSError as e:
                whole = True
                return e
            if not data:
                whole = True
                return ConnectionError(f"{self.addr} closed the connection")
            err = self._take(sock, data)
            whole = True
            return err
        finally:
            if not whole:
                self._torn = sock

    def _take(self, sock: socket.socket, data: bytes) -> BaseException | None:
        """Pairs every whole answer line of what was read (after what was left of the last
        read) with its call, and hands the answers out. Returns why the session is over
        (an answer that answers nothing, a line that cannot be read), or None."""
        err: BaseException | None = None
        got: list[tuple[Call, Answer]] = []
        try:
            with self._mu:
                if self._sock is not sock:
                    return ConnectionError("connection closed")
                self._pairing.read(time.monotonic())
                lines, self._rbuf = split_lines(self._rbuf, data)
                if len(self._rbuf) > MAX_PARTIAL_LINE:
                    err = ConnectionError("answer line too long")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        ans = parse_answer(line)
                    except ValueError as e:
                        err = e
                        break
                    call = self._pairing.pop(ans)
                    if call is None:
                        err = unexpected_answer(self.addr, ans)
                        break
                    got.append((call, ans))
            for call, ans in got:
                call.deliver(ans)
        except BaseException:
            # Interrupted: the session ends (wait), and no call taken from the pairing
            # may be left without its answer or an error.
            for call, ans in got:
                if call.answer is None:
                    call.fail(ConnectionLost(f"connection to {self.addr}: a read was interrupted"))
                elif call.state == PENDING:
                    call.deliver(ans)
            raise
        return err

    # --- the session loop --------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def redial_soon(self) -> None:
        self._redial_now.set()

    def retire(self) -> None:
        self.retired = True
        self._redial_now.set()
        self._tend_now.set()

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
            self._rbuf = b""
            self.state = UP
        self.client._notify_change()
        self.client._conn_up(self)
        try:
            err = self._tend(sock, rest)
        except BaseException as e:
            err = e
        self._fail(sock, err)

    def _tend(self, sock: socket.socket, rest: bytes) -> BaseException:
        """The slot's thread during a session: reads when answers are owed and no caller
        reads (and, while nothing is owed, looks at the socket every tick for its end),
        runs the stall watch every tick, and returns why the session is over."""
        if rest:
            err = self._take(sock, rest)
            if err is not None:
                return err
        while True:
            self._tend_now.clear()
            if self._sock is not sock:
                return ConnectionError("connection closed")
            with self._mu:
                owed = len(self._pairing) > 0
                if self.retired and not owed:
                    return ConnectionError("retired: no longer a member")
                read = not self._reading
                if read:
                    self._reading = True
            if read:
                try:
                    err = self._read_some(sock, _TICK if owed else 0.0)
                finally:
                    self._leave_reading()
                if err is not None:
                    return err
            stall = self._check_stall(sock)
            if stall is not None:
                return stall
            if not (read and owed):
                self._tend_now.wait(_TICK)

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
            self._rbuf = b""
            self.state = DOWN
            self.last_error = err
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a reader waiting on it
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass
        self._tend_now.set()
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
