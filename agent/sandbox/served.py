"""The one implementation of the Sandbox contract (agent/sandbox/contract.py): a command server (server.py,
or the static helper of backends/docker/native.py) reached over a CommandChannel, inside something a
backend made.

What differs between backends is only where the server runs, so that is the one part a backend provides,
as a Host: a Docker container (backends/docker/container.py DockerContainer), a Kubernetes pod
(backends/k8s/sandbox.py K8sPod), or another backend's (its folder under backends/). Everything
above the channel (commands, files, change capture, how it died, kill) is this class's own code for every
backend; the static helper's extra file operations are backends/docker/native.py's NativeSandbox.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
import time
from typing import Iterable, Optional, Protocol

from agent.sandbox.changes import (
    CAPTURE_SOURCE,
    MAX_LISTED,
    CaptureError,
    ChangeCapture,
    shown,
    unwritable,
)
from agent.sandbox.contract import OUTPUT_CAP, WORKSPACE, Changes, ExecResult, Stream
from agent.sandbox.transport import CommandChannel, SandboxDied
from results.errors import InfraError


class FilesNotWritten(Exception):
    """`tar -x` inside a live sandbox refused the files: the doing of their names or contents (the task's, or
    the agent's when its changes are written back for grading), never of the engine, so no InfraError."""


class Host(Protocol):
    """Where a sandbox's command server runs: what a backend provides (blocking calls: from a thread)."""

    multiplexed: bool  # the server's stream is Docker's attach stream (True) or a plain socket (False)

    def died_of_oom(self, wait: float) -> bool:
        """After the server's stream ended: did the memory limit run out (the agent's own doing)? False when
        it was killed from outside, the backend failed, or it cannot be told."""
        ...

    def remove(self) -> None:
        """Destroys what the sandbox is made of (container, claim, exec stream); safe to call twice."""
        ...


class ServedSandbox:
    """One started sandbox with its command server on `sock_obj`. Made by a backend (its pool) and used
    through that pool."""

    # The command's `env` replaces the environment (our server), or is set on top of the container's
    # (the static helper, as `docker exec -e` does).
    env_replaces = True
    forks = True  # its command server runs a `fork` request as a fork of itself (see exec's `fork`)
    workdir: str = WORKSPACE  # the agent's working folder (a NativeSandbox's is its image's WORKDIR)

    def __init__(
        self,
        sock_obj,
        host: Host,
        *,
        name: str,
        image: str,
        limits,
        workdir: str = WORKSPACE,
    ):
        self.id = name
        self.host = host
        self.image = image
        self.limits = limits
        self.pool_key = (image, limits)
        self.workdir = workdir
        self.warm_start: Optional[bool] = None  # set by a warm pool (the run's warm-hit metric)
        self.capture = ChangeCapture(self._capture, workdir)
        self.channel = CommandChannel(sock_obj, name, host.multiplexed, on_unresponsive=self.kill)

    # -- state ---------------------------------------------------------------------------------------
    @property
    def dead(self) -> bool:
        return self.channel.dead

    @dead.setter
    def dead(self, value: bool):
        if value:  # a pool marks a released sandbox dead before it is removed in the background
            self.channel.mark_dead("released")

    @property
    def container(self):
        """The Docker container (for the Docker-only callers: commit, diff, inspect); None on other hosts."""
        return getattr(self.host, "container", None)

    def wait_ready(self, timeout: float = 30.0):
        self.channel.wait_ready(timeout)

    # -- commands --------------------------------------------------------------------------------------
    async def exec(
        self,
        cmd: str | list[str],
        timeout: float = 60.0,
        *,
        user: str | int = "agent",
        cwd: Optional[str] = None,
        env: Optional[dict] = None,
        stdin: Optional[bytes] = None,
        cap: int = OUTPUT_CAP,
        fork: Optional[tuple[str, ...]] = None,
    ) -> ExecResult:
        """Runs `cmd` (shell text, or an argv list) in a fresh process. On timeout the command's whole
        process tree is killed; the sandbox stays usable. Output beyond `cap` bytes per stream keeps its head
        and tail. /workspace as cwd means workdir. `fork`: see the Sandbox contract (server.py forks; the
        static helper runs the argv)."""
        req: dict = {
            "timeout": timeout,
            "cap": cap,
            "user": user,
            "cwd": self.workdir if cwd in (None, WORKSPACE) else cwd,
        }
        req["argv" if isinstance(cmd, list) else "cmd"] = cmd
        if env is not None:
            req["env" if self.env_replaces else "env_add"] = env
        if stdin is not None:
            req["stdin"] = base64.b64encode(stdin).decode()
        if fork is not None:
            req["fork"] = list(fork)
        reply = await self.channel.request(req, host_timeout=timeout + 15 + len(req.get("stdin", "")) / 5e6)
        if "error" in reply:
            raise SandboxDied(f"sandbox {self.id[:12]}: {reply['error']}")

        def stream(name: str) -> Stream:
            return Stream(
                base64.b64decode(reply[f"{name}_head"]),
                base64.b64decode(reply[f"{name}_tail"]),
                reply[f"{name}_dropped"],
            )

        return ExecResult.from_streams(
            reply["exit_code"],
            stream("out"),
            stream("err"),
            reply["duration"],
            timed_out=reply["timed_out"],
            oom=reply["oom"],
            spawn_error=bool(reply.get("spawn_error")),
        )

    # -- files -----------------------------------------------------------------------------------------
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
        dest = self.workdir if dest == WORKSPACE else dest
        refused: list[str] = []
        for name in list(files):
            why = unwritable(name.lstrip("/"), dest)
            if why:
                refused.append(f"{shown(name)} ({why})")
        if refused:
            files = {n: d for n, d in files.items() if not unwritable(n.lstrip("/"), dest)}
        if not files:
            return refused
        if dest == self.workdir:
            self.capture.initial_files.update(files)
        executable = set(executable)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name.lstrip("/"))
                info.size = len(data)
                info.mode = 0o755 if name in executable else 0o644
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(data))
        r = await self.exec(
            ["sh", "-c", 'mkdir -p "$1" && exec tar -x --no-same-owner -m -C "$1"', "_", dest],
            120,
            stdin=buf.getvalue(),
            user=user,
            cwd="/",
        )
        if r.exit_code != 0:
            raise FilesNotWritten(
                f"writing files into {dest} failed: {r.err.head.decode(errors='replace')[:300]!r}"
            )
        return refused

    async def get_files(
        self, paths: list[str], root: str = WORKSPACE, max_bytes: int = 16 << 20
    ) -> dict[str, bytes]:
        """Reads regular files (relative to root) out as a tar stream; extracted in memory with
        tarfile's 'data' filter (no links, no absolute paths). Raises InfraError above max_bytes."""
        if not paths:
            return {}
        root = self.workdir if root == WORKSPACE else root
        r = await self.exec(
            ["tar", "-c", "-C", root, "--", *paths], 120, cap=max_bytes * 2, user="root", cwd="/"
        )
        if r.out.dropped:
            raise InfraError(f"files under {root} exceed {max_bytes} bytes")
        out: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(r.out.data), mode="r:") as tar:
            for member in tar:
                member = tarfile.data_filter(member, "/nonexistent")  # rejects links out, abs paths
                if member.isfile():
                    out[member.name] = tar.extractfile(member).read()
        return out

    # -- change capture --------------------------------------------------------------------------------
    async def _capture(self, args: list[str], stdin: Optional[bytes] = None, cap: int = 64 << 20) -> dict:
        """Runs agent/sandbox/capture.py inside as root; its JSON answer, or CaptureError."""
        r = await self.exec(
            ["python3", "-I", "-c", CAPTURE_SOURCE, *args],
            120,
            cap=cap,
            user="root",
            cwd="/",
            stdin=stdin,
            fork=(),  # three times an attempt: no interpreter start each time
        )
        if r.out.dropped:
            raise CaptureError(f"the capture's answer is over {cap} bytes")
        try:
            out = json.loads(r.out.data)
        except ValueError:
            raise CaptureError(
                f"capture failed (exit {r.exit_code}): {r.err.tail.decode('utf-8', 'replace')[-300:]}"
            ) from None
        if not isinstance(out, dict):
            raise CaptureError("capture answered something other than an object")
        return out

    async def snapshot(self, max_files: int = MAX_LISTED) -> dict:
        """The working folder's listing now (ChangeCapture.snapshot), e.g. to compare two sandboxes."""
        return await self.capture.snapshot(max_files)

    async def mark_baseline(self, max_files: int = 5000) -> None:
        """Remembers the workspace as it is now; changes() compares against it (`run` on a large
        repository passes a larger max_files, here and to changes())."""
        await self.capture.mark_baseline(max_files)

    async def changes(self, max_bytes: int = 10 << 20, max_files: int = 2000, links: bool = False) -> Changes:
        """The agent's changes since mark_baseline() (changes.ChangeCapture.changes: bounded, never raises
        for anything the agent can make in its workspace; symlinks kept in Changes.links with `links`)."""
        return await self.capture.changes(max_bytes, max_files, links)

    async def diff(self) -> str:
        """A unified diff of the workspace against the baseline (text files), for people and `run`."""
        return await self.capture.diff()

    # -- the end -----------------------------------------------------------------------------------------
    def death_cause(self, wait: float = 5.0) -> Optional[str]:
        """After the sandbox died: "oom" when its memory limit was used up (the doing of what ran inside),
        else None (killed from outside, the engine failed, or not provable): an infrastructure error."""
        return "oom" if self.host.died_of_oom(wait) else None

    def kill(self) -> None:
        """Closes the channel and removes the sandbox; safe to call twice."""
        self.channel.close()
        self.host.remove()
