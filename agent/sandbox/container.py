"""The Docker backend's sandbox: a hardened, single-use container whose main process is the command server.

SandboxSpec says how hard and how big; create_sandbox() makes, attaches and starts the container with them and
returns a ServedSandbox (served.py: the one Sandbox implementation) on a DockerContainer host. Commands
travel over the attached stdin/stdout (transport.py)."""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import docker.errors
import requests
from docker.types import Ulimit

from agent.sandbox.client import docker_client, docker_retry
from agent.sandbox.images import AGENT_UID, PATH, WORKSPACE
from agent.sandbox.labels import owner_labels
from agent.sandbox.served import ServedSandbox
from agent.sandbox.transport import SERVER_SOURCE
from results.errors import UserError

if TYPE_CHECKING:
    from agent.sandbox.native import NativeSpec


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
    native: Optional["NativeSpec"] = (
        None  # agent/sandbox/native.py: static helper, any image, Harbor's contract
    )

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


def hardened(
    limits: SandboxSpec, run_id: str, task: str, pool_id: str, network: Optional[str]
) -> dict[str, Any]:
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


class DockerContainer:
    """The Docker backend's Host (served.py): the container the command server runs in, reached over
    Docker's attach stream."""

    multiplexed = True

    def __init__(self, container):
        self.container = container

    def attach(self):
        return self.container.client.api.attach_socket(
            self.container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )

    def died_of_oom(self, wait: float = 5.0) -> bool:
        """Did the container's memory cgroup run out? That is the agent's own doing (its processes, or its
        files in a tmpfs, used the memory limit up). False when it was killed from outside, the engine
        failed, or the cause cannot be told: those stay infrastructure errors."""
        try:
            self.container.wait(timeout=wait)
            self.container.reload()
            return bool(self.container.attrs["State"].get("OOMKilled"))
        except Exception:
            return False

    def remove(self):
        with contextlib.suppress(
            docker.errors.NotFound, docker.errors.APIError, requests.exceptions.RequestException
        ):
            self.container.remove(force=True)


def served_container(container, image: str, limits: SandboxSpec, cls=ServedSandbox, **kw) -> ServedSandbox:
    """A sandbox on a created (not yet started) container: attached before it starts, so that the server's
    first words are not lost."""
    host = DockerContainer(container)
    return cls(host.attach(), host, name=container.id, image=image, limits=limits, **kw)


def create_sandbox(
    image: str,
    limits: SandboxSpec,
    run_id: str,
    task: str = "pool",
    pool_id: str = "",
    network: Optional[str] = None,
) -> ServedSandbox:
    """Creates, attaches and starts one hardened container (blocking: call from a thread). A networked
    sandbox joins `network` (its pool's own, see DockerPool.network_for); others have only lo."""
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
        sb = served_container(container, image, limits)
        docker_retry(container.start)()
        sb.wait_ready()
        return sb
    except BaseException:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        raise
