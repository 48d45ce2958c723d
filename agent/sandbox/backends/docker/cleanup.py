"""No container outlives a run, also after Ctrl-C or SIGTERM: prune() removes what the labels
(agent/sandbox/labels.py) say belongs to a run, a pool, or a harness process that is gone (every pool is
pruned at exit: agent/sandbox/warm.py); `harness sandbox prune` calls it through the backend."""

from __future__ import annotations

import contextlib
from typing import Optional

import docker.errors

from agent.sandbox.backends.docker.client import docker_client
from agent.sandbox.backends.docker.network import remove_network
from agent.sandbox.labels import LABEL_POOL, LABEL_RUN, orphaned


def prune(run_id: Optional[str] = None, orphans_only: bool = False, pool: Optional[str] = None) -> int:
    """Removes harness containers: of one run, of one pool, all of them, or (orphans_only) those whose
    harness process is gone. Returns how many were removed. A container that vanishes meanwhile
    (removed by its own pool, say) is skipped: the low-level list does not inspect each one."""
    client = docker_client()
    labels = [f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN] + ([f"{LABEL_POOL}={pool}"] if pool else [])
    removed = 0
    for c in client.api.containers(all=True, filters={"label": labels}):
        if orphans_only and not orphaned(c.get("Labels")):
            continue  # only containers whose owning harness process is known and gone
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_container(c["Id"], force=True, v=True)
            removed += 1
    for net in client.api.networks(filters={"label": labels}):
        if orphans_only and not orphaned(net.get("Labels")):
            continue
        remove_network(net)
    for img in client.api.images(filters={"label": labels}):  # snapshot-mode commits (native.py)
        if orphans_only and not orphaned(img.get("Labels")):
            continue
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_image(img["Id"], force=True)
    with contextlib.suppress(docker.errors.APIError):
        client.volumes.prune(filters={"label": LABEL_RUN})
    return removed
