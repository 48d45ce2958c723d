"""The README's table "to add X, touch these files", checked row by row: each test copies the product into a
temporary git tree, makes the change its row names (new files, and lines changed in existing ones), checks
that the tree's diff is exactly that row, and runs the new thing through `harness` from that tree."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import GOOD_TOML, ROOT, SUBMIT, write_task

PRODUCT = ("harness.py", "pyproject.toml", "agent", "evaluators", "tasks", "lora", "results")


def table() -> dict[str, dict]:
    """The README's rows: what is added -> {"new": [paths], "lines": {path: n}, "test": name}."""
    text = (ROOT / "README.md").read_text()
    body = text[text.index("| to add |") :].split("\n\n")[0]
    rows = {}
    for line in body.splitlines()[2:]:
        what, touch, test = [c.strip() for c in line.strip("|").split("|")]
        new = re.findall(r"`([^`]+)` \(new\)", touch)
        lines = {path: int(n) for n, path in re.findall(r"(\d+) lines? in `([^`]+)`", touch)}
        rows[what] = {"new": new, "lines": lines, "test": test.strip("`")}
    return rows


def product_tree(dest: Path) -> Path:
    """The tracked product files (no tests, no built-in tasks) in a fresh git repository at `dest`."""
    listed = subprocess.run(
        ["git", "ls-files", *PRODUCT], cwd=ROOT, capture_output=True, text=True, check=True
    )
    for rel in listed.stdout.splitlines():
        if rel.startswith("tasks/builtin/"):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes((ROOT / rel).read_bytes())
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "base")
    return dest


def git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def diff_of(tree: Path) -> dict:
    """What the change touched: {"new": [paths], "lines": {path: lines changed}} (a changed line counts
    once)."""
    git(tree, "add", "-A")
    new = git(tree, "diff", "--cached", "--name-only", "--diff-filter=A").split()
    lines = {}
    for row in git(tree, "diff", "--cached", "--numstat", "--diff-filter=M").splitlines():
        added, removed, path = row.split("\t")
        lines[path] = max(int(added), int(removed))
    return {"new": sorted(new), "lines": lines}


def expect(row: str, name: str) -> dict:
    want = table()[row]
    return {"new": sorted(p.replace("NAME", name) for p in want["new"]), "lines": want["lines"]}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} is not there once"
    path.write_text(text.replace(old, new))


def harness_in(tree: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(tree / "harness.py"), *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_table_names_a_test_for_every_row():
    rows = table()
    assert set(rows) == {
        "an evaluator kind",
        "a model backend",
        "a sandbox backend",
        "a run setting",
        "a task domain",
    }
    here = Path(__file__).read_text()
    for what, row in rows.items():
        name = row["test"].split("::")[-1]
        assert f"def {name}(" in here, f"{what}: {row['test']} does not exist"


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()]


def replies(tmp_path: Path) -> Path:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps({"*": ["```bash\necho ok > answer.txt\n```", SUBMIT]}))
    return path


@pytest.mark.slow
def test_add_a_run_setting(image, tmp_path):
    tree = product_tree(tmp_path / "tree")
    edit(
        tree / "evaluators/run/config.py",
        "    samples: int = field(",
        '    note: Optional[str] = field(default=None, metadata={"help": "a note kept with the run"})\n'
        "    samples: int = field(",
    )
    assert diff_of(tree) == expect("a run setting", "note")
    assert "a note kept with the run" in harness_in(tree, "eval", "--help").stdout
    write_task(tmp_path / "suite", "t1", toml=GOOD_TOML)
    run = tmp_path / "run"
    proc = harness_in(
        tree,
        "eval",
        "--tasks",
        str(tmp_path / "suite"),
        "--model",
        f"replay:{replies(tmp_path)}",
        "--note",
        "first try",
        "--out",
        str(run),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((run / "manifest.json").read_text())["config"]["note"] == "first try"


@pytest.mark.slow
def test_add_a_task_domain(image, tmp_path):
    tree = product_tree(tmp_path / "tree")
    edit(tree / "tasks/model.py", '"documents", "science")', '"documents", "science", "security")')
    assert diff_of(tree) == expect("a task domain", "security")
    suite = tmp_path / "suite"
    write_task(suite, "t1", toml=GOOD_TOML.replace("difficulty = 1", 'difficulty = 1\ndomain = "security"'))
    write_task(suite, "t2", toml=GOOD_TOML)
    listed = harness_in(tree, "tasks", "list", str(suite), "--domain", "security")
    assert listed.returncode == 0, listed.stderr
    assert "t1" in listed.stdout and "t2" not in listed.stdout
    run = tmp_path / "run"
    proc = harness_in(
        tree,
        "eval",
        "--tasks",
        str(suite),
        "--domain",
        "security",
        "--model",
        f"replay:{replies(tmp_path)}",
        "--out",
        str(run),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = records(run)
    assert [(r["task_id"], r["solved"]) for r in recs] == [("t1", True)]
    # the untouched product refuses the domain, with the field and the fix
    before = subprocess.run(
        [sys.executable, str(ROOT / "harness.py"), "tasks", "list", str(suite)],
        capture_output=True,
        text=True,
    )
    assert before.returncode == 2 and "[metadata] domain must be one of" in before.stderr


@pytest.mark.slow
def test_add_an_evaluator_kind(image, tmp_path):
    from tests.evaluators.grading.test_docs_kind import example_kind
    from tests.test_plugins import TOML

    tree = product_tree(tmp_path / "tree")
    (tree / "evaluators/grading/regex_kind.py").write_text(example_kind())  # docs/extending.md's kind
    edit(
        tree / "tasks/kinds.py",
        'register("script", "evaluators.grading.script_kind:KIND")\n',
        'register("script", "evaluators.grading.script_kind:KIND")\n'
        'register("regex", "evaluators.grading.regex_kind:KIND")\n',
    )
    assert diff_of(tree) == expect("an evaluator kind", "regex")
    suite = tmp_path / "suite"
    write_task(suite, "t1", toml=TOML, files={"solution/solve.sh": "printf 'print(42)\\n' > main.py\n"})
    (tmp_path / "replies.json").write_text(
        json.dumps({"*": ["```bash\nprintf 'print(42)\\n' > main.py\n```", SUBMIT]})
    )
    run = tmp_path / "run"
    proc = harness_in(
        tree,
        "eval",
        "--tasks",
        str(suite),
        "--model",
        f"replay:{tmp_path / 'replies.json'}",
        "--out",
        str(run),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = records(run)
    assert (rec["solved"], rec["reason"]) == (True, "pass"), rec["detail"]


MODEL = '''"""A model that writes its target to answer.txt, then submits."""

from agent.models.base import Completion


class Fixed:
    supports_tools, context_window = False, 8192

    def __init__(self, name, answer, turns=0):
        self.name, self.answer, self.turns = name, answer, turns

    def for_task(self, task_id, sample):
        return Fixed(self.name, self.answer)

    async def complete(self, messages, tools=None, n=1, temperature=0.0, max_tokens=512, seed=None):
        self.turns += 1
        write = f"```bash\\necho {self.answer} > answer.txt\\n```"
        reply = write if self.turns == 1 else "Done.\\n```bash\\nsubmit\\n```"
        return [Completion(content=reply, prompt_tokens=10, completion_tokens=10)] * n

    def count_tokens(self, messages):
        return 10


def from_spec(target, spec, options):
    return Fixed(spec, target)
'''


@pytest.mark.slow
def test_add_a_model_backend(image, tmp_path):
    tree = product_tree(tmp_path / "tree")
    (tree / "agent/models/fixed.py").write_text(MODEL)
    edit(
        tree / "agent/models/__init__.py",
        'register("replay", "agent.models.replay:from_spec", set())\n',
        'register("replay", "agent.models.replay:from_spec", set())\n'
        'register("fixed", "agent.models.fixed:from_spec", set())\n',
    )
    assert diff_of(tree) == expect("a model backend", "fixed")
    write_task(tmp_path / "suite", "t1", toml=GOOD_TOML)
    run = tmp_path / "run"
    proc = harness_in(
        tree, "eval", "--tasks", str(tmp_path / "suite"), "--model", "fixed:ok", "--out", str(run)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = records(run)
    assert rec["model"] == "fixed:ok" and rec["solved"], rec["detail"]


BACKEND = '''"""A sandbox backend of one file: the Docker engine's hardened containers (the docker backend's
pool), with fewer capabilities: no batch grading, no Harbor, no cluster."""

from agent.sandbox.registry import Backend


def _pool(options):
    from agent.sandbox.backends.docker.pool import DockerPool

    return DockerPool


def _prune(options, orphans_only):
    from agent.sandbox.backends.docker.cleanup import prune

    return f"removed {prune(orphans_only=orphans_only)} containers"


BACKEND = Backend("mine", make_pool=_pool, capabilities=frozenset({"own_images", "local"}), clean=_prune)
'''


@pytest.mark.slow
def test_add_a_sandbox_backend(image, tmp_path):
    tree = product_tree(tmp_path / "tree")
    (tree / "agent/sandbox/backends/mine").mkdir()
    (tree / "agent/sandbox/backends/mine/__init__.py").write_text(BACKEND)
    edit(
        tree / "agent/sandbox/registry.py",
        'register("docker", "agent.sandbox.backends.docker:BACKEND")\n',
        'register("docker", "agent.sandbox.backends.docker:BACKEND")\n'
        'register("mine", "agent.sandbox.backends.mine:BACKEND")\n',
    )
    assert diff_of(tree) == expect("a sandbox backend", "mine")
    write_task(tmp_path / "suite", "t1", toml=GOOD_TOML)
    run = tmp_path / "run"
    args = ("eval", "--tasks", str(tmp_path / "suite"), "--model", f"replay:{replies(tmp_path)}")
    proc = harness_in(tree, *args, "--sandbox", "mine", "--out", str(run))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = records(run)
    assert rec["solved"], rec["detail"]
    assert json.loads((run / "manifest.json").read_text())["config"]["sandbox"] == "mine"
    # what it lacks is asked, not assumed: batch grading is refused before anything runs
    refused = harness_in(
        tree, *args, "--sandbox", "mine", "--batch-grading", "2", "--out", str(tmp_path / "r2")
    )
    assert refused.returncode == 2 and "needs a sandbox backend with batch_grading" in refused.stderr
    pruned = harness_in(tree, "sandbox", "prune", "--orphans", "--sandbox", "mine")  # and its own prune runs
    assert pruned.returncode == 0 and "mine: removed" in pruned.stdout, pruned.stderr
