"""The built-in suite: its size and coverage. Every task's oracle and null agent are graded by the real
grader in real containers in tests/evaluators/test_validate_suites.py (`suite`, slow); here, the answer
tasks (graded on
the host by evaluators.grading.grade.grade itself, no container needed) are checked the same way in seconds.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from agent.sandbox import Changes
from evaluators.grading.grade import grade
from evaluators.grading.verdict import answer_matches
from tasks.loader import load_suite
from tasks.model import DOMAINS

TASKS = load_suite("builtin")
BY_ID = {t.id: t for t in TASKS}
ANSWER_TASKS = sorted(t.id for t in TASKS if t.evaluator.kind == "answer")


def oracle_answer(task) -> bytes:
    """Runs solution/solve.sh in a copy of the workspace (this venv's python3: numpy, pandas) and returns
    the answer file it wrote."""
    with tempfile.TemporaryDirectory() as d:
        ws, sol = Path(d) / "workspace", Path(d) / "solution"
        ws.mkdir()
        for root, files in ((ws, task.workspace_files), (sol, task.solution_files)):
            for rel, data in files.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": d,
            "WORKSPACE": str(ws),
            "LC_ALL": "C",
        }
        p = subprocess.run(["bash", str(sol / "solve.sh")], cwd=ws, env=env, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        return (ws / task.evaluator.settings.answer_file).read_bytes()


@pytest.mark.parametrize("task_id", ANSWER_TASKS)
def test_answer_task_oracle_passes_the_real_grader_and_the_null_agent_does_not(task_id):
    task = BY_ID[task_id]
    answer = oracle_answer(task)
    solved = asyncio.run(grade(task, Changes(files={task.evaluator.settings.answer_file: answer}), None, ""))
    assert (solved.reason, solved.reward) == ("pass", 1.0), (answer[:200], task.evaluator)
    untouched = asyncio.run(grade(task, Changes(), None, ""))
    assert untouched.reason in ("no_answer", "wrong_answer") and untouched.reward == 0.0
    assert task.evaluator.settings.answer_file in task.instruction


def test_size_and_coverage():
    assert len(TASKS) >= 60
    assert set(Counter(t.domain for t in TASKS)) == set(DOMAINS)
    assert all(n >= 5 for n in Counter(t.domain for t in TASKS).values())
    assert set(t.difficulty for t in TASKS) == {1, 2, 3, 4, 5}


def test_easy_families_have_train_and_heldout_instances():
    families = defaultdict(list)
    for t in TASKS:
        if t.family:
            families[t.family].append(t)
    easy = [t for ts in families.values() for t in ts if t.difficulty <= 2]
    assert len(easy) >= 20
    assert len(families) >= 4
    for name, ts in families.items():
        splits = Counter(t.split for t in ts)
        assert len(ts) >= 20, name  # issue 28: a pool with a gradient, 20 instances a family
        assert splits["train"] >= 4 and splits["heldout"] >= 2, name
        assert len({t.instruction for t in ts}) == len(ts), f"{name}: instances must differ"


def test_evaluator_mix():
    # per task design: each family counts once, whatever its number of instances
    designs = {t.family or t.id: t for t in TASKS}.values()
    kinds = Counter(t.evaluator.kind for t in designs)
    assert kinds["pytest"] > len(designs) / 2
    assert kinds["answer"] >= 5 and kinds["script"] >= 3


def test_some_coding_tasks_have_protected_public_tests():
    with_public = [t for t in TASKS if any(n.startswith("tests/test_") for n in t.workspace_files)]
    assert len([t for t in with_public if t.domain == "coding"]) >= 3
    for t in with_public:
        assert "tests/**" in t.evaluator.settings.protected, t.id
        assert not set(t.workspace_files) & {f"tests/{n}" for n in t.test_files}, (
            f"{t.id}: hidden test visible"
        )


def test_instructions_say_where_the_result_goes_and_hide_the_tests():
    for t in TASKS:
        assert "/workspace" in t.instruction, t.id
        assert "canary" not in t.instruction.lower(), t.id
        for name, data in t.test_files.items():
            for line in data.decode().splitlines():
                if line.strip().startswith("assert ") and len(line.strip()) > 30:
                    assert line.strip() not in t.instruction, f"{t.id}: instruction quotes {name}"


def test_every_task_uses_the_base_image():
    # The sandbox image has python3, numpy, pandas, pytest, git, procps; no task needs its own Dockerfile.
    assert [t.id for t in TASKS if t.dockerfile] == []


@pytest.mark.parametrize(
    "text,mode,expected,tolerance,ok",
    [
        ("42\n", "numeric", 42, 1e-6, True),
        ("42 lines", "numeric", 42, 1e-6, False),
        ("1,000.5", "numeric", 1000.5, 1e-6, True),
        ("nan", "numeric", 1.0, 1e-6, False),
        # Relative tolerance for large values (|expected| > 1), absolute below 1:
        ("1009", "numeric", 1000, 0.01, True),
        ("1011", "numeric", 1000, 0.01, False),
        ("0.509", "numeric", 0.5, 0.01, True),
        ("0.52", "numeric", 0.5, 0.01, False),
        (" Lisbon \n", "normalized", "lisbon", 1e-6, True),
        ("Lis bon", "normalized", "lisbon", 1e-6, False),
        ("ok\n", "exact", "ok", 1e-6, True),
        ("ok \n", "exact", "ok", 1e-6, False),
        ('["a", 1.0]', "json", ["a", 1], 1e-6, True),
        ('["a"]', "json", ["a", 1], 1e-6, False),
        ("[1.0000001]", "json", [1], 1e-3, False),  # json is exact equality: no tolerance
        ("x7", "regex", r"x\d", 1e-6, True),
        ("x77", "regex", r"x\d", 1e-6, False),
    ],
)
def test_answer_comparison_of_the_real_grader(text, mode, expected, tolerance, ok):
    assert answer_matches(text, expected, mode, tolerance) is ok


LIST_LRU = b"""class LRUCache:
    # Right answers, O(n) get and put: the order is a list that every access scans.
    def __init__(self, capacity):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError("capacity must be an int >= 1")
        self.capacity, self._order, self._values = capacity, [], {}

    def get(self, key, default=None):
        if key not in self._values:
            return default
        self._order.remove(key)
        self._order.append(key)
        return self._values[key]

    def put(self, key, value):
        if key in self._values:
            self._order.remove(key)
        elif len(self._order) >= self.capacity:
            del self._values[self._order.pop(0)]
        self._order.append(key)
        self._values[key] = value

    def __len__(self):
        return len(self._order)

    def __contains__(self, key):
        return key in self._values

    def keys(self):
        return list(self._order)
"""


@pytest.mark.slow
def test_lru_cache_tests_fail_a_list_scan_and_pass_the_oracle_within_budget(image):
    """Every call crosses the candidate proxy, whose cost hid an O(n) scan with int keys; keys slow to compare
    show it in 15,000 calls. The tests once made 58,000 calls: over their 60 s on a busy CI runner."""
    from agent.sandbox.backends.docker.pool import DockerPool

    task = BY_ID["lru-cache"]
    oracle = task.solution_files["solve.sh"].split(b"<<'PY'\n", 1)[1].rsplit(b"PY\n", 1)[0]

    async def main():
        async with DockerPool(warm=0) as pool:
            return [
                await grade(task, Changes(files={"solution.py": f}), pool, image) for f in (oracle, LIST_LRU)
            ]

    right, slow = asyncio.run(main())
    assert (right.reason, right.reward) == ("pass", 1.0), right.detail
    assert right.seconds < task.verifier_timeout_sec / 4, right.seconds
    failed = [t.id for t in slow.tests if t.outcome == "failed" and "canary" not in t.id]
    assert slow.reason == "fail" and failed == ["tests.test_lru.test_large_cache_is_fast"], slow.tests
