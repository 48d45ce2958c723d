"""The import graph goes one way. The top-level packages are stacked (PACKAGES, lowest first): a module
imports only its own package and the packages below it, so the packages form no cycle. Inside a package
its layers (LAYERS, lowest first) stack the same way. The layers are docs/architecture.md's; a module no
layer claims fails here too, so a new module gets a place on purpose."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Lowest first: the record and its vocabulary, the task format, the agent (sandbox, loop, models), the
# graders and the orchestrator with the commands that use them, training; harness.py, the entry, on top.
PACKAGES = ("results", "tasks", "agent", "evaluators", "lora")
TOP = "harness"

# Each package's layers, lowest first. A name claims the module and everything under it; the longest claim
# wins. A package's own __init__ is below all of them: it imports nothing of ours (docstrings, constants).
LAYERS: dict[str, list[tuple[str, list[str]]]] = {
    "results": [
        ("vocabulary", ["results.schema", "results.errors"]),
        ("records, reports and telemetry", ["results"]),
        ("entry", ["results.cli"]),
    ],
    "tasks": [
        ("the task and its rules", ["tasks.model", "tasks.fields", "tasks.kinds", "tasks.tamper"]),
        ("task loading", ["tasks"]),
        ("entry", ["tasks.cli"]),
    ],
    "agent": [
        ("sandbox", ["agent.sandbox"]),
        ("loop and models", ["agent"]),
        ("serving and workflows", ["agent.serve", "agent.workflow"]),
        ("entry", ["agent.cli", "agent.serve.cli"]),
    ],
    "evaluators": [
        ("graders", ["evaluators.grading"]),  # every evaluator kind, the grading containers
        ("orchestrator", ["evaluators.run"]),  # attempts, the scheduler, the cluster
        ("commands", ["evaluators"]),  # validate, cheats, rescore, selftest, the Harbor export
        ("entry", ["evaluators.cli"]),
    ],
    "lora": [("training", ["lora"]), ("entry", ["lora.cli"])],
}


def diagram() -> str:
    """The layers as the README draws them: one row a package, the highest on top; each row imports only the
    rows below it, and inside a row a layer imports only itself and the layers to its left."""
    rows = [f"{TOP + '.py':<12} the command line: every package's commands"]
    for package in reversed(PACKAGES):
        rows.append(f"{package + '/':<12} " + " > ".join(name for name, _ in LAYERS[package]))
    width = max(map(len, rows))
    rule = "-" * width
    return "\n".join([rule, *(r for row in rows for r in (row, rule))])


def package_of(module: str) -> str:
    return module.split(".")[0]


def rank(package: str) -> int:
    return len(PACKAGES) if package == TOP else PACKAGES.index(package)


def layer_of(module: str) -> int | None:
    """The module's layer inside its package: -1 for the package's __init__, None when no layer claims it."""
    if module in PACKAGES:
        return -1
    best, found = -1, None
    for level, (_, names) in enumerate(LAYERS.get(package_of(module), [])):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), level
    return found


def our_modules() -> dict[str, Path]:
    found = {"harness": ROOT / "harness.py"}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] in (("tasks", "builtin"), ("tasks", "humaneval")):  # task data, not our code
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
        out |= {t for t in targets if package_of(t) in PACKAGES + (TOP,)}
    return out


def violations(known: dict[str, Path] | None = None) -> list[str]:
    known = known or our_modules()
    bad = []
    for module, path in sorted(known.items()):
        package, mine = package_of(module), layer_of(module)
        if package != TOP and mine is None:
            bad.append(f"{module}: no layer claims it (add it to LAYERS and to docs/architecture.md's graph)")
            continue
        for target in sorted(imports_of(module, path, known)):
            there = package_of(target)
            if mine == -1:
                bad.append(f"{module} -> {target}: a package's __init__ imports nothing of ours")
            elif target not in known:
                bad.append(f"{module} -> {target}: unknown module")
            elif rank(there) > rank(package):
                bad.append(f"{module} -> {target}: goes up from package {package} to {there}")
            elif there == package and package != TOP and layer_of(target) > mine:
                layers = LAYERS[package]
                bad.append(
                    f"{module} ({layers[mine][0]}) -> {target} ({layers[layer_of(target)][0]}): goes up "
                    f"inside {package}"
                )
    return bad


def package_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """package -> the other packages its modules import."""
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        for target in imports_of(module, path, known):
            if package_of(target) != package_of(module):
                graph.setdefault(package_of(module), set()).add(package_of(target))
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph (its nodes, the first repeated at the end), or [] when there is none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return []
        for nxt in sorted(graph.get(node, ())):
            if found := visit(nxt, path + [node]):
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        if found := visit(start, []):
            return found
    return []


def test_imports_go_one_way():
    assert violations() == []


def test_the_packages_form_no_cycle():
    graph = package_graph(our_modules())
    assert cycle(graph) == [], " -> ".join(cycle(graph))
    # and the order PACKAGES states is the one the imports follow
    for package, targets in graph.items():
        assert all(rank(t) < rank(package) for t in targets), (package, targets)


def test_the_readme_draws_these_layers():
    readme = (ROOT / "README.md").read_text()
    assert f"```text\n{diagram()}\n```" in readme, "README's Architecture diagram: paste diagram()'s output"


def test_the_cycle_check_finds_one():
    assert cycle({"tasks": {"results"}, "agent": {"tasks"}}) == []
    assert cycle({"tasks": {"agent"}, "agent": {"evaluators"}, "evaluators": {"tasks"}}) == [
        "agent",
        "evaluators",
        "tasks",
        "agent",
    ]


@pytest.mark.parametrize(
    "victim, source, expected",
    [
        ("results.errors", "from results.store import open_run", "goes up inside results"),
        ("results.store", "from evaluators.run.runner import run_eval", "goes up from package results"),
        ("agent.loop", "from evaluators.grading.grade import grade", "goes up from package agent"),
        ("tasks.task_folder", "import agent.sandbox", "goes up from package tasks"),  # the old knot
        ("evaluators.grading.grade", "import evaluators.run.runner", "goes up inside evaluators"),
        ("tasks", "from tasks.model import Task", "a package's __init__ imports nothing of ours"),
        (
            "agent.sandbox",
            "def f():\n    from agent.models import get_model",
            "goes up inside agent",
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


def long_modules(known: dict[str, Path] | None = None) -> list[str]:
    known = known or our_modules()
    out = []
    for module, path in sorted(known.items()):
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and module not in DATA_TABLES:
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
    a data table that grew is not."""
    known = our_modules()
    long, bare = tmp_path / "long.py", tmp_path / "bare.py"
    long.write_text(known["results.store"].read_text() + "\n" * MAX_LINES)
    tree = ast.parse(known["results.errors"].read_text())
    tree.body = tree.body[1:]  # without its docstring
    bare.write_text(ast.unparse(tree))
    DATA_TABLES.add("tasks.model")
    try:
        found = long_modules({"results.store": long, "tasks.model": long})
    finally:
        DATA_TABLES.discard("tasks.model")
    assert [x.split(":")[0] for x in found] == ["results.store"]
    assert [x.split(":")[0] for x in silent_modules({"results.errors": bare})] == ["results.errors"]
