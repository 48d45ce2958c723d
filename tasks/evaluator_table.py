"""The [evaluator] table of a task.toml: which evaluator kind grades the task (tasks/kinds.py finds it by
name or dotted path), and that kind's settings, read and checked by the kind itself against the
task's hidden files.

Every problem a user can fix raises UserError with one line naming the file, the field and the fix.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from results import plugins
from results.errors import UserError
from tasks import kinds
from tasks.fields import Where, show
from tasks.model import EvaluatorConfig


def keys_by_kind() -> dict[str, frozenset[str]]:
    """The [evaluator] keys each kind a task.toml may name reads."""
    return {name: kinds.get(name).keys for name in kinds.task_toml_kinds()}


def all_keys() -> set[str]:
    """Every key an [evaluator] table of a kind named by name may hold."""
    return set().union(*keys_by_kind().values())


def by_path(table: Optional[dict]) -> bool:
    """Whether the table names its kind by a dotted path (module:KIND): only that kind knows its keys."""
    kind = (table or {}).get("kind")
    return isinstance(kind, str) and kind not in kinds.BUILTIN and plugins.is_path(kind)


def evaluator_config(
    table: Optional[dict], tests: dict[str, bytes], loc: str, where: Where
) -> EvaluatorConfig:
    """The [evaluator] table (None: absent) of the task.toml at `loc`, checked against its hidden `tests`."""
    if table is None:  # no [evaluator]: a tests/test.sh is the verifier, else the pytest files
        table = {"kind": "script" if "test.sh" in tests else "pytest"}
    kind = table.get("kind", "pytest")
    allowed = kinds.task_toml_kinds()
    plugin = isinstance(kind, str) and kind not in kinds.BUILTIN and kinds.known(kind)
    if not (kind in allowed or plugin):
        raise UserError(
            f"{loc}: [evaluator] kind must be one of {', '.join(allowed)} or a plugin's module:KIND "
            f"(got {show(kind)})"
        )
    try:
        found = kinds.get(kind)
    except UserError as e:  # a plugin's module that is not installed
        raise UserError(f"{loc}: [evaluator] {e}") from None
    by_kind = keys_by_kind()
    by_kind.setdefault(kind, found.keys)
    for key in table:
        if key not in by_kind[kind]:
            used_by = [k for k, keys in by_kind.items() if key in keys]
            if not used_by:
                allowed = ", ".join(sorted(by_kind[kind]))
                raise UserError(f"{loc}: [evaluator] unknown key {show(key)} (allowed: {allowed})")
            raise UserError(
                f"{loc}: [evaluator] {key} only applies to kind = {show(used_by[0])} "
                f"(this task has kind = {show(kind)}; remove it)"
            )
    config = found.settings(table, tests, loc, where)
    # a kind named by its dotted path is found again by it (its own name is not registered)
    return dataclasses.replace(config, kind=kind) if config.kind != kind else config
