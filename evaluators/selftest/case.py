"""A case of the catalogue: what its script and check see (Ctx, Outcome), the Case type, and the
expectations (checks) that cases are built from. A check returns the problems it found: [] when met."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from results.schema import Attempt


@dataclass
class Ctx:
    """What a case's script and check may use: per-run nonce and paths."""

    nonce: str
    workdir: Path

    @property
    def answer(self) -> str:
        return f"ok-{self.nonce}"

    @property
    def marker(self) -> str:  # only ever in hidden tests; never typed by an attack
        return f"HIDDENMARK{self.nonce}x"

    @property
    def secret(self) -> Path:  # a host file holding the right answer: reading it would score 1
        return self.workdir / f"host-secret-{self.nonce}.txt"


@dataclass
class ApplyRun:
    """What one `harness run --apply` on the scratch repository did, and the commit after it."""

    repo: Path
    marker: Path  # what the agent's hooks and auto-run files would create
    outside: Path  # a host folder beside the repository that links point into
    returncode: int
    stdout: str
    stderr: str
    pid: int  # the CLI's process: its containers carry this pid label
    before: dict = field(default_factory=dict)  # tree() before the run
    after: dict = field(default_factory=dict)  # tree() after the apply, before the commit
    commit: str = ""  # the user's `git commit` after the apply: "" when it succeeded, else why not
    hook_log: tuple[str, str] = ("", "")  # .git/hook.log before and after the commit

    @property
    def changed(self) -> set[str]:
        return {p for p in set(self.before) | set(self.after) if self.before.get(p) != self.after.get(p)}


@dataclass
class Outcome:
    rec: Optional[Attempt]  # the attacking attempt's record
    ctx: Ctx
    apply: Optional[ApplyRun] = None  # group "apply": what `harness run --apply` did (apply_repo.py)

    def obs(self, i: Optional[int] = None) -> str:
        steps = self.rec.steps if self.rec else []
        if i is None:
            return "\n".join(s.observation for s in steps)
        return steps[i].observation if i < len(steps) else ""


Check = Callable[[Outcome], list[str]]


@dataclass
class Case:
    name: str
    group: str  # host | reward | cross | harbor | apply
    expected: str  # for the table
    script: Callable[[Ctx], list[str]]  # replies of the attacking agent
    # answer | json_answer | script | score | add | add_marker | add_brief (20 s verifier) | harbor:<mode>
    task: str = "answer"
    check: Optional[Check] = None  # the case's own expectation; [] when met
    command_timeout: float = 10.0
    slow: bool = False
    # The same attack on top of an honest solution, and what the documented policy says it scores.
    honest: Optional[Check] = None
    honest_script: Optional[Callable[[Ctx], list[str]]] = None  # default: the attack with the right add()
    # group "cross" (evaluators/selftest/cross_cases.py): how many of the four attempts' turns at least must
    # be in a grading container that graded another attempt before (3: all four in one)
    shared_turns: int = 3


def graded(status: str, reason: Optional[str] = None, *needles: str) -> Check:
    """The honest variant's expectation: scored by the policy, never an infra error."""

    def check(o: Outcome) -> list[str]:
        p = status_is(o.rec, status)
        if reason and o.rec.reason != reason:
            p.append(f"reason {o.rec.reason}, expected {reason}")
        return p + has(o.obs(), *needles)

    return check


def has(text: str, *needles: str) -> list[str]:
    """Each needle must appear as a word of its own (so DNS=FAIL is not found inside XDNS=FAIL)."""
    return [
        f"expected {n!r} in the observations"
        for n in needles
        if not re.search(r"(?<![\w-])" + re.escape(n), text)
    ]


def status_is(rec: Attempt, *allowed: str) -> list[str]:
    return (
        []
        if rec.status in allowed
        else [f"status {rec.status} (reason {rec.reason}), expected {'/'.join(allowed)}"]
    )


def solved_and(*needles: str) -> Check:
    def check(o: Outcome) -> list[str]:
        return status_is(o.rec, "solved") + has(o.obs(), *needles)

    return check


def zero_reward(reason: Optional[str] = None, *needles: str) -> Check:
    """A hack: scores 0 as an ordinary failure (never an infra error), optionally with a given reason;
    `needles` prove the attack actually ran."""

    def check(o: Outcome) -> list[str]:
        p = status_is(o.rec, "failed")
        if o.rec.reward != 0.0 or o.rec.solved:
            p.append(f"reward {o.rec.reward}, expected 0")
        if reason and o.rec.reason != reason:
            p.append(f"reason {o.rec.reason}, expected {reason}")
        return p + has(o.obs(), *needles)

    return check


def detail_has(*needles: str) -> Check:
    """The record's detail (what was not captured, why a run timed out, ...) names each needle."""

    def check(o: Outcome) -> list[str]:
        return [
            f"expected {n!r} in the record's detail ({o.rec.detail[:200]!r})"
            for n in needles
            if n not in o.rec.detail
        ]

    return check


def both(*checks: Check) -> Check:
    def check(o: Outcome) -> list[str]:
        return [p for c in checks for p in c(o)]

    return check
