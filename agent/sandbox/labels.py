"""What names and labels the things a backend makes (containers, networks, snapshot images, claims): whose
they are (run, pool, process, task), so that each backend's prune finds what a run, a pool or a dead harness
process left behind; and content_hash, the short hash image tags and object names are made of."""

from __future__ import annotations

import hashlib
import os
from typing import Optional

LABEL_RUN = "harness.run"
LABEL_PID = "harness.pid"
LABEL_TASK = "harness.task"
LABEL_POOL = "harness.pool"  # unique per SandboxPool: run ids (folder names) can repeat across processes


def owner_labels(run_id: str, pool_id: str, task: Optional[str] = None) -> dict[str, str]:
    """The run, the pool and this process (and the task, for a container) as labels."""
    labels = {LABEL_RUN: run_id, LABEL_PID: str(os.getpid()), LABEL_POOL: pool_id}
    if task is not None:
        labels[LABEL_TASK] = task
    return labels


def pid_alive(pid: int) -> bool:
    """Whether the process `pid` (a LABEL_PID) still exists: a prune of orphans keeps what it owns."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def orphaned(labels: dict) -> bool:
    """Whether the labels name a harness process that is known and gone (what `prune --orphans` removes)."""
    pid = (labels or {}).get(LABEL_PID, "")
    return pid.isdigit() and not pid_alive(int(pid))


def content_hash(*parts: bytes | str) -> str:
    """A short hash of the parts (image tags, names): the same parts give the same hash everywhere."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:12]
