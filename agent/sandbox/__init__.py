"""The one sandbox API: a hardened, single-use Docker container, and a warm pool of them.

Each container's main process is agent/sandbox/server.py (a ~1 ms command runner on the
attached stdin/stdout), so commands need neither `docker exec` nor a network. Every container is
used for one attempt only, then destroyed: nothing written in one attempt is seen by the next.

    pool = SandboxPool(run_id="r1")
    async with pool.sandbox(image, Limits()) as sb:
        await sb.put_files({"a.txt": b"hi"})
        r = await sb.exec("cat a.txt", timeout=10)
"""
from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import hashlib
import io
import json
import os
import secrets
import signal
import socket
import sys
import tarfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

import docker
import docker.errors
import requests
from docker.types import Ulimit
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from results.errors import InfraError, UserError

if TYPE_CHECKING:
    from agent.sandbox.native import NativeSpec

AGENT_UID = 10001  # a uid no host account uses: per-uid limits are shared across the host
WORKSPACE = "/workspace"
SERVER_SOURCE = (Path(__file__).parent / "server.py").read_text()
CAPTURE_SOURCE = (Path(__file__).parent / "capture.py").read_text()
LABEL_RUN = "harness.run"
LABEL_PID = "harness.pid"
LABEL_TASK = "harness.task"
LABEL_POOL = "harness.pool"  # unique per SandboxPool: run ids (folder names) can repeat across processes
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxDied(InfraError):
    """The container or its command server is gone (killed, out of memory, engine restarted).
    Sandbox.death_cause() tells whether what ran inside caused it."""


class SandboxUnresponsive(SandboxDied):
    """Its command server stopped answering and the sandbox was killed. A lost message and an agent whose
    processes starve the server look the same: the runner retries the attempt, and counts it as the
    agent's failure only if every try ends this way."""


class CaptureError(Exception):
    """The workspace could not be listed or read (the changes are then rejected, never a crash)."""


@dataclass(frozen=True)
class Limits:
    """Hardening and resource limits; every field can be overridden per task."""
    memory_mb: int = 1024  # swap is set equal: no swap
    cpus: float = 1.0
    pids: int = 256
    workspace_mb: int = 512  # size-limited writable /workspace (tmpfs)
    tmp_mb: int = 256
    network: bool = False  # False -> network_mode none: only lo exists
    nofile: int = 1024
    fsize_mb: int = 512  # largest single file
    read_only: bool = True  # read-only root filesystem
    runtime: Optional[str] = None  # e.g. "runsc" (gVisor) where installed
    native: Optional["NativeSpec"] = None  # agent/sandbox/native.py: static helper, any image, Harbor's contract

    @classmethod
    def for_task(cls, env) -> "Limits":
        """From a task's [environment] table (tasks.model.Environment)."""
        # A task written on a bigger machine still runs here: Docker refuses more CPUs than the host has.
        return cls(memory_mb=env.memory_mb, cpus=min(env.cpus, float(os.cpu_count() or 1)), pids=env.pids,
                   workspace_mb=env.storage_mb, network=env.allow_internet)


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    oom: bool = False
    dropped_bytes: int = 0  # bytes cut from the middle of stdout+stderr

    @property
    def output(self) -> str:
        """stdout and stderr together, as an observation for a model."""
        if self.stdout and self.stderr:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr


@dataclass
class Changes:
    """What an attempt changed in /workspace, captured with caps and path checks."""
    files: dict[str, bytes] = field(default_factory=dict)  # added or modified regular files
    executable: set[str] = field(default_factory=set)  # which of those have the executable bit
    deleted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # reasons (symlinks, caps exceeded, ...)

    @property
    def paths(self) -> list[str]:
        return sorted(set(self.files) | set(self.deleted))


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        return True
    if isinstance(exc, docker.errors.APIError) and not isinstance(exc, docker.errors.NotFound):
        code = exc.status_code or 0
        return code >= 500 or code == 409
    return False


docker_retry = retry(retry=retry_if_exception(_transient), stop=stop_after_attempt(4),
                     wait=wait_random_exponential(multiplier=0.2, max=3), reraise=True)

_client: Optional[docker.DockerClient] = None
_client_lock = threading.Lock()


def docker_client() -> docker.DockerClient:
    """One shared client. A missing engine is a user error with the fix."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                client = docker.from_env(timeout=120, max_pool_size=64)
                client.ping()
            except docker.errors.DockerException as e:
                raise UserError(
                    f"no Docker engine answers ({str(e).splitlines()[0][:120]}): start one "
                    "(`make setup` installs and starts it as root, or `sudo dockerd &`)") from None
            _client = client
        return _client


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
        yield stream, bytes(buf[8:8 + size])
        del buf[:8 + size]


class Sandbox:
    """One started container with its command server attached. Use through SandboxPool."""

    workdir = WORKSPACE  # the agent's working folder (a NativeSandbox may have another)

    def __init__(self, container, image: str, limits: Limits, pool_key: tuple):
        self.container = container
        self.id = container.id
        self.image = image
        self.limits = limits
        self.pool_key = pool_key
        self.dead = False
        self.server_log = deque(maxlen=50)  # the server's own stderr, for diagnosis
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 1
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._baseline: Optional[dict] = None
        self._initial_files: dict[str, bytes] = {}  # what put_files wrote into /workspace (for diff)
        self._sock_obj = container.client.api.attach_socket(
            container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        self._sock: socket.socket = getattr(self._sock_obj, "_sock", self._sock_obj)
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    # -- plumbing ---------------------------------------------------------------------------
    def _read_loop(self):
        pending = bytearray()
        try:
            for stream, payload in _frames(self._sock):
                if stream != 1:
                    self.server_log.append(payload.decode("utf-8", "replace"))
                    continue
                pending += payload
                while (nl := pending.find(b"\n")) >= 0:
                    line, pending = bytes(pending[:nl]), pending[nl + 1:]
                    self._dispatch(json.loads(line))
        except (OSError, ValueError):
            pass
        self._mark_dead("command server closed its stream")

    def _dispatch(self, msg: dict):
        if msg.get("ready"):
            self._ready.set()
            return
        with self._lock:
            fut = self._pending.pop(msg.get("id"), None)
        if fut is not None:
            fut.get_loop().call_soon_threadsafe(_resolve, fut, msg)

    def _mark_dead(self, why: str):
        with self._lock:
            self.dead = True
            pending, self._pending = self._pending, {}
        self._ready.set()
        for fut in pending.values():
            fut.get_loop().call_soon_threadsafe(_fail, fut, SandboxDied(f"sandbox {self.id[:12]}: {why}"))

    def wait_ready(self, timeout: float = 30.0):
        if not self._ready.wait(timeout) or self.dead:
            raise SandboxDied(f"sandbox {self.id[:12]} did not start its command server: "
                              + " ".join(self.server_log)[-300:])

    async def _request(self, req: dict, host_timeout: float) -> dict:
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
            return await asyncio.wait_for(fut, host_timeout)
        except asyncio.TimeoutError:
            # The server itself stopped answering (e.g. starved by a fork bomb): this sandbox is done.
            self._mark_dead(f"no answer within {host_timeout:.0f}s")
            await asyncio.to_thread(self.kill)
            raise SandboxUnresponsive(f"sandbox {self.id[:12]} stopped answering") from None
        except OSError as e:
            self._mark_dead(str(e))
            raise SandboxDied(f"sandbox {self.id[:12]}: {e}") from None
        finally:
            with self._lock:
                self._pending.pop(req["id"], None)

    def _send(self, data: bytes):
        with self._lock:
            self._sock.sendall(data)

    # -- the API ----------------------------------------------------------------------------
    async def exec_raw(self, cmd: str | list[str], *, timeout: float = 60.0, cap: int = 64 * 1024,
                       user: str = "agent", cwd: str = WORKSPACE, env: Optional[dict] = None,
                       stdin: Optional[bytes] = None) -> dict:
        """Runs a command; returns the server's reply with stdout/stderr head and tail as bytes."""
        req: dict = {"timeout": timeout, "cap": cap, "user": user, "cwd": cwd}
        req["argv" if isinstance(cmd, list) else "cmd"] = cmd
        if env is not None:
            req["env"] = env
        if stdin is not None:
            req["stdin"] = base64.b64encode(stdin).decode()
        reply = await self._request(req, host_timeout=timeout + 15 + len(req.get("stdin", "")) / 5e6)
        if "error" in reply:
            raise SandboxDied(f"sandbox {self.id[:12]}: {reply['error']}")
        for k in ("out_head", "out_tail", "err_head", "err_tail"):
            reply[k] = base64.b64decode(reply[k])
        return reply

    async def exec(self, cmd: str | list[str], timeout: float = 60.0, *, cap: int = 64 * 1024,
                   user: str = "agent", cwd: str = WORKSPACE, env: Optional[dict] = None,
                   stdin: Optional[bytes] = None) -> ExecResult:
        """Runs `cmd` (shell text, or an argv list) in a fresh process as the sandbox user.
        On timeout the command's whole process tree is killed; the sandbox stays usable.
        Output beyond `cap` bytes per stream keeps its head and tail."""
        r = await self.exec_raw(cmd, timeout=timeout, cap=cap, user=user, cwd=cwd, env=env, stdin=stdin)
        return ExecResult(
            exit_code=r["exit_code"], stdout=_join(r["out_head"], r["out_dropped"], r["out_tail"]),
            stderr=_join(r["err_head"], r["err_dropped"], r["err_tail"]), duration=r["duration"],
            timed_out=r["timed_out"], oom=r["oom"], dropped_bytes=r["out_dropped"] + r["err_dropped"])

    async def put_files(self, files: dict[str, bytes], dest: str = WORKSPACE, user: str = "agent",
                        executable: Iterable[str] = ()):
        """Writes files by streaming a tar into `tar -x` inside (put_archive cannot reach a tmpfs).
        Modes are 0644, or 0755 for the paths named in `executable`."""
        if not files:
            return
        if dest == WORKSPACE:
            self._initial_files.update(files)
        executable = set(executable)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name.lstrip("/"))
                info.size = len(data)
                info.mode = 0o755 if name in executable else 0o644
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(data))
        r = await self.exec_raw(["sh", "-c", 'mkdir -p "$1" && exec tar -x --no-same-owner -m -C "$1"', "_", dest],
                                stdin=buf.getvalue(),
                                timeout=120, user=user, cwd="/")
        if r["exit_code"] != 0:
            raise InfraError(f"writing files into {dest} failed: {r['err_head'].decode(errors='replace')[:300]}")

    async def get_files(self, paths: list[str], root: str = WORKSPACE, max_bytes: int = 16 << 20) -> dict[str, bytes]:
        """Reads regular files (relative to root) out as a tar stream; extracted in memory with
        tarfile's 'data' filter (no links, no absolute paths). Raises InfraError above max_bytes."""
        if not paths:
            return {}
        r = await self.exec_raw(["tar", "-c", "-C", root, "--", *paths], timeout=120, cap=max_bytes * 2,
                                user="root", cwd="/")
        if r["out_dropped"]:
            raise InfraError(f"files under {root} exceed {max_bytes} bytes")
        out: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(r["out_head"] + r["out_tail"]), mode="r:") as tar:
            for member in tar:
                member = tarfile.data_filter(member, "/nonexistent")  # rejects links out, abs paths
                if member.isfile():
                    out[member.name] = tar.extractfile(member).read()
        return out

    async def _capture(self, args: list[str], stdin: Optional[bytes] = None, cap: int = 64 << 20) -> dict:
        """Runs agent/sandbox/capture.py inside as root; its JSON answer, or CaptureError."""
        r = await self.exec_raw(["python3", "-I", "-c", CAPTURE_SOURCE, *args], timeout=120, cap=cap,
                                user="root", cwd="/", stdin=stdin)
        if r["out_dropped"]:
            raise CaptureError(f"the capture's answer is over {cap} bytes")
        try:
            out = json.loads(r["out_head"] + r["out_tail"])
        except ValueError:
            raise CaptureError(f"capture failed (exit {r['exit_code']}): "
                               f"{r['err_tail'].decode('utf-8', 'replace')[-300:]}") from None
        if not isinstance(out, dict):
            raise CaptureError("capture answered something other than an object")
        return out

    async def snapshot(self, max_files: int = 5000) -> dict:
        """path -> [kind, size, sha256 or link target, executable] for everything under /workspace
        (kind: f file, l link, o other); "too_many" when over max_files, "!rejected": what could not be listed."""
        out = await self._capture(["list", WORKSPACE, str(max_files)])
        entries = {p: m for p, m in out.get("entries", {}).items() if m[0] != "d"}
        if "too_many" in out:
            entries["too_many"] = out["too_many"]
        if out.get("rejected"):
            entries["!rejected"] = list(out["rejected"])
        return entries

    async def mark_baseline(self):
        """Remembers the workspace as it is now; changes() compares against it."""
        self._baseline = await self.snapshot()

    async def changes(self, max_bytes: int = 10 << 20, max_files: int = 2000) -> Changes:
        """The agent's changes since mark_baseline(), bounded in bytes and file count. Never raises for
        anything the agent can make in its workspace: symlinks, special files, unreadable or too deep
        entries are not copied out, only listed in `rejected` (the attempt is graded without them)."""
        ch = Changes()
        try:
            now = await self.snapshot(max_files=max_files)
        except CaptureError as e:
            ch.rejected.append(str(e))
            return ch
        if "too_many" in now:
            ch.rejected.append(f"more than {max_files} files in the workspace")
            return ch
        ch.rejected += now.pop("!rejected", [])
        base = {p: m for p, m in (self._baseline or {}).items() if p != "!rejected"}
        changed = [p for p, meta in now.items() if base.get(p) != meta and not _is_cache(p)]
        ch.deleted = sorted(p for p in base if p not in now and base[p][0] != "o")
        wanted, total = [], 0
        for p in sorted(changed):
            kind, size = now[p][0], now[p][1]
            if kind == "l":
                ch.rejected.append(f"symlink {p}")
            elif kind == "o":
                ch.rejected.append(f"special or unreadable file {p}")
            elif kind == "f":
                total += size
                wanted.append(p)
                if now[p][3:4] == [True]:
                    ch.executable.add(p)
        if total > max_bytes:
            ch.rejected.append(f"changes total {total} bytes, over the cap of {max_bytes}")
            return ch
        if wanted:
            try:
                out = await self._capture(["read", WORKSPACE, str(max_bytes)], stdin=json.dumps(wanted).encode())
                ch.files = {p: base64.b64decode(d) for p, d in out.get("files", {}).items()}
                ch.rejected += out.get("rejected", [])
            except (CaptureError, ValueError, TypeError) as e:
                ch.rejected.append(f"reading the changed files failed: {e}")
                ch.files = {}
        ch.executable &= set(ch.files)
        return ch

    async def diff(self) -> str:
        """A unified diff of the workspace against the baseline (text files), for people and `run`."""
        import difflib
        ch = await self.changes()
        before = self._initial_files
        parts = []
        for p in ch.paths:
            a = before.get(p, b"").decode("utf-8", "replace").splitlines(keepends=True)
            b = ch.files.get(p, b"").decode("utf-8", "replace").splitlines(keepends=True)
            parts.extend(difflib.unified_diff(a, b, f"a/{p}", f"b/{p}"))
        return "".join(parts)

    def death_cause(self, wait: float = 5.0) -> Optional[str]:
        """After the sandbox died: "oom" when its memory limit was used up (the doing of what ran inside),
        else None (killed from outside, the engine failed, or not provable): an infrastructure error."""
        return "oom" if self.died_of_oom(wait) else None

    def died_of_oom(self, wait: float = 5.0) -> bool:
        """After the sandbox died: did its memory cgroup run out? That is the agent's own doing (its
        processes, or its files in a tmpfs, used the memory limit up). False when it was killed from
        outside, the engine failed, or the cause cannot be told: those stay infrastructure errors."""
        try:
            self.container.wait(timeout=wait)
            self.container.reload()
            return bool(self.container.attrs["State"].get("OOMKilled"))
        except Exception:  # noqa: BLE001 -- removed, still running, or no engine: not provably the agent
            return False

    def kill(self):
        """Kill and remove the container; safe to call twice."""
        self.dead = True
        with contextlib.suppress(Exception):
            self._sock.close()
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError,
                                 requests.exceptions.RequestException):
            self.container.remove(force=True)


def _is_cache(path: str) -> bool:
    """Byte-code and test caches: written by running code, never part of an answer."""
    parts = path.split("/")
    return "__pycache__" in parts or ".pytest_cache" in parts or path.endswith((".pyc", ".pyo"))


def _resolve(fut: asyncio.Future, msg):
    if not fut.done():
        fut.set_result(msg)


def _fail(fut: asyncio.Future, exc):
    if not fut.done():
        fut.set_exception(exc)


def _join(head: bytes, dropped: int, tail: bytes) -> str:
    text = head.decode("utf-8", "replace")
    if dropped:
        text += f"\n[... {dropped} bytes of output cut here ...]\n"
    return text + tail.decode("utf-8", "replace")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def create_sandbox(image: str, limits: Limits, run_id: str, task: str = "pool", pool_id: str = "",
                   network: Optional[str] = None) -> Sandbox:
    """Creates, attaches and starts one hardened container (blocking: call from a thread). A networked
    sandbox joins `network` (its pool's own, see SandboxPool.network_for); others have only lo."""
    if limits.native is not None:  # the static helper: any image, Harbor's runtime contract
        from agent.sandbox.native import create_native
        return create_native(image, limits, run_id, task, pool_id, network)
    client = docker_client()
    tmpfs = {WORKSPACE: f"size={limits.workspace_mb}m,uid={AGENT_UID},gid={AGENT_UID},mode=0755,exec",
             "/tmp": f"size={limits.tmp_mb}m,mode=1777,exec",
             # root-owned and not writable by the sandbox user: hidden tests go here when grading
             "/grader": "size=64m,uid=0,gid=0,mode=0700,exec"}
    kwargs = dict(
        command=["python3", "-u", "-I", "-c", "import os; exec(os.environ.pop('HARNESS_SERVER'))"], detach=True, stdin_open=True, tty=False,
        init=True, user="0:0", working_dir=WORKSPACE,
        name=f"harness-{run_id[:12]}-{secrets.token_hex(4)}",
        labels={LABEL_RUN: run_id, LABEL_PID: str(os.getpid()), LABEL_TASK: task, LABEL_POOL: pool_id},
        network_mode=(network or "bridge") if limits.network else "none",
        mem_limit=f"{limits.memory_mb}m", memswap_limit=f"{limits.memory_mb}m",
        nano_cpus=int(limits.cpus * 1e9), pids_limit=limits.pids,
        # For the server and the harness's own root commands (capture, the grader's test runner) only: a
        # command of the sandbox user gets none (a uid change drops them; no-new-privileges keeps them off).
        cap_drop=["ALL"], cap_add=["SETUID", "SETGID", "KILL", "DAC_OVERRIDE"],
        security_opt=["no-new-privileges"], read_only=limits.read_only, tmpfs=tmpfs,
        ulimits=[Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
                 Ulimit(name="fsize", soft=limits.fsize_mb << 20, hard=limits.fsize_mb << 20),
                 Ulimit(name="core", soft=0, hard=0)],
        environment={"HARNESS_SERVER": SERVER_SOURCE, "HARNESS_UID": str(AGENT_UID), "HOME": "/tmp", "PATH": PATH, "LANG": "C.UTF-8",
                     "PYTHONDONTWRITEBYTECODE": "1"},
        log_config={"type": "none"},  # replies travel over attach; keep nothing on the host's disk
    )
    if limits.runtime:
        kwargs["runtime"] = limits.runtime
    try:
        container = docker_retry(client.containers.create)(image, **kwargs)
    except docker.errors.ImageNotFound:
        raise UserError(f"image {image} not found: build it with `harness images build`") from None
    try:
        sb = Sandbox(container, image, limits, (image, limits))
        docker_retry(container.start)()
        sb.wait_ready()
        return sb
    except BaseException:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        raise


class SandboxPool:
    """Keeps `warm` started sandboxes per (image, limits) ready; acquire() takes one in
    milliseconds, release() destroys it and the pool refills in the background. At most
    `max_containers` exist at once (warm + in use)."""

    def __init__(self, run_id: Optional[str] = None, warm: int = 2, max_containers: int = 8):
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.pool_id = uuid.uuid4().hex[:12]  # close() removes exactly this pool's containers
        self.warm = warm
        self.max_containers = max(1, max_containers)
        self._ready: dict[tuple, deque[Sandbox]] = {}
        self._live = 0  # containers existing or being created
        self._in_use: set[Sandbox] = set()
        self._cond: Optional[asyncio.Condition] = None
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._network: Optional[asyncio.Future] = None
        _register_cleanup(self)

    async def network_for(self, limits: Limits) -> Optional[str]:
        """The pool's own network, made on first use by a networked sandbox; None for the others."""
        if not limits.network:
            return None
        if self._network is None:
            self._network = asyncio.ensure_future(asyncio.to_thread(create_network, self.run_id, self.pool_id))
        return await asyncio.shield(self._network)

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def acquire(self, image: str, limits: Limits = Limits(), task: str = "pool") -> Sandbox:
        key = (image, limits)
        cond = self._condition()
        async with cond:
            while True:
                ready = self._ready.get(key)
                while ready:
                    sb = ready.popleft()
                    if not sb.dead:
                        self._in_use.add(sb)
                        self._refill(key)
                        return sb
                    self._live -= 1
                    self._spawn(asyncio.to_thread(sb.kill))
                if self._live < self.max_containers:
                    self._live += 1
                    break
                victim = self._pop_idle_other(key)  # make room: idle warm containers of other images
                if victim is not None:
                    self._live -= 1
                    self._spawn(asyncio.to_thread(victim.kill))
                    continue
                await cond.wait()
        try:
            sb = await asyncio.to_thread(create_sandbox, image, limits, self.run_id, task, self.pool_id,
                                         await self.network_for(limits))
        except BaseException:
            async with cond:
                self._live -= 1
                cond.notify_all()
            raise
        self._in_use.add(sb)
        self._refill(key)
        return sb

    def _pop_idle_other(self, key):
        for k, q in self._ready.items():
            if k != key and q:
                return q.popleft()
        return None

    async def release(self, sb: Sandbox):
        """Destroys the sandbox (never reused; removal goes on in the background) and lets the pool refill."""
        self._in_use.discard(sb)
        sb.dead = True
        self._spawn(self._destroy(sb))

    async def _destroy(self, sb: Sandbox):
        try:
            await asyncio.to_thread(sb.kill)
        finally:
            async with self._condition():
                self._live -= 1
                self._condition().notify_all()
            self._refill(sb.pool_key)

    @contextlib.asynccontextmanager
    async def sandbox(self, image: str, limits: Limits = Limits(), task: str = "pool"):
        sb = await self.acquire(image, limits, task)
        try:
            yield sb
        finally:
            await self.release(sb)

    def _refill(self, key):
        if self._closed or self.warm <= 0:
            return
        ready = self._ready.setdefault(key, deque())
        pending = getattr(self, "_refilling", {})
        self._refilling = pending
        missing = self.warm - len(ready) - pending.get(key, 0)
        for _ in range(max(0, missing)):
            if self._live >= self.max_containers:
                return
            self._live += 1
            pending[key] = pending.get(key, 0) + 1
            self._spawn(self._create_warm(key))

    async def _create_warm(self, key):
        image, limits = key
        sb = None
        try:
            sb = await asyncio.to_thread(create_sandbox, image, limits, self.run_id, "pool", self.pool_id,
                                         await self.network_for(limits))
        except Exception:
            pass  # a warm container is an optimisation: acquire() creates one cold if needed
        async with self._condition():
            self._refilling[key] -= 1
            if sb is None or self._closed:
                self._live -= 1
                if sb is not None:
                    self._spawn(asyncio.to_thread(sb.kill))
            else:
                self._ready.setdefault(key, deque()).append(sb)
            self._condition().notify_all()

    def _spawn(self, coro):
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self):
        """Destroys every container of this pool (warm and in use)."""
        self._closed = True
        while self._tasks:  # background removals and refills, including any they spawn meanwhile
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        victims = [sb for q in self._ready.values() for sb in q] + list(self._in_use)
        self._ready.clear()
        self._in_use.clear()
        await asyncio.gather(*(asyncio.to_thread(sb.kill) for sb in victims))
        await asyncio.to_thread(prune, pool=self.pool_id)  # containers, then this pool's network

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


# -- cleanup: no container outlives a run, also after Ctrl-C --------------------------------
_pools: "set[str]" = set()


def _register_cleanup(pool: SandboxPool):
    if not _pools:
        atexit.register(_cleanup_all)
        for sig in (signal.SIGTERM,):
            with contextlib.suppress(ValueError):  # only possible in the main thread
                previous = signal.getsignal(sig)

                def handler(signum, frame, previous=previous):
                    _cleanup_all()
                    if callable(previous):
                        previous(signum, frame)
                    raise SystemExit(128 + signum)
                signal.signal(sig, handler)
    _pools.add(pool.pool_id)


def _cleanup_all():
    for pool_id in list(_pools):
        with contextlib.suppress(Exception):
            prune(pool=pool_id)
    _pools.clear()


def prune(run_id: Optional[str] = None, orphans_only: bool = False, pool: Optional[str] = None) -> int:
    """Removes harness containers: of one run, of one pool, all of them, or (orphans_only) those whose
    harness process is gone. Returns how many were removed. A container that vanishes meanwhile
    (removed by its own pool, say) is skipped: the low-level list does not inspect each one."""
    client = docker_client()
    labels = [f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN] + ([f"{LABEL_POOL}={pool}"] if pool else [])
    removed = 0
    for c in client.api.containers(all=True, filters={"label": labels}):
        if orphans_only:
            pid = (c.get("Labels") or {}).get(LABEL_PID, "")
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue  # only containers whose owning harness process is known and gone
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_container(c["Id"], force=True, v=True)
            removed += 1
    for net in client.api.networks(filters={"label": labels}):
        if orphans_only:
            pid = (net.get("Labels") or {}).get(LABEL_PID, "")
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
        remove_network(net)
    for img in client.api.images(filters={"label": labels}):  # snapshot-mode commits (agent/sandbox/native.py)
        if orphans_only:
            pid = ((img.get("Labels") or {}).get(LABEL_PID, ""))
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_image(img["Id"], force=True)
    with contextlib.suppress(docker.errors.APIError):
        client.volumes.prune(filters={"label": LABEL_RUN})
    return removed


# -- networks: a networked task's sandboxes reach the internet, not each other and not the host ------

def create_network(run_id: str, pool_id: str) -> str:
    """A bridge network of one pool: containers on it cannot talk to each other (icc off), networks of
    other pools and runs are separate (Docker isolates bridges), and, where this process may change the
    firewall (root with iptables), packets from it to any address of the host are dropped, so services
    listening on the host's bridge or other addresses are out of reach. Egress to other hosts goes out as
    usual (that is what allow_internet asks for); Docker's DNS resolver answers inside each container."""
    client = docker_client()
    name = f"harness-{pool_id}"
    bridge = f"hx{pool_id[:12]}"  # interface names have at most 15 characters
    client.api.create_network(name, driver="bridge", labels={LABEL_RUN: run_id, LABEL_POOL: pool_id,
                                                               LABEL_PID: str(os.getpid())},
                              options={"com.docker.network.bridge.enable_icc": "false",
                                       "com.docker.network.bridge.name": bridge})
    if not _firewall("-I", bridge):
        global _warned_firewall
        if not _warned_firewall:
            _warned_firewall = True
            print("harness: warning: cannot add a firewall rule (needs root and iptables): networked sandboxes "
                  "can reach services listening on this host's addresses", file=sys.stderr)
    return name


_warned_firewall = False


def _firewall(action: str, bridge: str) -> bool:
    """Adds (-I) or deletes (-D) the rule dropping packets from the bridge to the host itself."""
    import shutil
    import subprocess
    if os.geteuid() != 0 or not shutil.which("iptables"):
        return False
    try:
        return subprocess.run(["iptables", "-w", "5", action, "INPUT", "-i", bridge, "-j", "DROP"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def remove_network(net: dict):
    bridge = (net.get("Options") or {}).get("com.docker.network.bridge.name", "")
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        docker_client().api.remove_network(net["Id"])
    if bridge.startswith("hx"):
        while _firewall("-D", bridge):  # every copy, should one have been added twice
            pass


def content_hash(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:12]
