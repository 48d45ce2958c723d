"""tasks/humaneval.py: the import writes 164 loadable tasks, and its out-of-process proxy grades honest
solutions while the usual reward hacks (always-equal objects, patched pytest reports, early exits) do not
pass.
Solutions are graded by the real grader (evaluators.grading.grade.grade) in real containers; every oracle of
the import is checked by tests/evaluators/test_validate_suites.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.sandbox import Changes
from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.grading.grade import grade
from results.errors import UserError
from tasks.humaneval import MARKER, import_humaneval, read_problems
from tasks.loader import load_suite
from tests.conftest import run


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("he") / "humaneval"
    import_humaneval(out)
    return out


@pytest.fixture(scope="module")
def tasks(imported):
    return {t.id: t for t in load_suite(imported)}


def test_import_writes_164_loadable_tasks(tasks):
    assert len(tasks) == 164
    assert {(t.domain, t.difficulty, t.tags, t.evaluator.kind) for t in tasks.values()} == {
        ("coding", 2, ("humaneval",), "pytest")
    }
    problem = read_problems()[0]
    t = tasks["humaneval-000"]
    assert problem["prompt"] in t.instruction and "/workspace/solution.py" in t.instruction
    assert set(t.workspace_files) == {"solution.py"}
    assert t.workspace_files["solution.py"].decode().startswith(problem["prompt"].rstrip())
    assert b"raise NotImplementedError" in t.workspace_files["solution.py"]
    assert problem["canonical_solution"].encode() in t.solution_files["solve.sh"]
    assert problem["canonical_solution"] not in t.instruction


def test_import_is_deterministic(imported, tasks, tmp_path):
    again = {t.id: t.content_hash() for t in load_suite(import_humaneval(tmp_path / "again"))}
    assert again == {k: t.content_hash() for k, t in tasks.items()}


@pytest.mark.slow
def test_reimport_replaces_only_its_own_folder(tmp_path):
    out = tmp_path / "he"
    import_humaneval(out)
    (out / "humaneval-000" / "stale.txt").write_text("old")
    import_humaneval(out)
    assert not (out / "humaneval-000" / "stale.txt").exists() and (out / MARKER).is_file()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="was not written by"):
        import_humaneval(foreign)
    assert (foreign / "notes.txt").read_text() == "keep"


def grade_solution(task, text: str, image: str):
    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(task, Changes(files={"solution.py": text.encode()}), pool, image)

    return run(main())


def outcomes(verdict) -> dict:
    return {t.id.rsplit(".", 1)[-1]: t.outcome for t in verdict.tests}


HONEST_NOISY = """
def has_close_elements(numbers, threshold):
    print("=== 2 passed ===")  # output must not disturb the proxy
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
"""

ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __bool__(self):
        return True
def has_close_elements(numbers, threshold):
    return Anything()
"""

REPR_LIES = ALWAYS_EQUAL.replace(
    "    def __bool__", "    def __repr__(self):\n        return 'True'\n    def __bool__"
)

PATCHED_REPORTS = """
import _pytest.reports
_original = _pytest.reports.TestReport.from_item_and_call.__func__
def _always_pass(cls, item, call):
    report = _original(cls, item, call)
    report.outcome = "passed"
    return report
_pytest.reports.TestReport.from_item_and_call = classmethod(_always_pass)
def has_close_elements(numbers, threshold):
    return None  # not False: False is the canary's own wrong value for this boolean task
"""


def test_honest_solution_with_prints_is_solved(tasks, image):
    g = grade_solution(tasks["humaneval-000"], HONEST_NOISY, image)
    assert (g.reason, g.reward, g.solved) == ("pass", 1.0, True), g.detail
    assert outcomes(g) == {"test_official_check": "passed", "test_canary_first_case": "failed"}


@pytest.mark.parametrize(
    "hack",
    [
        ALWAYS_EQUAL,
        REPR_LIES,
        PATCHED_REPORTS,
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "raise SystemExit(0)\n",
        "import unittest\nraise unittest.SkipTest('x')\n",
    ],
)
def test_hacks_are_not_solved(tasks, hack, image):
    g = grade_solution(tasks["humaneval-000"], hack, image)
    assert (g.reason, g.reward, g.solved) == ("fail", 0.0, False), g.detail
    assert outcomes(g) == {"test_official_check": "failed", "test_canary_first_case": "failed"}


@pytest.mark.slow
def test_checks_that_call_the_function_by_name_use_the_candidate(tasks, image):
    # HumanEval/33's check compares candidate(x) with sort_third(x): as in the official harness, both are the
    # candidate (the prompt's own sort_third is only a docstring and returns None).
    problem = read_problems()[33]
    assert (
        grade_solution(
            tasks["humaneval-033"], problem["prompt"] + problem["canonical_solution"], image
        ).reason
        == "pass"
    )
    assert (
        grade_solution(tasks["humaneval-033"], "def sort_third(l):\n    return list(l)\n", image).reason
        == "fail"
    )
