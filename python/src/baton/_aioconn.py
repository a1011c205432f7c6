"""One persistent connection slot of the asyncio client: a task that dials, reads answers
and redials, and a watch task per session for a server that stops answering.

The pairing and the stall watch are _pairing's, as in the sync client. A request is
registered in the pairing and written in one step of the event loop (``write`` does not
block), so the order of the pairing is the order of the bytes on the wire.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from typing import TYPE_CHECKING

from ._core import DIALING, DOWN, UP
from ._pairing import Call as BaseCall
from ._pairing import (
    ClientClosed,
    Pairing,
    hello_error,
    session_error,
    tls_refusal,
    unexpected_answer,
)
from ._protocol import HEARTBEAT_KEY, MAX_LINE, parse_answer, request_line, split_address

if TYPE_CHECKING:
    from .aio import Client

REDIAL_INTERVAL = 3.0
MIN_REDIAL_GAP = 0.1
_TICK = 0.1  # how often the watch looks at the clock
_READ_LIMIT = 64 * 1024


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

    async def wait(self, timeout: float | None) -> None:
        """Waits for the answer (or the error). A caller cancelled (or timed out) meanwhile
        gives the call up: it keeps its place in the pairing, and its answer goes to
        on_abandoned."""
        try:
            if timeout is None:
                await self._fut
            else:
                async with asyncio.timeout(timeout):
                    await self._fut
        except BaseException:
            self.give_up()
            raise


class Conn:
    """One connection slot: a task that dials, reads answers and redials."""

    def __init__(self, client: Client, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.host, self.port = split_address(addr)
        self.state = DIALING
        self.last_error: BaseException | None = None
        # Retired: the address left the cluster's membership. Nothing new is sent on it;
        # it closes once it owes nothing, and is not redialled.
        self.retired = False
        self._writer: asyncio.StreamWriter | None = None
        self._sock: socket.socket | None = None  # the session's socket (for forget)
        self._pairing: Pairing[Call] = Pairing()
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
        self._pairing.push(call, time.monotonic())
        # Never blocks: the transport buffers. A server that stops reading stops
        # answering too, and the stall watch closes the connection.
        w.write(line)

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
                sock, reader, writer = await self._open()
            except Exception as e:  # every failure is a down connection
                self._set_state(DOWN, e)
                continue
            await self._serve(sock, reader, writer)
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

    async def _open(
        self,
    ) -> tuple[socket.socket, asyncio.StreamReader, asyncio.StreamWriter]:
        c = self.client
        return await dial(self.addr, c._dial_timeout, c._ssl_context, c._secret)

    async def _serve(
        self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self.client._closing or self.retired:
            writer.transport.abort()
            return
        self._writer, self._sock = writer, sock
        self._silent = False
        self._pairing = Pairing()
        self.state = UP
        self.client._notify_change()
        self.client._conn_up(self)
        watch = asyncio.get_running_loop().create_task(self._watch(writer))
        try:
            err = await self._read(reader)
        except asyncio.CancelledError:
            self._fail(writer, ClientClosed("client closed"))
            raise
        finally:
            watch.cancel()
        self._fail(writer, err)

    async def _read(self, reader: asyncio.StreamReader) -> BaseException:
        pairing = self._pairing
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                return ConnectionError(f"{self.addr} closed the connection")
            except asyncio.LimitOverrunError:
                return ConnectionError("answer line too long")
            except OSError as e:
                return e
            pairing.read(time.monotonic())
            line = line[:-1]
            if not line.strip():
                continue
            if len(line) > 4 * MAX_LINE:
                return ConnectionError("answer line too long")
            try:
                ans = parse_answer(line)
            except ValueError as e:
                return e
            call = pairing.pop(ans)
            if call is None:
                return unexpected_answer(self.addr, ans)
            call.deliver(ans)
            if self.retired and len(pairing) == 0:
                return ConnectionError("retired: no longer a member")

    async def _watch(self, writer: asyncio.StreamWriter) -> None:
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
                writer.write(request_line("Q", HEARTBEAT_KEY))

    def _fail(self, writer: asyncio.StreamWriter, err: BaseException) -> None:
        """Ends the session of writer (if still current): every unanswered call fails."""
        if self._writer is not writer:
            return
        self._writer = self._sock = None
        tls = self.client._ssl_context is not None
        if tls and not self._pairing.read_any and not self._silent:
            err = tls_refusal(err)
        calls = self._pairing.drain()
        self.state = DOWN
        self.last_error = err
        writer.transport.abort()  # a dead server gets no chance to hold us up
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


async def dial(
    addr: str, timeout: float, ctx: ssl.SSLContext | None, secret: str | None
) -> tuple[socket.socket, asyncio.StreamReader, asyncio.StreamWriter]:
    """Opens a session to addr: TCP, then the TLS handshake and ``H <secret>`` when
    configured."""
    host, port = split_address(addr)
    async with asyncio.timeout(timeout):
        sock = await _connect(host, port, addr)
        try:
            reader, writer = await asyncio.open_connection(
                sock=sock,
                ssl=ctx,
                server_hostname=host if ctx is not None else None,
                limit=_READ_LIMIT,
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
