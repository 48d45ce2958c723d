"""The sandbox contract, backend-neutral: what every backend's sandbox (Sandbox) and pool (SandboxPool)
provide, what a sandbox is asked to be (SandboxSpec, NativeSpec), what every sandbox image provides
(AGENT_UID, WORKSPACE, PATH), and the typed results of its commands and captures (ExecResult, Stream,
Changes).

Every user above the sandbox layer (the loop, run_attempt, the graders, `harness run`) goes through these
members only; tests/agent/sandbox/test_sandbox_contract.py runs the same behaviours against every backend
registered in agent/sandbox/registry.py and against the in-memory fake (tests/helpers.py FakeSandbox), and
checks that the attributes those users touch on a sandbox are listed here. This module imports nothing of
the sandbox package and nothing heavy: the loop, the fake and every backend import it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Mapping, Optional, Protocol, runtime_checkable

from agent import AGENT_UID  # re-exported: the sandbox user's uid, what every sandbox image provides

# What every sandbox image provides, and every backend's sandboxes rely on:
WORKSPACE = "/workspace"  # the agent's working folder, owned by AGENT_UID (agent/__init__.py)
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OUTPUT_CAP = 64 * 1024  # bytes kept per stream of one command by default (head and tail)


@dataclass(frozen=True)
class NativeSpec:
    """How a sandbox that runs the static helper (agent/sandbox/helper.c) is set up: Harbor's runtime
    contract, any image (hashable: part of the pool key). Made by a backend with the "harbor" capability."""

    workdir: Optional[str] = None  # None -> the image's WORKDIR ("/" when it has none)
    user: Optional[str] = None  # the agent's user; None -> the image's USER, root when it has none
    env: tuple[tuple[str, str], ...] = ()  # set on top of the image's ENV
    writable_root: bool = True
    default_caps: bool = True  # Docker's default capability set (Harbor tasks run as root and need it)
    # What a command leaves running survives it (Harbor's agent works in one persistent shell session);
    # only timeouts and kill_all() end processes, and the container's removal everything.
    keep_processes: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    """What a sandbox is made with: its hardening and resource limits (every field can be overridden per
    task), and for a Harbor image the static helper's spec."""

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
    native: Optional[NativeSpec] = None  # the static helper, any image, Harbor's contract

    @classmethod
    def for_task(cls, env) -> "SandboxSpec":
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
class Changes:
    """What an attempt changed in /workspace, captured with caps and path checks (changes.py)."""

    files: dict[str, bytes] = field(default_factory=dict)  # added or modified regular files
    executable: set[str] = field(default_factory=set)  # which of those have the executable bit
    deleted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # reasons (symlinks, caps exceeded, ...)
    # symlinks made or changed, path -> target text (never followed): only when asked (Harbor tasks, whose
    # verifier keeps them); otherwise each is a "symlink PATH" in rejected
    links: dict[str, str] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return sorted(set(self.files) | set(self.deleted))


@dataclass(frozen=True)
class Stream:
    """One output stream of a command, capped inside the sandbox: its first and last bytes, and how many
    bytes were cut between them."""

    head: bytes = b""
    tail: bytes = b""
    dropped: int = 0

    @property
    def data(self) -> bytes:
        """What was kept, head then tail (for machine-read output: check `dropped` first)."""
        return self.head + self.tail

    @property
    def text(self) -> str:
        """For people and models: decoded, with a marker where bytes were cut."""
        text = self.head.decode("utf-8", "replace")
        if self.dropped:
            text += f"\n[... {self.dropped} bytes of output cut here ...]\n"
        return text + self.tail.decode("utf-8", "replace")


@dataclass
class ExecResult:
    """What one command did. `stdout`/`stderr` are the text forms of `out`/`err` (the loop's observation);
    a result made from text alone (the fake, tests) gets streams holding that text."""

    exit_code: int
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    oom: bool = False
    dropped_bytes: int = 0  # bytes cut from the middle of stdout+stderr
    out: Stream = field(default=None)  # type: ignore[assignment]  # None -> made from stdout
    err: Stream = field(default=None)  # type: ignore[assignment]
    spawn_error: bool = False  # the command could not start (no such program, unreadable folder): 126/127

    def __post_init__(self):
        if self.out is None:
            self.out = Stream(self.stdout.encode("utf-8", "surrogateescape"))
        if self.err is None:
            self.err = Stream(self.stderr.encode("utf-8", "surrogateescape"))

    @classmethod
    def from_streams(cls, exit_code: int, out: Stream, err: Stream, duration: float, **kw) -> "ExecResult":
        return cls(
            exit_code=exit_code,
            stdout=out.text,
            stderr=err.text,
            duration=duration,
            dropped_bytes=out.dropped + err.dropped,
            out=out,
            err=err,
            **kw,
        )

    @property
    def output(self) -> str:
        """stdout and stderr together, as an observation for a model."""
        if self.stdout and self.stderr:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr


@runtime_checkable
class Sandbox(Protocol):
    """One single-use sandbox. A dead sandbox (killed, out of memory, its server gone) raises
    agent.sandbox.SandboxDied (transport.py) from every call that needs it; death_cause() then tells whose
    doing it was."""

    id: str
    workdir: str  # the agent's working folder: /workspace, or a Harbor image's WORKDIR
    dead: bool  # True once it died or was killed: nothing more runs in it
    warm_start: Optional[bool]  # handed out ready by its pool (True), made for the call (False), or unknown

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
        """Runs shell text (or an argv list) in a fresh process: as the agent's user ("agent"), "root" or a
        uid (never 0); in `cwd` (default: workdir); with `env` (the backend's rule: the environment, or set on
        top of the image's); `stdin` fed to it. Past `timeout` its whole process tree is killed (timed_out,
        the sandbox stays usable); past `cap` bytes a stream keeps its head and tail. `fork` (a root
        `python3 -I -c/-m` argv only) is a hint: the process may be a fork of the command server, which
        imported these modules once (the same program without an interpreter's start); ignored elsewhere."""
        ...

    async def put_files(
        self, files: dict[str, bytes], dest: str = "/workspace", user: str | int = "agent", executable=()
    ) -> list[str]:
        """Writes files (relative names) below `dest` (/workspace means workdir), owned by `user`, 0644 or
        0755 for the names in `executable`. Returns why names no filesystem can hold were left out."""
        ...

    async def get_files(
        self, paths: list[str], root: str = "/workspace", max_bytes: int = 16 << 20
    ) -> dict[str, bytes]:
        """Reads regular files (relative to root; /workspace means workdir); missing ones and links are left
        out. Raises InfraError above max_bytes in all."""
        ...

    async def mark_baseline(self, max_files: int = 5000) -> None:
        """Remembers the working folder as it is now; changes() compares against it."""
        ...

    async def changes(self, max_bytes: int = 10 << 20, max_files: int = 2000, links: bool = False) -> Changes:
        """What changed in the working folder since mark_baseline(), bounded; never raises for anything the
        agent can make there (rejected entries say what was left out); symlinks as Changes.links with
        `links`, else rejected."""
        ...

    def death_cause(self, wait: float = 5.0) -> Optional[str]:
        """After SandboxDied: "oom" when what ran inside used the memory limit up; "helper" where what ran
        inside can kill or stop the command server (a root agent: NativeSandbox) and the engine still has
        the container; else None (killed from outside, the engine failed, or not provable: an
        infrastructure error). Blocking."""
        ...

    def kill(self) -> None:
        """Ends the sandbox and removes what it was made of; safe to call twice. Blocking."""
        ...


@runtime_checkable
class SandboxPool(Protocol):
    """Hands out fresh sandboxes of an image; each is used once and destroyed on release."""

    run_id: str

    def sandbox(
        self, image: str, limits: SandboxSpec = ..., task: str = "pool"
    ) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        """`async with pool.sandbox(image, limits, task=...) as sb:` a fresh sandbox, destroyed after."""
        ...

    async def acquire(self, image: str, limits: SandboxSpec = ..., task: str = "pool") -> Sandbox: ...

    async def release(self, sb: Sandbox) -> None: ...

    def expect(self, acquires: int, per_image: Optional[Mapping[str, int]] = None) -> None:
        """How many more acquires will come, in all and (where given) of each image: a pool may then keep
        fewer sandboxes warm."""
        ...

    async def close(self) -> None:
        """Destroys every sandbox (and network, claim, ...) this pool made."""
        ...


@contextlib.asynccontextmanager
async def pooled(pool, image: str, limits, task: str):
    """A pool's sandbox(): acquire() on entry, release() on exit (every backend's pool returns this)."""
    sb = await pool.acquire(image, limits, task)
    try:
        yield sb
    finally:
        await pool.release(sb)


def sandbox_members() -> set[str]:
    """The public members of the Sandbox contract (for the test that the users touch no other)."""
    return {n for n in vars(Sandbox) if not n.startswith("_")} | set(Sandbox.__annotations__)


__all__ = [
    "AGENT_UID",
    "OUTPUT_CAP",
    "PATH",
    "WORKSPACE",
    "Changes",
    "ExecResult",
    "NativeSpec",
    "Sandbox",
    "SandboxPool",
    "SandboxSpec",
    "Stream",
    "pooled",
    "sandbox_members",
]
