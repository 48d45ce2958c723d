"""DockerPool, the Docker backend's SandboxPool: the warm pool (agent/sandbox/warm.py) of hardened containers
made through the Docker SDK (sandbox.py create_sandbox), on per-pool networks (network.py), pruned by their
labels (cleanup.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from agent.sandbox.backends.docker.cleanup import prune
from agent.sandbox.backends.docker.network import create_network
from agent.sandbox.backends.docker.sandbox import create_sandbox
from agent.sandbox.contract import SandboxSpec
from agent.sandbox.served import ServedSandbox
from agent.sandbox.warm import WarmPool


class DockerPool(WarmPool):
    """The Docker backend's pool: warm containers per (image, limits), bounded, single use (WarmPool).
    `runtime` (--docker-runtime, e.g. runsc) runs every sandbox whose limits name none under it."""

    def __init__(
        self,
        run_id: Optional[str] = None,
        warm: int = 2,
        max_containers: int = 8,
        runtime: Optional[str] = None,
    ):
        super().__init__(run_id, warm, max_containers)
        self.runtime = runtime

    def create(self, image: str, limits: SandboxSpec, task: str, network: Optional[str]) -> ServedSandbox:
        key = (image, limits)  # what acquire() asked for: the pool refills that key when it is released
        if self.runtime and not limits.runtime:
            limits = replace(limits, runtime=self.runtime)
        sb = create_sandbox(image, limits, self.run_id, task, self.pool_id, network)
        sb.pool_key = key
        return sb

    def create_network(self) -> str:
        return create_network(self.run_id, self.pool_id)

    def prune_pool(self) -> None:
        prune(pool=self.pool_id)
