"""The [evaluator] table of a task.toml: which registered evaluator kind grades the task
(evaluators/grading/kinds.py), and that kind's settings, read and checked by the kind itself against the
task's hidden files.

Every problem a user can fix raises UserError with one line naming the file, the field and the fix.
"""

from __future__ import annotations

from typing import Optional

from evaluators.grading import kinds
from results.errors import UserError
from tasks.fields import Where, show
from tasks.model import EvaluatorConfig


def keys_by_kind() -> dict[str, frozenset[str]]:
    """The [evaluator] keys each kind a task.toml may name reads."""
    return {name: kinds.get(name).keys for name in kinds.task_toml_kinds()}


def all_keys() -> set[str]:
    """Every key an [evaluator] table may hold."""
    return set().union(*keys_by_kind().values())


def evaluator_config(
    table: Optional[dict], tests: dict[str, bytes], loc: str, where: Where
) -> EvaluatorConfig:
    """The [evaluator] table (None: absent) of the task.toml at `loc`, checked against its hidden `tests`."""
    if table is None:  # no [evaluator]: a tests/test.sh is the verifier, else the pytest files
        table = {"kind": "script" if "test.sh" in tests else "pytest"}
    kind = table.get("kind", "pytest")
    allowed = kinds.task_toml_kinds()
    if kind not in allowed:
        raise UserError(f"{loc}: [evaluator] kind must be one of {', '.join(allowed)} (got {show(kind)})")
    by_kind = keys_by_kind()
    for key in table:
        if key not in by_kind[kind]:
            used_by = [k for k, keys in by_kind.items() if key in keys]
            raise UserError(
                f"{loc}: [evaluator] {key} only applies to kind = {show(used_by[0])} "
                f"(this task has kind = {show(kind)}; remove it)"
            )
    return kinds.get(kind).settings(table, tests, loc, where)
