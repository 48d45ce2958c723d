"""Where a round's samples go (lora/train.py with a --budget): a fixed number of train attempts per
round, spread by each task's measured solve rate (results.task_audit.task_rates), a curriculum over the
tasks' difficulty, and hints for the tasks never solved.

Allocation of a budget B over the pool (the train tasks up to the curriculum's difficulty level), from
each task's unhinted samples so far (this round's greedy one and every earlier round's):
- saturated (at least 80% of >= 2 measured samples solved: 2 of 2, 4 of 5): the task leaves the pool,
  0 attempts; its trajectories are in the data already;
- never solved (>= 2 samples, none solved): an exploration share, at most explore_share * B in all,
  spread evenly (with hints on, all of each such task's attempts but one start from a hint);
- the rest (the frontier, and tasks not measured yet): what is left, in proportion to p * (1 - p)
  with p = (solved + 1) / (n + 2) (most where the outcome is least certain), at least 1 each and at
  most twice the pool's mean (B / tasks) each, so that a few frontier tasks cannot take it all.
Whatever cannot be placed (a pool with few tasks, a frontier at its cap) goes to exploration, then to
the frontier.

Curriculum: the pool starts at difficulty <= start level; the level rises by one after a round in
which at least half of the pool's tasks at the current top level were solved (unhinted) at least once
so far. Tasks above the level are still evaluated greedily each round (their measured difficulty),
only not sampled.

Hints (for never-solved tasks): worked examples of the task's family, shown as exchanges after the
loop's own worked example and before the task (Task.example): a sibling instance's (an earlier round's
unhinted success, else a sibling train instance's oracle, solution/solve.sh), then the task's own
oracle's. All of a never-solved task's attempts but one start from it. lora/data.strip_hint rebuilds
a solved hinted attempt as if the hint had never been there before it is trained on. SmolLM2-135M
copies the form of the exchanges it is shown; a hint as text appended to the instruction (the first
form) it mostly ignores: first replies that run the task's own oracle, one train instance of each of
the 14 families, 1 greedy + 6 sampled replies each (bench/hint_forms.py --families all): none 0/98,
text 22/98, one sibling exchange 21/98, the sibling's then its own 70/98.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from lora.data import reply_indices

SATURATED = 0.8  # the share of its samples a task must solve to leave the pool


@dataclass
class Allocation:
    plain: dict[str, int] = field(default_factory=dict)  # task id -> attempts without a hint
    hinted: dict[str, int] = field(default_factory=dict)  # task id -> attempts that start from a hint
    kind: dict[str, str] = field(default_factory=dict)  # task id -> saturated | never | frontier | new
    level: Optional[int] = None  # the curriculum's difficulty level (None: no curriculum)
    left_out: list[str] = field(default_factory=list)  # train tasks above the level

    @property
    def total(self) -> int:
        return sum(self.plain.values()) + sum(self.hinted.values())

    def summary(self) -> dict[str, Any]:
        by_kind: dict[str, dict[str, int]] = {}
        for task, kind in self.kind.items():
            k = by_kind.setdefault(kind, {"tasks": 0, "attempts": 0, "hinted": 0})
            k["tasks"] += 1
            k["attempts"] += self.plain.get(task, 0) + self.hinted.get(task, 0)
            k["hinted"] += self.hinted.get(task, 0)
        return {
            "total": self.total,
            "level": self.level,
            "by_kind": by_kind,
            "left_out": len(self.left_out),
            "plain": self.plain,
            "hinted": self.hinted,
        }


def classify(rate: Any) -> str:
    """saturated | never | frontier | new, from a results.task_audit.TaskRate (or None: not measured)."""
    if rate is None or rate.n == 0:
        return "new"
    if rate.n >= 2 and rate.solved >= SATURATED * rate.n:
        return "saturated"
    if rate.n >= 2 and rate.solved == 0:
        return "never"
    return "frontier"


def allocate(
    task_ids: list[str], rates: dict[str, Any], budget: int, explore_share: float, hints: bool
) -> Allocation:
    """Spread `budget` attempts over `task_ids` by their measured rates (see the module docstring)."""
    alloc = Allocation(kind={t: classify(rates.get(t)) for t in task_ids})
    frontier = [t for t in task_ids if alloc.kind[t] in ("frontier", "new")]
    never = [t for t in task_ids if alloc.kind[t] == "never"]
    count = {t: 0 for t in task_ids}
    explore = min(int(math.floor(explore_share * budget)), budget) if never else 0
    _spread_evenly(never, explore, count)
    rest = budget - sum(count.values())
    if frontier and rest > 0:
        weights = {}
        for t in frontier:
            r = rates.get(t)
            p = 0.5 if r is None or r.n == 0 else (r.solved + 1) / (r.n + 2)
            weights[t] = p * (1 - p)
        cap = max(1, math.ceil(2 * budget / len(task_ids)))
        base = min(rest, len(frontier))  # at least one each, while the budget lasts
        _spread_evenly(frontier, base, count)
        _spread_weighted(frontier, min(rest - base, (cap - 1) * len(frontier)), weights, count, cap)
    leftover = budget - sum(count.values())
    if leftover > 0 and never:  # nothing (more) at the frontier: explore instead
        _spread_evenly(never, leftover, count)
    leftover = budget - sum(count.values())
    if leftover > 0 and frontier:  # no never-solved task to explore: past the cap after all
        _spread_weighted(frontier, leftover, weights, count)
    for t in task_ids:
        if count[t] == 0:
            continue
        if hints and alloc.kind[t] == "never":  # one unhinted attempt keeps measuring it
            alloc.hinted[t] = max(1, count[t] - 1)
            if count[t] - alloc.hinted[t]:
                alloc.plain[t] = count[t] - alloc.hinted[t]
        else:
            alloc.plain[t] = count[t]
    return alloc


def _spread_evenly(tasks: list[str], n: int, count: dict[str, int]) -> None:
    for i in range(max(0, n)):
        if tasks:
            count[tasks[i % len(tasks)]] += 1


def _spread_weighted(
    tasks: list[str], n: int, weights: dict[str, float], count: dict[str, int], cap: int | None = None
) -> None:
    """Largest-remainder split of n in proportion to weights (ties: task order); with `cap`, no task
    past cap in all (what a capped task cannot take goes to the others by their weights)."""
    open_ = [t for t in tasks if cap is None or count[t] < cap]
    while n > 0 and open_:
        total = sum(weights[t] for t in open_) or float(len(open_))
        shares = {t: n * (weights[t] or (total / len(open_))) / total for t in open_}
        given = {t: int(math.floor(shares[t])) for t in open_}
        left = n - sum(given.values())
        for t in sorted(open_, key=lambda t: -(shares[t] - given[t]))[:left]:
            given[t] += 1
        for t in open_:
            if cap is not None:
                given[t] = min(given[t], cap - count[t])
            count[t] += given[t]
            n -= given[t]
        open_ = [t for t in open_ if cap is None or count[t] < cap]


def next_level(level: int, tasks: Iterable[Any], solved_ever: set[str], top: int) -> int:
    """The curriculum's level after a round: one up once at least half of the pool's tasks at the
    current level have been solved at least once (unhinted)."""
    at_level = [t.id for t in tasks if getattr(t, "difficulty", 1) == level]
    if level < top and (not at_level or 2 * sum(t in solved_ever for t in at_level) >= len(at_level)):
        return level + 1
    return level


def oracle_script(task: Any) -> Optional[str]:
    """The task's oracle (solution/solve.sh) as one command: its shebang, leading `set` lines and
    comments skipped, the rest as written."""
    script = (getattr(task, "solution_files", None) or {}).get("solve.sh")
    if not script:
        return None
    lines = script.decode("utf-8", "replace").rstrip().splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith(("#", "set "))):
        lines.pop(0)
    return "\n".join(lines) or None


def oracle_example(task: Any) -> Optional[list[dict]]:
    """A worked example of `task` solved by its oracle, as the loop would have recorded it: the task, the
    oracle in one reply, an observation (exit code 0; the oracle is not run for this), submit."""
    from agent.prompt_format import prompt

    script = oracle_script(task)
    if not script:
        return None
    return [
        {"role": "user", "content": prompt("instance", instruction=task.instruction)},
        {"role": "assistant", "content": f"```bash\n{script}\n```"},
        {"role": "user", "content": prompt("observation", exit_code=0, output="(no output)")},
        {"role": "assistant", "content": "```bash\nsubmit\n```"},
    ]


def attempt_example(attempt: Any) -> Optional[list[dict]]:
    """A solved attempt as a worked example: its task message and everything after it (the model's
    replies and the real observations)."""
    replies = reply_indices(attempt)
    if not replies or replies[0] < 1 or attempt.messages[replies[0] - 1].get("role") != "user":
        return None
    return [
        {"role": m["role"], "content": m["content"]}
        for m in attempt.messages[replies[0] - 1 :]
        if "content" in m
    ]


def hint_for(
    task: Any, sibling_successes: dict[str, list[Any]], siblings: Iterable[Any] = ()
) -> Optional[list[dict]]:
    """The hint for a never-solved task: worked examples of its family shown before its instruction --
    a sibling instance's (an earlier round's unhinted success, else the oracle of a train instance in
    `siblings`), then the task's own oracle's; None when there is neither. Two examples, the second
    this task's, are followed far more often than one by a small model (bench/hint_forms.py)."""
    family = getattr(task, "family", "") or ""
    sibling: Optional[list[dict]] = None
    for a in sibling_successes.get(family, []) if family else []:
        if a.task_id != task.id and (sibling := attempt_example(a)):
            break
    for t in sorted(siblings, key=lambda t: t.id) if family and not sibling else []:
        if t.id != task.id and (getattr(t, "family", "") or "") == family and (sibling := oracle_example(t)):
            break
    examples = (sibling or []) + (oracle_example(task) or [])
    return examples or None


def hinted_task(task: Any, hint: list[dict]) -> Any:
    """A copy of the task whose attempts see the hint (a worked example) before its instruction (same
    id: its attempts are its own)."""
    t = copy.copy(task)
    t.example = tuple(dict(m) for m in hint)
    return t
