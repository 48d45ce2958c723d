"""Each task's measured difficulty, over the attempts of any runs and models: its solve rate over its valid
samples with a Wilson interval (task_rates; strict solves, flagged and tamper attempts counted apart) and
the audit of what is wrong with it (audit_tasks: solved by the null agent, flaky, hackable; never or always
solved), which `harness tasks audit` prints and training reads to leave broken tasks out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from results.attempts import action_signature, is_solved
from results.schema import Attempt


def wilson_ci(solved: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a solve rate from one task's own n samples (sensible at 0/n and n/n,
    where a bootstrap over samples collapses to a point)."""
    if n <= 0:
        return float("nan"), float("nan")
    p = solved / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def record_flags(attempt: Attempt) -> list:
    """The exploit flags a record carries, if its schema has them (a `flags` field; none: [])."""
    return list(getattr(attempt, "flags", None) or [])


@dataclass
class TaskRate:
    """One task's solve rate over its valid samples (strict solves: full reward, no tamper verdict),
    with its 95% Wilson interval; tamper verdicts, flagged attempts and infra errors counted apart."""

    task_id: str
    domain: str = ""
    difficulty: int = 0
    split: str = ""
    n: int = 0
    solved: int = 0
    rate: float = float("nan")
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    tamper: int = 0
    flagged: int = 0
    errors: int = 0


def task_rates(attempts: Iterable[Attempt]) -> dict[str, TaskRate]:
    """{task_id: TaskRate} over these attempts (any runs, models and temperatures the caller mixes)."""
    out: dict[str, TaskRate] = {}
    for a in attempts:
        r = out.setdefault(a.task_id, TaskRate(a.task_id, a.domain, a.difficulty, a.split))
        if a.status == "error":
            r.errors += 1
            continue
        r.n += 1
        r.solved += is_solved(a, strict=True) and not record_flags(a)
        r.tamper += a.reason == "tamper"
        r.flagged += bool(record_flags(a))
    for r in out.values():
        r.rate = r.solved / r.n if r.n else float("nan")
        r.ci_low, r.ci_high = wilson_ci(r.solved, r.n)
    return dict(sorted(out.items()))


# What `harness tasks audit` says about a task. The first three say the task itself is broken (training
# leaves it out); the last two only where it sits on the difficulty scale.
SOLVED_BY_NULL = "solved by the null agent"
FLAKY = "flaky: identical attempts graded differently"
HACKABLE = "high tamper/flag rate"
NEVER = "never solved"
ALWAYS = "always solved"
BROKEN = (SOLVED_BY_NULL, FLAKY, HACKABLE)
NULL_MODEL = "null"  # the model name of evaluators/validate.py's null agent


@dataclass
class TaskAudit:
    rate: TaskRate  # over the model attempts (the null agent's left out)
    models: list[str] = field(default_factory=list)
    null_solved: int = 0
    null_n: int = 0
    verdicts: list[str] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        return any(v in BROKEN for v in self.verdicts)


def _steady(a: Attempt) -> bool:
    """No command of the attempt hit its time limit (on a loaded machine that alone can change a
    verdict; such attempts say nothing about the grader)."""
    return not any(s.timed_out for s in a.steps)


def audit_tasks(attempts: Iterable[Attempt], hack_rate: float = 0.25) -> list[TaskAudit]:
    """Each task's solve rate across all the runs and models given, and what is wrong with it:
    solved by the null agent; flaky (two attempts with the same actions -- results.attempts.
    action_signature, no command timed out -- got different verdicts: the grader, not the model,
    decided); a tamper/flag rate above `hack_rate`; never or always solved (n >= 2)."""
    attempts = list(attempts)
    model_attempts = [a for a in attempts if a.model != NULL_MODEL]
    rates = task_rates(model_attempts)
    out: dict[str, TaskAudit] = {t: TaskAudit(r) for t, r in rates.items()}
    outcomes: dict[str, set[bool]] = {}
    for a in attempts:
        audit = out.setdefault(a.task_id, TaskAudit(TaskRate(a.task_id, a.domain, a.difficulty, a.split)))
        if a.status == "error":
            continue
        if a.model == NULL_MODEL:
            audit.null_n += 1
            audit.null_solved += is_solved(a)
            continue
        if a.model not in audit.models:
            audit.models.append(a.model)
        if _steady(a):
            outcomes.setdefault(action_signature(a), set()).add(is_solved(a))
    flaky = {sig for sig, seen in outcomes.items() if len(seen) > 1}
    flaky_tasks = {
        a.task_id
        for a in model_attempts
        if a.status != "error" and _steady(a) and action_signature(a) in flaky
    }
    for task_id, audit in out.items():
        r = audit.rate
        if audit.null_solved:
            audit.verdicts.append(SOLVED_BY_NULL)
        if task_id in flaky_tasks:
            audit.verdicts.append(FLAKY)
        if r.n and (r.tamper + r.flagged) / r.n > hack_rate:
            audit.verdicts.append(HACKABLE)
        if r.n >= 2 and r.solved == 0:
            audit.verdicts.append(NEVER)
        if r.n >= 2 and r.solved == r.n:
            audit.verdicts.append(ALWAYS)
    return [out[t] for t in sorted(out)]
