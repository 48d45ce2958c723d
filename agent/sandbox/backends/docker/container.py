"""The Docker backend's container: the settings that harden every sandbox container (hardened(), from a
SandboxSpec), and the Host a ServedSandbox runs on (DockerContainer: attach, OOM, removal; served_container).

sandbox.py makes our own command server's containers with them, native.py the static helper's."""

from __future__ import annotations

import contextlib
import secrets
from typing import Any, Optional

import docker.errors
import requests
from docker.types import Ulimit

from agent.sandbox.contract import SandboxSpec
from agent.sandbox.labels import owner_labels
from agent.sandbox.served import ServedSandbox


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
