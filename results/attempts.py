"""What one attempt amounts to: whether it solved its task, and what it did (its action signature).

The report, the exporter and the post-training loop all decide these here, so they never disagree.
"""

from __future__ import annotations

import hashlib
import json

from results.schema import Attempt


def is_solved(attempt: Attempt, strict: bool = False) -> bool:
    """Whether `attempt` solved its task.

    Default: the grader's verdict (Attempt.solved; never set for an infra error). Rates, pass@k and
    export use it. strict: also status "solved", full reward and no tamper verdict. Training imitates
    what it keeps, so it checks each part rather than trust the one flag: a record made elsewhere
    (by hand, an import, another harness version) with partial credit or a tamper verdict is not a
    solve. For records the runner writes, both decisions agree.
    """
    if strict:
        return attempt.status == "solved" and attempt.reward >= 1.0 and attempt.reason != "tamper"
    return attempt.solved


def action_signature(attempt: Attempt) -> str:
    """Hash of the attempt's task and sequence of actions: the same signature = a duplicate trajectory."""
    actions = [[a.kind, a.command, a.path, a.content] for s in attempt.steps for a in s.actions]
    return hashlib.sha256(json.dumps([attempt.task_id, actions]).encode()).hexdigest()
