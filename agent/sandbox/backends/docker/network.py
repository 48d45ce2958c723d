"""Per-pool networks: a networked task's sandboxes reach the internet, not each other and not the host."""

from __future__ import annotations

import contextlib

import docker.errors

from agent.sandbox.backends.docker.client import docker_client
from agent.sandbox.firewall import bridge_name, guard, unguard
from agent.sandbox.labels import owner_labels


def create_network(run_id: str, pool_id: str) -> str:
    """A bridge network of one pool: containers on it cannot talk to each other (icc off), networks of
    other pools and runs are separate (Docker isolates bridges), and, where this process may change the
    firewall (root with iptables), packets from it to any address of the host are dropped, so services
    listening on the host's bridge or other addresses are out of reach (agent/sandbox/firewall.py). Egress
    to other hosts goes out as usual (that is what allow_internet asks for); Docker's DNS resolver answers
    inside each container."""
    client = docker_client()
    name = f"harness-{pool_id}"
    bridge = bridge_name(pool_id)
    client.api.create_network(
        name,
        driver="bridge",
        labels=owner_labels(run_id, pool_id),
        options={"com.docker.network.bridge.enable_icc": "false", "com.docker.network.bridge.name": bridge},
    )
    guard(bridge)
    return name


def remove_network(net: dict):
    """Removes a network (as the engine lists it) and its firewall rule."""
    bridge = (net.get("Options") or {}).get("com.docker.network.bridge.name", "")
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        docker_client().api.remove_network(net["Id"])
    unguard(bridge)
