"""One sandbox: a hardened, single-use Docker container whose main process is the command server.

Limits says how hard and how big; create_sandbox() makes, attaches and starts the container with them;
Sandbox is the API on it (exec, files, change capture, how it died, kill). Commands travel over the
attached stdin/stdout (transport.py); change capture is changes.py's."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import secrets
import tarfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional

import docker.errors
import requests
from docker.types import Ulimit

from agent.sandbox.changes import ChangeCapture, shown, unwritable
from agent.sandbox.client import docker_client, docker_retry
from agent.sandbox.images import AGENT_UID, PATH, WORKSPACE
from agent.sandbox.labels import owner_labels
from agent.sandbox.transport import SERVER_SOURCE, CommandChannel, SandboxDied
from results.errors import InfraError, UserError

if TYPE_CHECKING:
    from agent.sandbox.native import NativeSpec


class FilesNotWritten(Exception):
    """`tar -x` inside a live sandbox refused the files: the doing of their names or contents (the task's, or
    the agent's when its changes are written back for grading), never of the engine, so no InfraError."""


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
    native: Optional["NativeSpec"] = (
        None  # agent/sandbox/native.py: static helper, any image, Harbor's contract
    )

    @classmethod
    def for_task(cls, env) -> "Limits":
        """From a task's [environment] table (tasks.model.Environment)."""
        # A task written on a bigger machine still runs here: Docker refuses more CPUs than the host has.
        return cls(
            memory_mb=env.memory_mb,
            cpus=min(env.cpus, float(os.cpu_count() or 1)),
            pids=env.pids,
            workspace_mb=env.storage_mb,
            network=env.allow_internet,
        )


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


def hardened(limits: Limits, run_id: str, task: str, pool_id: str, network: Optional[str]) -> dict[str, Any]:
    """The container settings every sandbox shares (ours and native.py's): root only for the command
    server, no new privileges, the task's resource limits, no network unless the task asks, harness labels,
    open files / largest file / no core dumps, and no logs on the host's disk."""
    kwargs: dict[str, Any] = dict(
        detach=True,
        stdin_open=True,
        tty=False,
        init=True,
        user="0:0",
        name=f"harness-{run_id[:12]}-{secrets.token_hex(4)}",
        labels=owner_labels(run_id, pool_id, task),
        network_mode=(network or "bridge") if limits.network else "none",
        mem_limit=f"{limits.memory_mb}m",
        memswap_limit=f"{limits.memory_mb}m",
        nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids,
        security_opt=["no-new-privileges"],
        ulimits=[
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="fsize", soft=limits.fsize_mb << 20, hard=limits.fsize_mb << 20),
            Ulimit(name="core", soft=0, hard=0),
        ],
        log_config={"type": "none"},  # replies travel over attach; keep nothing on the host's disk
    )
    if limits.runtime:
        kwargs["runtime"] = limits.runtime
    return kwargs


class Sandbox(CommandChannel, ChangeCapture):
    """One started container with its command server attached. Use through SandboxPool."""

    workdir = WORKSPACE  # the agent's working folder (a NativeSandbox may have another)

    def __init__(self, container, image: str, limits: Limits, pool_key: tuple):
        self.container = container
        self.id = container.id
        self.image = image
        self.limits = limits
        self.pool_key = pool_key
        self._baseline: Optional[dict] = None
        self._initial_files: dict[str, bytes] = {}  # what put_files wrote into /workspace (for diff)
        self._open_channel(
            container.client.api.attach_socket(
                container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        )

    async def exec_raw(
        self,
        cmd: str | list[str],
        *,
        timeout: float = 60.0,
        cap: int = 64 * 1024,
        user: str | int = "agent",
        cwd: str = WORKSPACE,
        env: Optional[dict] = None,
        stdin: Optional[bytes] = None,
        env_add: Optional[dict] = None,
    ) -> dict:
        """Runs a command; returns the server's reply with stdout/stderr head and tail as bytes. `env`
        replaces the environment; `env_add` (the static helper only) sets variables on top of it."""
        req: dict = {"timeout": timeout, "cap": cap, "user": user, "cwd": cwd}
        req["argv" if isinstance(cmd, list) else "cmd"] = cmd
        if env is not None:
            req["env"] = env
        if env_add:
            req["env_add"] = env_add
        if stdin is not None:
            req["stdin"] = base64.b64encode(stdin).decode()
        reply = await self._request(req, host_timeout=timeout + 15 + len(req.get("stdin", "")) / 5e6)
        if "error" in reply:
            raise SandboxDied(f"sandbox {self.id[:12]}: {reply['error']}")
        for k in ("out_head", "out_tail", "err_head", "err_tail"):
            reply[k] = base64.b64decode(reply[k])
        return reply

    async def exec(
        self,
        cmd: str | list[str],
        timeout: float = 60.0,
        *,
        cap: int = 64 * 1024,
        user: str | int = "agent",
        cwd: str = WORKSPACE,
        env: Optional[dict] = None,
        stdin: Optional[bytes] = None,
    ) -> ExecResult:
        """Runs `cmd` (shell text, or an argv list) in a fresh process as the sandbox user.
        On timeout the command's whole process tree is killed; the sandbox stays usable.
        Output beyond `cap` bytes per stream keeps its head and tail."""
        r = await self.exec_raw(cmd, timeout=timeout, cap=cap, user=user, cwd=cwd, env=env, stdin=stdin)
        return ExecResult(
            exit_code=r["exit_code"],
            stdout=_join(r["out_head"], r["out_dropped"], r["out_tail"]),
            stderr=_join(r["err_head"], r["err_dropped"], r["err_tail"]),
            duration=r["duration"],
            timed_out=r["timed_out"],
            oom=r["oom"],
            dropped_bytes=r["out_dropped"] + r["err_dropped"],
        )

    async def put_files(
        self,
        files: dict[str, bytes],
        dest: str = WORKSPACE,
        user: str | int = "agent",
        executable: Iterable[str] = (),
    ) -> list[str]:
        """Writes files by streaming a tar into `tar -x` inside (put_archive cannot reach a tmpfs).
        Modes are 0644, or 0755 for the paths named in `executable`. A name no filesystem can hold
        (changes.unwritable: too long, too deep, not a plain relative path) is left out: the reasons are
        returned. Raises FilesNotWritten when tar refuses the rest, SandboxDied when the sandbox is gone."""
        refused: list[str] = []
        for name in list(files):
            why = unwritable(name.lstrip("/"), dest)
            if why:
                refused.append(f"{shown(name)} ({why})")
        if refused:
            files = {n: d for n, d in files.items() if not unwritable(n.lstrip("/"), dest)}
        if not files:
            return refused
        if dest == WORKSPACE:
            self._initial_files.update(files)
        executable = set(executable)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name.lstrip("/"))
                info.size = len(data)
                info.mode = 0o755 if name in executable else 0o644
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(data))
        r = await self.exec_raw(
            ["sh", "-c", 'mkdir -p "$1" && exec tar -x --no-same-owner -m -C "$1"', "_", dest],
            stdin=buf.getvalue(),
            timeout=120,
            user=user,
            cwd="/",
        )
        if r["exit_code"] != 0:
            raise FilesNotWritten(
                f"writing files into {dest} failed: {r['err_head'].decode(errors='replace')[:300]!r}"
            )
        return refused

    async def get_files(
        self, paths: list[str], root: str = WORKSPACE, max_bytes: int = 16 << 20
    ) -> dict[str, bytes]:
        """Reads regular files (relative to root) out as a tar stream; extracted in memory with
        tarfile's 'data' filter (no links, no absolute paths). Raises InfraError above max_bytes."""
        if not paths:
            return {}
        r = await self.exec_raw(
            ["tar", "-c", "-C", root, "--", *paths], timeout=120, cap=max_bytes * 2, user="root", cwd="/"
        )
        if r["out_dropped"]:
            raise InfraError(f"files under {root} exceed {max_bytes} bytes")
        out: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(r["out_head"] + r["out_tail"]), mode="r:") as tar:
            for member in tar:
                member = tarfile.data_filter(member, "/nonexistent")  # rejects links out, abs paths
                if member.isfile():
                    out[member.name] = tar.extractfile(member).read()
        return out

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
        except Exception:
            return False

    def kill(self):
        """Kill and remove the container; safe to call twice."""
        self.dead = True
        with contextlib.suppress(Exception):
            self._sock.close()
        with contextlib.suppress(
            docker.errors.NotFound, docker.errors.APIError, requests.exceptions.RequestException
        ):
            self.container.remove(force=True)


def _join(head: bytes, dropped: int, tail: bytes) -> str:
    text = head.decode("utf-8", "replace")
    if dropped:
        text += f"\n[... {dropped} bytes of output cut here ...]\n"
    return text + tail.decode("utf-8", "replace")


def create_sandbox(
    image: str,
    limits: Limits,
    run_id: str,
    task: str = "pool",
    pool_id: str = "",
    network: Optional[str] = None,
) -> Sandbox:
    """Creates, attaches and starts one hardened container (blocking: call from a thread). A networked
    sandbox joins `network` (its pool's own, see SandboxPool.network_for); others have only lo."""
    if limits.native is not None:  # the static helper: any image, Harbor's runtime contract
        from agent.sandbox.native import create_native

        return create_native(image, limits, run_id, task, pool_id, network)
    client = docker_client()
    tmpfs = {
        WORKSPACE: f"size={limits.workspace_mb}m,uid={AGENT_UID},gid={AGENT_UID},mode=0755,exec",
        "/tmp": f"size={limits.tmp_mb}m,mode=1777,exec",
        # root-owned and not writable by the sandbox user: hidden tests go here when grading
        "/grader": "size=64m,uid=0,gid=0,mode=0700,exec",
    }
    kwargs = hardened(limits, run_id, task, pool_id, network)
    kwargs.update(
        command=["python3", "-u", "-I", "-c", "import os; exec(os.environ.pop('HARNESS_SERVER'))"],
        working_dir=WORKSPACE,
        # For the server and the harness's own root commands (capture, the grader's test runner) only: a
        # command of the sandbox user gets none (a uid change drops them; no-new-privileges keeps them off).
        cap_drop=["ALL"],
        cap_add=["SETUID", "SETGID", "KILL", "DAC_OVERRIDE"],
        read_only=limits.read_only,
        tmpfs=tmpfs,
        environment={
            "HARNESS_SERVER": SERVER_SOURCE,
            "HARNESS_UID": str(AGENT_UID),
            "HOME": "/tmp",
            "PATH": PATH,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    )
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
