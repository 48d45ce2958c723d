"""Per-pool networks: a networked task's sandboxes reach the internet, not each other and not the host."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys

import docker.errors

from agent.sandbox.client import docker_client
from agent.sandbox.labels import owner_labels

_warned_firewall = False


def create_network(run_id: str, pool_id: str) -> str:
    """A bridge network of one pool: containers on it cannot talk to each other (icc off), networks of
    other pools and runs are separate (Docker isolates bridges), and, where this process may change the
    firewall (root with iptables), packets from it to any address of the host are dropped, so services
    listening on the host's bridge or other addresses are out of reach. Egress to other hosts goes out as
    usual (that is what allow_internet asks for); Docker's DNS resolver answers inside each container."""
    client = docker_client()
    name = f"harness-{pool_id}"
    bridge = f"hx{pool_id[:12]}"  # interface names have at most 15 characters
    client.api.create_network(
        name,
        driver="bridge",
        labels=owner_labels(run_id, pool_id),
        options={"com.docker.network.bridge.enable_icc": "false", "com.docker.network.bridge.name": bridge},
    )
    if not _firewall("-I", bridge):
        global _warned_firewall
        if not _warned_firewall:
            _warned_firewall = True
            print(
                "harness: warning: cannot add a firewall rule (needs root and iptables): networked sandboxes "
                "can reach services listening on this host's addresses",
                file=sys.stderr,
            )
    return name


def _firewall(action: str, bridge: str) -> bool:
    """Adds (-I) or deletes (-D) the rule dropping packets from the bridge to the host itself."""
    if os.geteuid() != 0 or not shutil.which("iptables"):
        return False
    try:
        return (
            subprocess.run(
                ["iptables", "-w", "5", action, "INPUT", "-i", bridge, "-j", "DROP"],
                capture_output=True,
                timeout=30,
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


def remove_network(net: dict):
    """Removes a network (as the engine lists it) and its firewall rule."""
    bridge = (net.get("Options") or {}).get("com.docker.network.bridge.name", "")
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        docker_client().api.remove_network(net["Id"])
    if bridge.startswith("hx"):
        while _firewall("-D", bridge):  # every copy, should one have been added twice
            pass
