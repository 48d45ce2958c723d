"""No container outlives a run, also after Ctrl-C or SIGTERM: prune() removes what the labels (labels.py)
say belongs to a run, a pool, or a harness process that is gone; every SandboxPool is pruned at exit."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
from typing import Optional

import docker.errors

from agent.sandbox.client import docker_client
from agent.sandbox.labels import LABEL_PID, LABEL_POOL, LABEL_RUN
from agent.sandbox.network import remove_network

_pools: "set[str]" = set()


def prune_at_exit(pool_id: str):
    """Prunes this pool's containers when the process exits or gets SIGTERM (if close() did not already)."""
    if not _pools:
        atexit.register(_cleanup_all)
        for sig in (signal.SIGTERM,):
            with contextlib.suppress(ValueError):  # only possible in the main thread
                previous = signal.getsignal(sig)

                def handler(signum, frame, previous=previous):
                    _cleanup_all()
                    if callable(previous):
                        previous(signum, frame)
                    raise SystemExit(128 + signum)

                signal.signal(sig, handler)
    _pools.add(pool_id)


def _cleanup_all():
    for pool_id in list(_pools):
        with contextlib.suppress(Exception):
            prune(pool=pool_id)
    _pools.clear()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def prune(run_id: Optional[str] = None, orphans_only: bool = False, pool: Optional[str] = None) -> int:
    """Removes harness containers: of one run, of one pool, all of them, or (orphans_only) those whose
    harness process is gone. Returns how many were removed. A container that vanishes meanwhile
    (removed by its own pool, say) is skipped: the low-level list does not inspect each one."""
    client = docker_client()
    labels = [f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN] + ([f"{LABEL_POOL}={pool}"] if pool else [])
    removed = 0
    for c in client.api.containers(all=True, filters={"label": labels}):
        if orphans_only:
            pid = (c.get("Labels") or {}).get(LABEL_PID, "")
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue  # only containers whose owning harness process is known and gone
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_container(c["Id"], force=True, v=True)
            removed += 1
    for net in client.api.networks(filters={"label": labels}):
        if orphans_only:
            pid = (net.get("Labels") or {}).get(LABEL_PID, "")
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
        remove_network(net)
    for img in client.api.images(
        filters={"label": labels}
    ):  # snapshot-mode commits (agent/sandbox/native.py)
        if orphans_only:
            pid = (img.get("Labels") or {}).get(LABEL_PID, "")
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_image(img["Id"], force=True)
    with contextlib.suppress(docker.errors.APIError):
        client.volumes.prune(filters={"label": LABEL_RUN})
    return removed
