"""One persistent connection slot of the asyncio client: a task that dials and redials,
and a watch task per session for a server that stops answering.

The pairing and the stall watch are _pairing's, as in the sync client. A request is
registered in the pairing and written in one step of the event loop (``write`` does not
block), so the order of the pairing is the order of the bytes on the wire. Answers are
paired and handed to their callers as they arrive, in the protocol's ``data_received``
(no task of its own reads them: one round of the event loop less per answer).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from typing import TYPE_CHECKING

from ._core import DIALING, DOWN, UP
from ._pairing import (
    PENDING,
    ClientClosed,
    Pairing,
    hello_error,
    session_error,
    tls_refusal,
    unexpected_answer,
)
from ._pairing import Call as BaseCall
from ._protocol import (
    HEARTBEAT_KEY,
    MAX_LINE,
    MAX_PARTIAL_LINE,
    parse_answer,
    request_line,
    split_address,
    split_lines,
)

if TYPE_CHECKING:
    from .aio import Client

REDIAL_INTERVAL = 3.0
MIN_REDIAL_GAP = 0.1
_TICK = 0.1  # how often the watch looks at the clock
_RECV_SIZE = 64 * 1024  # read at most this much at once


class ConnDown(Exception):
    """The connection was not up: nothing was sent."""


class Call(BaseCall):
    """A call whose caller awaits it."""

    __slots__ = ("_fut",)

    def __init__(self, op: str, key: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(op, key)
        self._fut: asyncio.Future[None] = loop.create_future()

    def _wake(self) -> None:
        if not self._fut.done():
            self._fut.set_result(None)

    async def wait(self, timeout: float | None, keep: bool = False) -> None:
        """Waits for the answer (or the error). A caller cancelled (or timed out) meanwhile
        gives the call up: it keeps its place in the pairing, and its answer goes to
        on_abandoned; with keep, it is not given up, and another task may wait for it
        (wait again) from then on."""
        if self.state != PENDING:
            return
        if self._fut.done():  # cancelled with a caller that kept it
            self._fut = self._fut.get_loop().create_future()
        try:
            if timeout is None:
                await self._fut
            else:
                async with asyncio.timeout(timeout):
                    await self._fut
        except BaseException:
            if not keep:
                self.give_up()
            raise


class _Session(asyncio.BufferedProtocol):
    """The protocol of one session's transport. Until ``serve`` hands it to its Conn it
    keeps what it reads, for the answer to ``H``.

    A buffered protocol: the transport reads into a buffer of the session's own, where a
    plain protocol's transport would make a 256 KiB bytes object for every read (an
    mmap and a munmap each time, most of the cost of reading an answer)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.transport: asyncio.Transport | None = None
        self.conn: Conn | None = None
        self.buf = b""
        self.lost: BaseException | None = None
        self._line: asyncio.Future[bytes] | None = None
        self._loop = loop
        self._rbuf = memoryview(bytearray(_RECV_SIZE))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._rbuf[:nbytes]))

    def data_received(self, data: bytes) -> None:
        if self.conn is not None:
            assert self.transport is not None
            self.conn._received(self.transport, data)
            return
        self.buf += data
        if self._line is not None and not self._line.done() and b"\n" in self.buf:
            line, _, self.buf = self.buf.partition(b"\n")
            self._line.set_result(line)

    def eof_received(self) -> bool | None:
        return None  # the transport closes, and connection_lost says so

    def connection_lost(self, exc: Exception | None) -> None:
        err: BaseException = exc if exc is not None else ConnectionError("closed the connection")
        if self.conn is not None:
            assert self.transport is not None
            self.conn._lost(self.transport, exc)
            return
        self.lost = err
        if self._line is not None and not self._line.done():
            self._line.set_exception(err)

    async def read_line(self) -> bytes:
        """The first line the server sends (before the session is served)."""
        if b"\n" in self.buf:
            line, _, self.buf = self.buf.partition(b"\n")
            return line
        if self.lost is not None:
            raise self.lost
        self._line = self._loop.create_future()
        return await self._line


class Conn:
    """One connection slot: a task that dials, serves sessions and redials."""

    def __init__(self, client: Client, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.host, self.port = split_address(addr)
        self.state = DIALING
        self.last_error: BaseException | None = None
        # Retired: the address left the cluster's membership. Nothing new is sent on it;
        # it closes once it owes nothing, and is not redialled.
        self.retired = False
        self._writer: asyncio.Transport | None = None  # the session's transport
        self._sock: socket.socket | None = None  # the session's socket (for forget)
        self._ended: asyncio.Future[BaseException] | None = None  # why the session ended
        self._pairing: Pairing[Call] = Pairing()
        self._rbuf = b""  # the start of an answer line not wholly read yet
        self._outq: list[bytes] = []  # requests to write at the start of the next round
        self._silent = False
        self._redial_now = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"baton-conn-{self.addr}"
        )

    def send(self, call: Call, line: bytes) -> None:
        """Registers call and writes line. Raises ConnDown when the connection is not up
        (nothing was sent)."""
        w = self._writer
        if w is None:
            raise ConnDown
        pairing = self._pairing
        if self._outq:
            self._outq.append(line)
        elif len(pairing) == 0:
            # Nothing in flight: at once. Never blocks: the transport buffers. A server
            # that stops reading stops answering too, and the stall watch closes the
            # connection.
            w.write(line)
        else:
            # Requests in flight already: this one and the others of this round of the
            # event loop go out together, in one send, at the start of the next.
            self._outq.append(line)
            asyncio.get_running_loop().call_soon(self._flush, w)
        pairing.push(call, time.monotonic())

    def _flush(self, w: asyncio.Transport) -> None:
        q, self._outq = self._outq, []
        if q and self._writer is w:
            w.write(b"".join(q))

    def redial_soon(self) -> None:
        self._redial_now.set()

    def retire(self) -> None:
        self.retired = True
        self._redial_now.set()
        w = self._writer
        if w is not None and len(self._pairing) == 0:
            self._fail(w, ConnectionError("retired: no longer a member"))

    # --- the session loop --------------------------------------------------

    async def _run(self) -> None:
        last_dial = 0.0
        first = True
        while not self.client._closing and not self.retired:
            if not first:
                if not await self._wait_to_redial(last_dial):
                    break
                self._set_state(DIALING, None)
            first = False
            last_dial = time.monotonic()
            try:
                sock, session = await self._open()
            except Exception as e:  # every failure is a down connection
                self._set_state(DOWN, e)
                continue
            await self._serve(sock, session)
            if self._silent:
                last_dial = time.monotonic()
        if self.retired and not self.client._closing:
            self._set_state(DOWN, ConnectionError("retired: no longer a member"))
            self.client._conn_gone(self)
            return
        self._set_state(DOWN, ClientClosed("client closed"))

    async def _wait_to_redial(self, last_dial: float) -> bool:
        interval = REDIAL_INTERVAL
        while True:
            wait = last_dial + interval - time.monotonic()
            if self.client._closing or self.retired:
                return False
            if wait <= 0:
                return True
            try:
                async with asyncio.timeout(wait):
                    await self._redial_now.wait()
                self._redial_now.clear()
                interval = MIN_REDIAL_GAP
            except TimeoutError:
                pass

    async def _open(self) -> tuple[socket.socket, _Session]:
        c = self.client
        return await open_session(self.addr, c._dial_timeout, c._ssl_context, c._secret)

    async def _serve(self, sock: socket.socket, session: _Session) -> None:
        transport = session.transport
        assert transport is not None
        if self.client._closing or self.retired:
            transport.abort()
            return
        loop = asyncio.get_running_loop()
        self._writer, self._sock = transport, sock
        self._ended = ended = loop.create_future()
        self._silent = False
        self._pairing = Pairing()
        self._rbuf = b""
        self._outq = []
        self.state = UP
        session.conn = self
        rest, session.buf = session.buf, b""
        self.client._notify_change()
        self.client._conn_up(self)
        if session.lost is not None:
            self._fail(transport, session.lost)
        elif rest:
            self._received(transport, rest)
        watch = loop.create_task(self._watch(transport))
        try:
            await ended
        except asyncio.CancelledError:
            self._fail(transport, ClientClosed("client closed"))
            raise
        finally:
            watch.cancel()

    def _received(self, transport: asyncio.Transport, data: bytes) -> None:
        """Bytes read on the session of transport: every whole answer line goes to its
        call."""
        if self._writer is not transport:
            return
        pairing = self._pairing
        pairing.read(time.monotonic())
        lines, self._rbuf = split_lines(self._rbuf, data)
        if len(self._rbuf) > MAX_PARTIAL_LINE:
            self._fail(transport, ConnectionError("answer line too long"))
            return
        for line in lines:
            if not line.strip():
                continue
            if len(line) > 4 * MAX_LINE:
                self._fail(transport, ConnectionError("answer line too long"))
                return
            try:
                ans = parse_answer(line)
            except ValueError as e:
                self._fail(transport, e)
                return
            call = pairing.pop(ans)
            if call is None:
                self._fail(transport, unexpected_answer(self.addr, ans))
                return
            call.deliver(ans)
            if self._writer is not transport:
                return  # a callback ended the session
            if self.retired and len(pairing) == 0:
                self._fail(transport, ConnectionError("retired: no longer a member"))
                return

    def _lost(self, transport: asyncio.Transport, exc: Exception | None) -> None:
        """The transport of a session was closed (by the server, the network, or us)."""
        err: BaseException = exc if exc is not None else ConnectionError(
            f"{self.addr} closed the connection"
        )
        self._fail(transport, err)

    async def _watch(self, writer: asyncio.Transport) -> None:
        """The stall watch of one session (_pairing's), every tick."""
        loop = asyncio.get_running_loop()
        while self._writer is writer:
            await asyncio.sleep(_TICK)
            if self._writer is not writer:
                return
            if self.retired and len(self._pairing) == 0:
                self._fail(writer, ConnectionError("retired: no longer a member"))
                return
            now = time.monotonic()
            probe, dead = self._pairing.check(now)
            if dead is not None:
                self._silent = True
                self._fail(writer, ConnectionError(f"{self.addr} {dead}"))
                return
            if probe:
                self._pairing.push_probe(Call("Q", HEARTBEAT_KEY, loop), now)
                self._flush(writer)
                writer.write(request_line("Q", HEARTBEAT_KEY))

    def _fail(self, writer: asyncio.Transport, err: BaseException) -> None:
        """Ends the session of writer (if still current): every unanswered call fails."""
        if self._writer is not writer:
            return
        self._writer = self._sock = None
        ended, self._ended = self._ended, None
        tls = self.client._ssl_context is not None
        if tls and not self._pairing.read_any and not self._silent:
            err = tls_refusal(err)
        calls = self._pairing.drain()
        self._rbuf = b""
        self._outq = []
        self.state = DOWN
        self.last_error = err
        writer.abort()  # a dead server gets no chance to hold us up
        if ended is not None and not ended.done():
            ended.set_result(err)
        closing = self.client._closing
        for c in calls:
            c.fail(session_error(self.addr, err, closing))
        self.client._notify_change()
        if not closing and not self.retired:
            self.client._conn_lost(self)

    def _set_state(self, state: int, err: BaseException | None) -> None:
        self.state = state
        if err is not None:
            self.last_error = err
        self.client._notify_change()

    def drop(self) -> None:
        """Cuts the current session, as the network would."""
        w = self._writer
        if w is not None:
            self._fail(w, ConnectionError("connection dropped"))

    def forget(self) -> None:
        """After fork, in the child: closes this process's copy of the socket, without a
        shutdown and without the transport (whose loop is the parent's), so that the
        parent's session goes on."""
        sock, self._sock, self._writer = self._sock, None, None
        self._ended = None
        if sock is not None:
            sock.close()


async def _connect(host: str, port: int, addr: str) -> socket.socket:
    """A TCP connection to the address, on a socket of our own: after fork the child
    closes its copy of it (see Conn.forget), which a transport does not let one do."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    err: OSError = OSError(f"{addr}: no address")
    for family, kind, proto, _, sa in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, sa)
            return sock
        except OSError as e:
            sock.close()
            err = e
        except BaseException:
            sock.close()
            raise
    raise err


async def open_session(
    addr: str, timeout: float, ctx: ssl.SSLContext | None, secret: str | None
) -> tuple[socket.socket, _Session]:
    """Opens a session of a connection slot to addr: TCP, then the TLS handshake and
    ``H <secret>`` when configured. What the server sent after the hello's answer is left
    in the session's buf."""
    host, port = split_address(addr)
    loop = asyncio.get_running_loop()
    session = _Session(loop)
    async with asyncio.timeout(timeout):
        sock = await _connect(host, port, addr)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.create_connection(
                lambda: session,
                sock=sock,
                ssl=ctx,
                server_hostname=host if ctx is not None else None,
            )
        except BaseException:
            sock.close()
            raise
    transport = session.transport
    assert transport is not None
    try:
        if secret is not None:
            transport.write(request_line("H", secret.encode()))
            try:
                async with asyncio.timeout(timeout):
                    line = await session.read_line()
            except (ConnectionError, asyncio.IncompleteReadError):
                raise ConnectionError(f"{addr} closed the connection after H") from None
            err = hello_error(addr, parse_answer(line), line)
            if err is not None:
                raise err
    except BaseException:
        transport.abort()
        raise
    return sock, session


async def dial(
    addr: str, timeout: float, ctx: ssl.SSLContext | None, secret: str | None
) -> tuple[socket.socket, asyncio.StreamReader, asyncio.StreamWriter]:
    """Opens a connection of streams to addr (a watch's): TCP, then the TLS handshake and
    ``H <secret>`` when configured."""
    host, port = split_address(addr)
    async with asyncio.timeout(timeout):
        sock = await _connect(host, port, addr)
        try:
            reader, writer = await asyncio.open_connection(
                sock=sock,
                ssl=ctx,
                server_hostname=host if ctx is not None else None,
                limit=MAX_PARTIAL_LINE,
            )
        except BaseException:
            sock.close()
            raise
    try:
        if secret is not None:
            writer.write(request_line("H", secret.encode()))
            async with asyncio.timeout(timeout):
                line = await reader.readline()
            if not line.endswith(b"\n"):
                raise ConnectionError(f"{addr} closed the connection after H")
            line = line[:-1]
            err = hello_error(addr, parse_answer(line), line)
            if err is not None:
                raise err
    except BaseException:
        writer.transport.abort()
        raise
    return sock, reader, writer
