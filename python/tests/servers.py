"""Real batond processes and a fault-injecting TCP proxy, for the tests.

Every wait is bounded; every process started is killed in teardown; all traffic
stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

READY_TIMEOUT = 20.0

_handed_out: set[int] = set()


def free_ports(n: int) -> list[int]:
    """n distinct free ports, never handed out before in this process."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            p = s.getsockname()[1]
            if p not in _handed_out:
                ports.append(p)
                _handed_out.add(p)
    finally:
        for s in socks:
            s.close()
    return ports


def raw_lines(addr: str, lines: list[str], timeout: float = 2.0, secret: str = "") -> list[str]:
    """Sends lines on a fresh connection and returns one answer line per request."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        pre = f"H {secret}\n" if secret else ""
        s.sendall((pre + "".join(x + "\n" for x in lines)).encode())
        want = len(lines) + (1 if secret else 0)
        buf = b""
        deadline = time.monotonic() + timeout
        while buf.count(b"\n") < want and time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    out = buf.decode().splitlines()
    return out[1:] if secret else out


class Node:
    def __init__(self, binary: Path, root: Path, node_id: int, raft: str, client: str,
                 peers: str, extra: list[str]) -> None:
        self.binary = binary
        self.id = node_id
        self.raft = raft
        self.addr = client
        self.data = root / f"n{node_id}"
        self.log = root / f"n{node_id}.log"
        self.args = ["--id", str(node_id), "--peers", peers, "--data", str(self.data),
                     "--shards", "1", *extra]
        self.proc: subprocess.Popen[bytes] | None = None
        self.secret = ""
        self.paused = False

    def start(self) -> None:
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen([str(self.binary), *self.args], stdout=f,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def serving(self, allow_moved: bool) -> bool:
        try:
            ans = raw_lines(self.addr, ["Q __ready__"], timeout=1.0, secret=self.secret)
        except OSError:
            return False
        if not ans:
            return False
        f = ans[0].split()
        return len(f) >= 3 and (f[2] in ("FREE", "HELD") or (allow_moved and f[2] == "MOVED"))

    def leads(self) -> bool:
        try:
            ans = raw_lines(self.addr, ["Q __ready__"], timeout=1.0, secret=self.secret)
        except OSError:
            return False
        return bool(ans) and ans[0].split()[2:3] in (["FREE"], ["HELD"])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def start_cluster(binary: Path, root: Path, n: int, extra: list[str] | None = None,
                  secret: str = "") -> list[Node]:
    extra = list(extra or [])
    if secret:
        f = root / "secret"
        f.write_text(secret + "\n")
        extra += ["--auth-file", str(f)]
    ports = free_ports(2 * n)
    peers = ",".join(f"127.0.0.1:{ports[2*i]}/127.0.0.1:{ports[2*i+1]}" for i in range(n))
    nodes = [Node(binary, root, i + 1, f"127.0.0.1:{ports[2*i]}", f"127.0.0.1:{ports[2*i+1]}",
                  peers, extra) for i in range(n)]
    for nd in nodes:
        nd.secret = secret
        nd.start()
    deadline = time.monotonic() + READY_TIMEOUT
    try:
        for nd in nodes:
            while not nd.serving(allow_moved=n > 1):
                if not nd.running():
                    raise RuntimeError(f"node {nd.id} exited:\n{nd.log_text()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {nd.id} not serving:\n{nd.log_text()}")
                time.sleep(0.05)
        # A cluster serves once one node leads.
        while n > 1 and not any(nd.leads() for nd in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("no leader elected")
            time.sleep(0.05)
    except BaseException:
        for nd in nodes:
            nd.kill()
        raise
    return nodes


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def leader(nodes: list[Node], timeout: float = 15.0) -> Node:
    """The running, unpaused node that leads (Node.leads), once one does."""
    found: list[Node] = []

    def one() -> bool:
        found[:] = [n for n in nodes if n.running() and not n.paused and n.leads()]
        return bool(found)

    wait_for(one, timeout, "a leader")
    return found[0]


async def wait_until(cond: Callable[[], bool | Awaitable[bool]], timeout: float,
                     what: str) -> None:
    """wait_for for asyncio tests: polls cond (sync or async) until it holds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


class _Pair:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.frozen = False  # server-to-client bytes are held, not forwarded
        self.held = b""
        self.client_closed = threading.Event()
        self.closed = False
        self.requests: list[str] = []  # the request lines forwarded, in order

    def close(self) -> None:
        self.closed = True
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of one address, with faults per connection.

    - ``freeze_on(pattern)``: a connection whose server sends a line starting with
      pattern holds that line and everything after it (the server seems to hang).
    - ``cut_on_answer(pattern)``: the connection is cut instead of delivering that line.
    - ``cut_on_request(pattern)``: the connection is cut instead of forwarding a request
      line starting with pattern.
    - ``block()`` / ``unblock()``: cut every connection and refuse new ones meanwhile.

    ``C - OK`` answers get the proxy's address in place of the server's.
    """

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.pairs: list[_Pair] = []
        self.mu = threading.Lock()
        self.blocked = False
        self.freeze_pattern: bytes | None = None
        self.cut_answer_pattern: bytes | None = None
        self.cut_request_pattern: bytes | None = None
        self.events: list[str] = []
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                r, _, _ = select.select([self.listener], [], [], 0.1)
                if not r:
                    continue
                c, _ = self.listener.accept()
            except (OSError, ValueError):  # closed under us (close)
                return
            if self.blocked:
                c.close()
                continue
            try:
                u = socket.create_connection(self.target, timeout=2)
            except OSError:
                c.close()
                continue
            p = _Pair(c, u)
            with self.mu:
                self.pairs.append(p)
            threading.Thread(target=self._pump_up, args=(p,), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(p,), daemon=True).start()

    def _pump_up(self, p: _Pair) -> None:
        buf = b""
        while not p.closed:
            try:
                data = p.client.recv(65536)
            except OSError:
                break
            if not data:
                p.client_closed.set()
                break
            buf += data
            out = b""
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                pat = self.cut_request_pattern
                if pat is not None and line.startswith(pat):
                    self.cut_request_pattern = None
                    self.events.append("cut-request " + line.decode())
                    p.close()
                    return
                p.requests.append(line.decode(errors="replace"))
                out += line + b"\n"
            try:
                p.upstream.sendall(out)
            except OSError:
                break
        p.close()

    def _pump_down(self, p: _Pair) -> None:
        buf = b""
        while not p.closed:
            try:
                data = p.upstream.recv(65536)
            except OSError:
                break
            if not data:
                break
            if p.frozen:
                p.held += data
                continue
            buf += data
            out = b""
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                if self.cut_answer_pattern is not None and line.startswith(
                        self.cut_answer_pattern):
                    self.cut_answer_pattern = None
                    self.events.append("cut-answer " + line.decode())
                    p.close()
                    return
                if self.freeze_pattern is not None and line.startswith(self.freeze_pattern):
                    self.freeze_pattern = None
                    self.events.append("freeze " + line.decode())
                    p.frozen = True
                    p.held = line + b"\n" + buf
                    buf = b""
                    break
                out += self._rewrite(line) + b"\n"
            try:
                p.client.sendall(out)
            except OSError:
                break
        if not p.frozen:
            p.close()

    def _rewrite(self, line: bytes) -> bytes:
        """C - names the server's own address: the proxy puts its own in its place, so that
        a client that follows the membership stays behind the proxy."""
        if line.startswith(b"C - OK "):
            target = f"{self.target[0]}:{self.target[1]}".encode()
            addrs = line[len(b"C - OK "):].split(b",")
            line = b"C - OK " + b",".join(self.addr.encode() if a == target else a
                                          for a in addrs)
        return line

    def freeze_on(self, pattern: str) -> None:
        self.freeze_pattern = pattern.encode()

    def cut_on_answer(self, pattern: str) -> None:
        self.cut_answer_pattern = pattern.encode()

    def cut_on_request(self, pattern: str) -> None:
        self.cut_request_pattern = pattern.encode()

    def block(self) -> None:
        self.blocked = True
        with self.mu:
            for p in self.pairs:
                p.close()

    def unblock(self) -> None:
        self.blocked = False

    def frozen_pairs(self) -> list[_Pair]:
        with self.mu:
            return [p for p in self.pairs if p.frozen]

    def close(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.listener.close()
        with self.mu:
            for p in self.pairs:
                p.close()
        self.thread.join(timeout=2)


def go_binary() -> str:
    """The go command: $GO (as make passes it), else go on PATH, else /usr/local/go."""
    for cand in (os.environ.get("GO", ""), "go", "/usr/local/go/bin/go"):
        path = shutil.which(cand) if cand else None
        if path:
            return path
    raise RuntimeError("go not found: the tests build batond from the repository")
