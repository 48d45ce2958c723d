"""Request/reply with the command server inside a sandbox (agent/sandbox/server.py, or the static helper
agent/sandbox/helper.c): one JSON object a line each way over the container's attached stdin/stdout,
replies matched to requests by id, a host-side watchdog for a server that stops answering.

Docker's attach stream multiplexes stdout and stderr (8-byte frame headers); a plain socket (a Kubernetes
pod's TCP connection or exec stream, backends/k8s/; a command's piped stdout) carries the server's stdout
only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Iterator

from results.errors import InfraError

SERVER_SOURCE = (Path(__file__).parent / "server.py").read_text()


class SandboxDied(InfraError):
    """The container or its command server is gone (killed, out of memory, engine restarted).
    Sandbox.death_cause() tells whether what ran inside caused it."""


class SandboxUnresponsive(SandboxDied):
    """Its command server stopped answering and the sandbox was killed. A lost message and an agent whose
    processes starve the server look the same: the runner retries the attempt, and counts it as the
    agent's failure only if every try ends this way."""


def _frames(sock: socket.socket):
    """Yields (stream, payload) from Docker's multiplexed attach stream (8-byte headers)."""
    buf = bytearray()
    while True:
        while len(buf) < 8:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buf += chunk
        stream, size = buf[0], int.from_bytes(buf[4:8], "big")
        while len(buf) < 8 + size:
            chunk = sock.recv(max(65536, 8 + size - len(buf)))
            if not chunk:
                return
            buf += chunk
        yield stream, bytes(buf[8 : 8 + size])
        del buf[: 8 + size]


def _plain(sock: socket.socket):
    """Yields (1, payload): a plain socket is the server's stdout alone."""
    while chunk := sock.recv(1 << 20):
        yield 1, chunk


class CommandChannel:
    """Request/reply with one sandbox's command server over `sock_obj` (Docker's attach socket, or a plain
    socket), read on a thread of its own. `on_unresponsive` (blocking) ends the sandbox when the server
    stops answering; `name` goes into messages."""

    def __init__(self, sock_obj, name: str, multiplexed: bool, on_unresponsive: Callable[[], None]):
        self.id = name
        self.multiplexed = multiplexed  # Docker's attach stream; False: a plain socket
        self.dead = False
        self.server_log: deque[str] = deque(maxlen=50)  # the server's own stderr, for diagnosis
        self._on_unresponsive = on_unresponsive
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 1
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._sock_obj = sock_obj
        self._sock: socket.socket = getattr(sock_obj, "_sock", sock_obj)
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def close(self):
        """Marks the channel dead (pending requests fail) and closes the socket; safe to call twice."""
        self.mark_dead("closed")
        with contextlib.suppress(Exception):
            self._sock.close()

    def _chunks(self) -> Iterator[tuple[int, bytes]]:
        return _frames(self._sock) if self.multiplexed else _plain(self._sock)

    def _read_loop(self):
        pending = bytearray()
        try:
            for stream, payload in self._chunks():
                if stream != 1:
                    self.server_log.append(payload.decode("utf-8", "replace"))
                    continue
                pending += payload
                while (nl := pending.find(b"\n")) >= 0:
                    line, pending = bytes(pending[:nl]), pending[nl + 1 :]
                    self._dispatch(json.loads(line))
        except (OSError, ValueError):
            pass
        self.mark_dead("command server closed its stream")

    def _dispatch(self, msg: dict):
        if msg.get("ready"):
            self._ready.set()
            return
        with self._lock:
            fut = self._pending.pop(msg.get("id"), None)
        if fut is not None:
            fut.get_loop().call_soon_threadsafe(_resolve, fut, msg)

    def mark_dead(self, why: str):
        with self._lock:
            self.dead = True
            pending, self._pending = self._pending, {}
        self._ready.set()
        for fut in pending.values():
            fut.get_loop().call_soon_threadsafe(_fail, fut, SandboxDied(f"sandbox {self.id[:12]}: {why}"))

    def wait_ready(self, timeout: float = 30.0):
        """Blocks until the server said it is ready; SandboxDied (with its last words) if it never does."""
        if not self._ready.wait(timeout) or self.dead:
            raise SandboxDied(
                f"sandbox {self.id[:12]} did not start its command server: "
                + " ".join(self.server_log)[-300:]
            )

    async def request(self, req: dict, host_timeout: float) -> dict:
        """Sends `req` (an id is added) and returns the server's reply. No reply within `host_timeout`: the
        sandbox is ended (SandboxUnresponsive); a broken stream: SandboxDied."""
        if self.dead:
            raise SandboxDied(f"sandbox {self.id[:12]} is dead")
        fut = asyncio.get_running_loop().create_future()
        with self._lock:
            req["id"] = self._next_id
            self._next_id += 1
            self._pending[req["id"]] = fut
        data = (json.dumps(req) + "\n").encode()
        try:
            if len(data) > 65536:
                await asyncio.to_thread(self._send, data)
            else:
                self._send(data)
            # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancellation (Ctrl-C) that lands
            # as the reply arrives, and the run goes on as if never interrupted
            async with asyncio.timeout(host_timeout):
                return await fut
        except asyncio.TimeoutError:
            # The server itself stopped answering (e.g. starved by a fork bomb): this sandbox is done.
            self.mark_dead(f"no answer within {host_timeout:.0f}s")
            await asyncio.to_thread(self._on_unresponsive)
            raise SandboxUnresponsive(f"sandbox {self.id[:12]} stopped answering") from None
        except OSError as e:
            self.mark_dead(str(e))
            raise SandboxDied(f"sandbox {self.id[:12]}: {e}") from None
        finally:
            with self._lock:
                self._pending.pop(req["id"], None)

    def _send(self, data: bytes):
        with self._lock:
            self._sock.sendall(data)


def _resolve(fut: asyncio.Future, msg):
    if not fut.done():
        fut.set_result(msg)


def _fail(fut: asyncio.Future, exc):
    if not fut.done():
        fut.set_exception(exc)
