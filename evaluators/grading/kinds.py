"""The registry of evaluator kinds: the one list of the ways an attempt can be graded.

evaluators/grading/grade.py dispatches every grading through it, and the task loader checks `[evaluator] kind`
against it. Each kind names its grade function, `async (task, changes, pool, image) -> grade.Verdict`, as
"module:function", imported on the first grading: the graders import the sandbox and Docker's client, which
listing tasks (`harness tasks list`) should not pay for. Adding a kind: write its grade function and
register it below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Kind:
    name: str
    grader: str  # "module:function" that grades one attempt of a task of this kind
    in_task_toml: bool  # a task.toml may name it in [evaluator] kind (else the task's layout selects it)


KINDS: dict[str, Kind] = {}  # in registration order: the order error messages list them in


def register(name: str, grader: str, *, in_task_toml: bool = True) -> None:
    if name in KINDS:
        raise ValueError(f"evaluator kind {name!r} is registered twice")
    KINDS[name] = Kind(name, grader, in_task_toml)


def task_toml_kinds() -> tuple[str, ...]:
    """The kinds a task.toml may name in [evaluator] kind."""
    return tuple(k.name for k in KINDS.values() if k.in_task_toml)


def grader(name: str) -> Callable[..., Any]:
    """The grade function of a registered kind (KeyError for another)."""
    module, function = KINDS[name].grader.split(":")
    return getattr(importlib.import_module(module), function)


register("pytest", "evaluators.grading.grade:grade_pytest")
register("answer", "evaluators.grading.grade:grade_answer")
register("script", "evaluators.grading.grade:grade_script")
# Harbor tasks have no [evaluator]: a tests/test.sh writing /logs/verifier/reward.txt selects it
# (tasks/harbor.py)
register("harbor", "evaluators.grading.harbor_kind:grade_fresh", in_task_toml=False)
