"""The host's firewall rule for a pool's own bridge network (Docker's, the docker CLI's): packets from the
bridge to any address of this host are dropped, so a networked sandbox cannot reach services listening on
the host. Needs root and iptables; without them the network is made anyway, with one warning a process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

_warned = False


def bridge_name(pool_id: str) -> str:
    """The bridge interface of a pool's network (interface names have at most 15 characters)."""
    return f"hx{pool_id[:12]}"


def guard(bridge: str) -> None:
    """Adds the rule for `bridge`; warns once when it cannot."""
    global _warned
    if not _rule("-I", bridge) and not _warned:
        _warned = True
        print(
            "harness: warning: cannot add a firewall rule (needs root and iptables): networked sandboxes "
            "can reach services listening on this host's addresses",
            file=sys.stderr,
        )


def unguard(bridge: str) -> None:
    """Removes every copy of the rule for `bridge` (a bridge of ours: named by bridge_name)."""
    if bridge.startswith("hx"):
        while _rule("-D", bridge):  # every copy, should one have been added twice
            pass


def _rule(action: str, bridge: str) -> bool:
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
