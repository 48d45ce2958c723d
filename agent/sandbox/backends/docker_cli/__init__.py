"""The docker CLI backend (`--sandbox docker-cli`): the same hardened, single-use containers as the Docker
backend, on this host's engine, made through the `docker` command (subprocesses, from the warm pool's
threads) instead of the Docker SDK; another Docker-compatible CLI can stand in (--docker-cli-binary).

Each sandbox is one `docker run --interactive` whose stdin and stdout are a socket pair: the command server
(agent/sandbox/server.py) answers on it as on the SDK's attach stream, so ServedSandbox does the rest.
Its capabilities: own_images (the tasks' images built on this engine), local, batch_grading (the warm pool
takes idle sandboxes back). Not harbor, diff or cluster: the static helper, docker diff/commit and the Ray
cluster's image shipping are the Docker SDK backend's.

One concept per module:
    cli.py        DockerCli: one docker subcommand, its failures as the harness's errors
    container.py  the `docker run` flags of a hardened sandbox, CliContainer (the Host), create_sandbox()
    pool.py       DockerCliPool: the warm pool (agent/sandbox/warm.py) of these containers
    cleanup.py    prune() by label, and the pool's own network (create_network)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from agent.sandbox.registry import Backend


@dataclass(frozen=True)
class DockerCliOptions:
    """`--sandbox docker-cli`'s settings, given as --docker-cli-NAME."""

    binary: str = field(
        default="docker",
        metadata={
            "help": "with --sandbox docker-cli: the Docker-compatible command that makes the sandboxes"
        },
    )
    runtime: Optional[str] = field(
        default=None,
        metadata={"help": "with --sandbox docker-cli: the OCI runtime of every sandbox, e.g. runsc (gVisor)"},
    )


def _pool(options: DockerCliOptions):
    import functools

    from agent.sandbox.backends.docker_cli.pool import DockerCliPool

    return functools.partial(DockerCliPool, binary=options.binary, runtime=options.runtime)


def _prune(options: DockerCliOptions, orphans_only: bool) -> str:
    from agent.sandbox.backends.docker_cli.cleanup import prune
    from agent.sandbox.backends.docker_cli.cli import DockerCli

    return f"removed {prune(DockerCli(options.binary), orphans_only=orphans_only)} containers"


BACKEND = Backend(
    "docker-cli",
    make_pool=_pool,
    options=DockerCliOptions,
    capabilities=frozenset({"own_images", "local", "batch_grading"}),
    clean=_prune,
)
