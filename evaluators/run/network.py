"""The run's network as its tasks' evaluator kinds say (the NetworkPolicy capability,
evaluators/grading/kind.py): --no-internet, and the lines that say which tasks have network and why. An
ordinary kind's containers have no network to take away and nothing to say."""

from __future__ import annotations

from evaluators.grading.kind import NetworkPolicy
from tasks import kinds
from tasks.model import Task


def offline(tasks: list[Task]) -> list[Task]:
    """--no-internet: every task without network for any of its containers."""
    out = []
    for t in tasks:
        kind = kinds.of(t)
        out.append(kind.offline(t) if isinstance(kind, NetworkPolicy) else t)
    return out


def network_lines(tasks: list[Task]) -> list[str]:
    """What the run's tasks say about their network, one line per kind that has something to say."""
    by_kind: dict[str, list[Task]] = {}
    for t in tasks:
        by_kind.setdefault(t.evaluator.kind, []).append(t)
    lines = []
    for name, group in by_kind.items():
        kind = kinds.get(name)
        if isinstance(kind, NetworkPolicy) and (line := kind.network_line(group)):
            lines.append(line)
    return lines
