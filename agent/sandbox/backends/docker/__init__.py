"""The Docker backend (`--sandbox docker`, the default): hardened, single-use containers on this host's
Docker engine through the Docker SDK, kept warm by a pool; every capability of agent/sandbox/registry.py.

This package defines only what the registry reads (DockerOptions, BACKEND) and imports nothing heavy: the
Docker SDK is imported when a pool or a prune is first made. Importers of Docker things take them from
their module here.

One concept per module:
    client.py     the Docker client, and retries of the engine's transient errors
    container.py  the hardening of every container (hardened), the Docker Host (DockerContainer)
    sandbox.py    create_sandbox(): a container of our command server (or, for a NativeSpec, native.py's)
    native.py     sandboxes for any image: the static helper (helper.c), Harbor's contract, commit
    pool.py       DockerPool: the warm pool (agent/sandbox/warm.py) of these containers
    network.py    per-pool networks of networked tasks (and their firewall rule: agent/sandbox/firewall.py)
    cleanup.py    prune(): containers, networks and images of a run, a pool or a dead process
    images.py     the sandbox images (base, task, prebuilt, minbase, busybox), built on this engine
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from agent.sandbox.registry import Backend


@dataclass(frozen=True)
class DockerOptions:
    """`--sandbox docker`'s settings, given as --docker-NAME."""

    runtime: Optional[str] = field(
        default=None,
        metadata={"help": "with --sandbox docker: the OCI runtime of every sandbox, e.g. runsc (gVisor)"},
    )


def _pool(options: DockerOptions):
    import functools

    from agent.sandbox.backends.docker.pool import DockerPool

    return functools.partial(DockerPool, runtime=options.runtime) if options.runtime else DockerPool


def _prune(options: DockerOptions, orphans_only: bool) -> str:
    from agent.sandbox.backends.docker.cleanup import prune

    return f"removed {prune(orphans_only=orphans_only)} containers"


BACKEND = Backend(
    "docker",
    make_pool=_pool,
    options=DockerOptions,
    capabilities=frozenset({"own_images", "local", "batch_grading", "harbor", "diff", "cluster"}),
    clean=_prune,
)
