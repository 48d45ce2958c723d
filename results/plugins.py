"""Plugins: how a name in one of our registries (evaluator kinds, model backends, sandbox backends) finds
code that is not in this tree. One rule for the three:

- an installed package's entry point in the registry's group, e.g. in its pyproject.toml
  `[project.entry-points."harness.kinds"] regex = "mypkg.regex_kind:KIND"` (groups: GROUPS);
- or a dotted path `module:attribute` written where a name is expected (`kind = "mypkg.regex_kind:KIND"`
  in a task.toml, `--sandbox mypkg.backend:BACKEND`, `--model py:mypkg.echo:from_spec:TARGET`: a model
  spec's own colon separates its backend from its target, so its dotted path comes after `py:`),
  importable from the Python path.

In the lowest package so that each registry (tasks/kinds.py, agent/models, agent/sandbox/registry.py)
uses it; the built-in entries are registered by their own registry, by the same `module:attribute` form.
docs/extending.md shows a plugin kind and a plugin model backend.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points
from typing import Any, Optional

from results.errors import UserError

GROUPS = {"kinds": "harness.kinds", "models": "harness.models", "sandboxes": "harness.sandboxes"}
# Reading every installed distribution's entry points takes ~30 ms and loading a suite asks once a task or
# more: read once per Python path (what is installed changes with it, not during a run).
_installed: dict[tuple, dict[str, dict[str, str]]] = {}


def installed(registry: str) -> dict[str, str]:
    """name -> `module:attribute` of every installed package's entry point in the registry's group."""
    key = tuple(sys.path)
    if key not in _installed:
        _installed.clear()
        _installed[key] = {
            reg: {ep.name: f"{ep.module}:{ep.attr}" for ep in entry_points(group=group)}
            for reg, group in GROUPS.items()
        }
    return dict(_installed[key][registry])


def is_path(name: str) -> bool:
    """Whether `name` is a dotted path (`module:attribute`) rather than a registered name."""
    return ":" in name


def find(registry: str, name: str) -> Optional[str]:
    """Where a name this tree does not register lives (`module:attribute`), or None when nowhere."""
    if is_path(name):
        return name
    return installed(registry).get(name)


def load(target: str, what: str) -> Any:
    """The object at `module:attribute` (the attribute may be dotted: `module:Class.member`); a UserError
    naming `what` (e.g. "evaluator kind 'regex'") and the fix when the module or the attribute is missing."""
    module, _, attr = target.partition(":")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:
        # the plugin itself (or a package above it) is missing, not a module it imports
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise UserError(f"{what}: no module {module!r} (install the package that has it)") from None
        raise
    except ValueError:  # an empty or relative module name
        raise UserError(f"{what}: {target!r} is not module:attribute") from None
    for part in attr.split(".") if attr else [""]:
        if not part or not hasattr(found, part):
            raise UserError(f"{what}: {module} has no {attr or 'attribute'} (write it as module:attribute)")
        found = getattr(found, part)
    return found
