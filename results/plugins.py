"""Plugins: how a name in one of our registries (evaluator kinds, model backends, sandbox backends) finds
code that is not in this tree. One rule for the three:

- an installed package's entry point in the registry's group, e.g. in its pyproject.toml
  `[project.entry-points."harness.kinds"] regex = "mypkg.regex_kind:KIND"`;
- or a dotted path `module:attribute` written where a name is expected (`kind = "mypkg.regex_kind:KIND"`
  in a task.toml, `--sandbox mypkg.backend:BACKEND`), importable from the Python path.

In the lowest package so that each registry (tasks/kinds.py, agent/models, agent/sandbox/registry.py)
uses it; the built-in entries are registered by their own registry, by the same `module:attribute` form.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Optional

from results.errors import UserError

GROUPS = {"kinds": "harness.kinds", "models": "harness.models", "sandboxes": "harness.sandboxes"}


def installed(registry: str) -> dict[str, str]:
    """name -> `module:attribute` of every installed package's entry point in the registry's group."""
    return {ep.name: ep.value for ep in entry_points(group=GROUPS[registry])}


def is_path(name: str) -> bool:
    """Whether `name` is a dotted path (`module:attribute`) rather than a registered name."""
    return ":" in name


def find(registry: str, name: str) -> Optional[str]:
    """Where a name this tree does not register lives (`module:attribute`), or None when nowhere."""
    if is_path(name):
        return name
    return installed(registry).get(name)


def load(target: str, what: str) -> Any:
    """The object at `module:attribute`; a UserError naming `what` (e.g. "evaluator kind 'regex'") and the fix
    when the module or the attribute is missing."""
    module, _, attr = target.partition(":")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):  # the plugin itself is missing, not one of its imports
            raise UserError(f"{what}: no module {module!r} (install the package that has it)") from None
        raise
    if not attr or not hasattr(found, attr):
        raise UserError(f"{what}: {module} has no {attr or 'attribute'} (write it as module:attribute)")
    return getattr(found, attr)
