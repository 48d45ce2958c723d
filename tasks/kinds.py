"""The registry of evaluator kinds: the name a task names in [evaluator] kind (or its layout implies) -> the
kind object that parses its settings and grades it (evaluators/grading/kind.py's `Kind`).

Kinds are found by `module:attribute` and imported on first use, the built-in ones registered below as
any plugin is (results/plugins.py: an installed package's `harness.kinds` entry point, or a dotted path in
the task.toml). So the task loader reads a kind's settings through the kind's own parser, while this
package imports nothing of evaluators/: the kinds' code stays one module each, in the grading layer.

Adding a built-in kind: evaluators/grading/<name>_kind.py with `KIND = MyKind()`, and one `register` line
below; a kind of one's own needs neither (docs/extending.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from results import plugins
from results.errors import UserError

if TYPE_CHECKING:
    from tasks.model import Task

BUILTIN: dict[str, str] = {}  # kind name -> `module:attribute`, in registration order (messages list them so)
IN_TASK_TOML: list[str] = []  # the built-in kinds a task.toml may name (others: the task's layout selects)


def register(name: str, target: str, *, in_task_toml: bool = True) -> None:
    if name in BUILTIN:
        raise ValueError(f"evaluator kind {name!r} is registered twice")
    BUILTIN[name] = target
    if in_task_toml:
        IN_TASK_TOML.append(name)


def known(name: str) -> bool:
    """Whether `name` finds a kind: registered here, an installed plugin's, or a dotted path."""
    return name in BUILTIN or plugins.find("kinds", name) is not None


def get(name: str) -> Any:
    """The kind of that name; a UserError for one that nothing provides."""
    target = BUILTIN.get(name) or plugins.find("kinds", name)
    if target is None:
        raise UserError(f"evaluator kind {name!r}: choose one of {', '.join(task_toml_kinds())}")
    kind = plugins.load(target, f"evaluator kind {name!r}")
    if isinstance(kind, type) or not callable(getattr(kind, "grade", None)):  # e.g. KIND = MyKind (no call)
        raise UserError(
            f"evaluator kind {name!r}: {target} is not a kind object (an instance of a subclass of "
            "evaluators.grading.kind.Kind: KIND = MyKind())"
        )
    if kind.name != name and not plugins.is_path(name):
        raise UserError(f"evaluator kind {name!r}: {target} is a kind named {kind.name!r}")
    return kind


def of(task: "Task") -> Any:
    """The kind that grades `task`."""
    return get(task.evaluator.kind)


def task_toml_kinds() -> tuple[str, ...]:
    """The kinds a task.toml may name in [evaluator] kind by name (a dotted path names any other)."""
    return tuple(IN_TASK_TOML) + tuple(k for k in plugins.installed("kinds") if k not in BUILTIN)


register("pytest", "evaluators.grading.pytest_kind:KIND")
register("answer", "evaluators.grading.answer_kind:KIND")
register("script", "evaluators.grading.script_kind:KIND")
# Harbor tasks have no [evaluator]: a tests/test.sh writing /logs/verifier/reward.txt selects it
# (tasks/harbor.py)
register("harbor", "evaluators.grading.harbor_kind:KIND", in_task_toml=False)
