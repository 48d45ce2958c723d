"""The import graph goes one way: each module imports only modules of lower layers (or of its own layer and
package). The layers are docs/architecture.md's; a module no layer claims fails here too, so a
new module gets a place on purpose."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "evaluators", "tasks", "lora", "results")

# Lowest first. A name claims the module and everything under it; the longest claim wins.
# Within a layer a module imports only its own package: the agent (loop, models) and the graders share
# the fourth layer, so neither imports the other; both use the sandbox below them.
LAYERS: list[tuple[str, list[str]]] = [
    ("vocabulary", ["results.schema", "results.errors"]),  # and the packages' own __init__ (docstrings)
    ("records", ["results", "tasks.model", "tasks.fields"]),  # tasks.fields: value checks the kinds use too
    ("sandbox", ["agent.sandbox"]),
    ("agent and graders", ["agent", "evaluators.grading"]),  # the loop, models, serve; every evaluator kind
    ("orchestrator and task loading", ["evaluators.run", "tasks"]),
    ("commands", ["evaluators", "agent.workflow", "lora"]),  # validate, rescore, selftest; harness run; train
    (
        "entry",
        ["harness", "agent.cli", "agent.serve.cli", "evaluators.cli", "tasks.cli", "results.cli", "lora.cli"],
    ),
]


def layer_of(module: str) -> int | None:
    if module in PACKAGES:
        return 0
    best, found = -1, None
    for level, (_, names) in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), level
    return found


def our_modules() -> dict[str, Path]:
    found = {"harness": ROOT / "harness.py"}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("tasks", "builtin"):  # task data, not our code
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Our modules that `module` imports anywhere in its file (inside functions too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod when there is one
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t.split(".")[0] in PACKAGES + ("harness",)}
    return out


def violations(known: dict[str, Path] | None = None) -> list[str]:
    known = known or our_modules()
    bad = []
    for module, path in sorted(known.items()):
        mine = layer_of(module)
        if mine is None:
            bad.append(f"{module}: no layer claims it (add it to LAYERS and to docs/architecture.md's graph)")
            continue
        for target in sorted(imports_of(module, path, known)):
            theirs = layer_of(target)
            same_package = target.split(".")[0] == module.split(".")[0]
            if mine == 0:
                bad.append(f"{module} -> {target}: the vocabulary imports nothing of ours")
            elif theirs is None:
                bad.append(f"{module} -> {target}: unknown module")
            elif theirs > mine or (theirs == mine and not same_package):
                bad.append(
                    f"{module} ({LAYERS[mine][0]}) -> {target} ({LAYERS[theirs][0]}): goes up or across"
                )
    return bad


def test_imports_go_one_way():
    assert violations() == []


@pytest.mark.parametrize(
    "victim, source, expected",
    [
        ("results.errors", "from results.store import open_run", "the vocabulary imports nothing of ours"),
        ("results.store", "from evaluators.run.runner import run_eval", "goes up or across"),
        (
            "agent.loop",
            "from evaluators.grading.grade import grade",
            "goes up or across",
        ),  # across: agent -> grader
        ("evaluators.grading.grade", "import agent.loop", "goes up or across"),  # across: grader -> agent
        (
            "agent.sandbox",
            "def f():\n    from agent.models import get_model",
            "goes up or across",
        ),  # lazy import
    ],
)
def test_the_check_catches_a_wrong_import(tmp_path, victim, source, expected):
    """The checker itself: one import against the graph, planted in a copy of a real module, is reported."""
    known = our_modules()
    planted = tmp_path / "planted.py"
    planted.write_text(known[victim].read_text() + "\n" + source + "\n")
    known[victim] = planted
    found = [v for v in violations(known) if v.startswith(victim + " ")]
    assert len(found) == 1 and expected in found[0]


# ---------------------------------------------------------------- each module small, and saying what it owns

MAX_LINES = 500
# Data tables (no logic to split): none today. A module listed here is exempt from MAX_LINES.
DATA_TABLES: set[str] = set()
# Over MAX_LINES, being split by whoever is changing them now: they leave this set when their split lands.
# No other module may join it.
OWNED_ELSEWHERE_FOR_NOW = {
    "evaluators.grading.harbor_kind",
    "evaluators.run.runner",
    "results.telemetry",
}


def long_modules(known: dict[str, Path] | None = None) -> list[str]:
    known = known or our_modules()
    out = []
    for module, path in sorted(known.items()):
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and module not in DATA_TABLES | OWNED_ELSEWHERE_FOR_NOW:
            out.append(f"{module}: {n} lines (at most {MAX_LINES}: split it along a seam)")
    return out


def silent_modules(known: dict[str, Path] | None = None) -> list[str]:
    known = known or our_modules()
    out = []
    for module, path in sorted(known.items()):
        doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
        if not (doc and doc.strip()):
            out.append(f"{module}: no docstring (its first lines say what it owns)")
    return out


def test_no_module_over_500_lines():
    assert long_modules() == []


def test_every_module_says_what_it_owns():
    assert silent_modules() == []


def test_the_size_and_docstring_checks_catch_a_module(tmp_path):
    """The checks themselves: a real module made long, or stripped of its docstring, in a copy, is reported;
    an exempt one that grew is not."""
    known = our_modules()
    long, bare = tmp_path / "long.py", tmp_path / "bare.py"
    long.write_text(known["results.store"].read_text() + "\n" * MAX_LINES)
    tree = ast.parse(known["results.errors"].read_text())
    tree.body = tree.body[1:]  # without its docstring
    bare.write_text(ast.unparse(tree))
    exempt = sorted(OWNED_ELSEWHERE_FOR_NOW)[0]
    assert [x.split(":")[0] for x in long_modules({"results.store": long, exempt: long})] == ["results.store"]
    assert [x.split(":")[0] for x in silent_modules({"results.errors": bare})] == ["results.errors"]
