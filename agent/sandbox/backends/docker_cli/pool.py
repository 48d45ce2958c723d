"""DockerCliPool, the docker CLI backend's SandboxPool: the warm pool (agent/sandbox/warm.py) of containers
that `docker run` makes (container.py), on per-pool networks and pruned by label (cleanup.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from agent.sandbox.backends.docker_cli.cleanup import create_network, prune
from agent.sandbox.backends.docker_cli.cli import DockerCli
from agent.sandbox.backends.docker_cli.container import create_sandbox
from agent.sandbox.contract import SandboxSpec
from agent.sandbox.served import ServedSandbox
from agent.sandbox.warm import WarmPool


class DockerCliPool(WarmPool):
    """Warm containers per (image, limits), bounded, single use, made by the `binary` CLI; `runtime` (e.g.
    runsc) runs every sandbox whose limits name none under it."""

    def __init__(
        self,
        run_id: Optional[str] = None,
        warm: int = 2,
        max_containers: int = 8,
        binary: str = "docker",
        runtime: Optional[str] = None,
    ):
        self.cli = DockerCli(binary)
        self.cli.path()  # a missing CLI fails here, before any sandbox is asked for
        super().__init__(run_id, warm, max_containers)
        self.runtime = runtime

    def create(self, image: str, limits: SandboxSpec, task: str, network: Optional[str]) -> ServedSandbox:
        key = (image, limits)  # what acquire() asked for: the pool refills that key when it is released
        if self.runtime and not limits.runtime:
            limits = replace(limits, runtime=self.runtime)
        sb = create_sandbox(self.cli, image, limits, self.run_id, task, self.pool_id, network)
        sb.pool_key = key
        return sb

    def create_network(self) -> str:
        return create_network(self.cli, self.run_id, self.pool_id)

    def prune_pool(self) -> None:
        prune(self.cli, pool=self.pool_id)
