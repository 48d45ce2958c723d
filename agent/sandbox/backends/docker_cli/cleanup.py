"""What harness runs left on the engine, found by their labels (agent/sandbox/labels.py) through the docker
command: prune() removes the containers and networks of a run, a pool, all of them, or those of harness
processes that are gone; the pool's own network is made here too (create_network)."""

from __future__ import annotations

import contextlib
import json
from typing import Optional

from agent.sandbox.backends.docker_cli.cli import CliError, DockerCli
from agent.sandbox.firewall import bridge_name, guard, unguard
from agent.sandbox.labels import LABEL_POOL, LABEL_RUN, orphaned, owner_labels

BRIDGE_OPTION = "com.docker.network.bridge.name"


def create_network(cli: DockerCli, run_id: str, pool_id: str) -> str:
    """A bridge network of one pool, as the Docker backend makes it: no traffic between its containers (icc
    off), its own bridge, and where this process may change the firewall, nothing from it to this host."""
    name, bridge = f"harness-{pool_id}", bridge_name(pool_id)
    labels = [f"--label={k}={v}" for k, v in owner_labels(run_id, pool_id).items()]
    options = ["--opt", "com.docker.network.bridge.enable_icc=false", "--opt", f"{BRIDGE_OPTION}={bridge}"]
    cli.run("network", "create", "--driver", "bridge", *labels, *options, name)
    guard(bridge)
    return name


def _filters(run_id: Optional[str], pool: Optional[str]) -> list[str]:
    labels = [f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN] + ([f"{LABEL_POOL}={pool}"] if pool else [])
    return [arg for label in labels for arg in ("--filter", f"label={label}")]


def _inspect(cli: DockerCli, kind: str, ids: list[str]) -> list[dict]:
    """The engine's description of each object still there (one that vanished meanwhile is left out)."""
    found = []
    for i in ids:
        with contextlib.suppress(CliError):
            found += json.loads(cli.run(kind, "inspect", i))
    return found


def prune(
    cli: DockerCli, run_id: Optional[str] = None, orphans_only: bool = False, pool: Optional[str] = None
) -> int:
    """Removes harness containers (of one run, one pool, all, or those whose harness process is gone), then
    such networks and their firewall rules. Returns how many containers were removed."""
    ids = cli.run("ps", "--all", "--quiet", "--no-trunc", *_filters(run_id, pool)).split()
    removed = 0
    for c in _inspect(cli, "container", ids):
        if orphans_only and not orphaned(c["Config"].get("Labels")):
            continue  # only those whose owning harness process is known and gone
        with contextlib.suppress(CliError):
            cli.run("rm", "--force", "--volumes", c["Id"])
            removed += 1
    nets = cli.run("network", "ls", "--quiet", "--no-trunc", *_filters(run_id, pool)).split()
    for net in _inspect(cli, "network", nets):
        if orphans_only and not orphaned(net.get("Labels")):
            continue
        with contextlib.suppress(CliError):
            cli.run("network", "rm", net["Id"])
        unguard((net.get("Options") or {}).get(BRIDGE_OPTION, ""))
    return removed
