"""The labels on every Docker object the harness makes (containers, networks, snapshot images): whose it is,
so that cleanup.prune() finds what a run, a pool or a dead harness process left behind."""

from __future__ import annotations

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
