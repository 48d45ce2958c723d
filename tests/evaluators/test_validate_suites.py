"""`tasks validate` on whole suites in real containers: the quality gate CI enforces."""

import asyncio

import pytest

from evaluators.validate import leaked_lines, validate
from tasks.loader import load_suite
from tests.helpers import make_task


def test_leak_check_finds_quoted_hidden_tests():
    task = make_task()
    assert leaked_lines(task) == []
    task.instruction += (
        "\nclass TestMore:\n    def test_big(self):\n        assert add(10**12, 1) == 10**12 + 1"
    )
    assert leaked_lines(task) == ["assert add(10**12, 1) == 10**12 + 1"]


def test_the_family_pool_has_a_gradient():
    """Issue 28: at least 12 generated families, difficulty 1 to 4, across the five domains, each with
    at least 20 instances and both splits (loading them checks every placeholder is filled)."""
    from tasks.model import DOMAINS

    tasks = [t for t in load_suite("builtin") if t.family]
    families: dict[str, list] = {}
    for t in tasks:
        families.setdefault(t.family, []).append(t)
    assert len(families) >= 12
    assert {t.difficulty for t in tasks} == {1, 2, 3, 4} and {t.domain for t in tasks} == set(DOMAINS)
    for name, group in families.items():
        assert len(group) >= 20 and {t.split for t in group} == {"train", "heldout"}, name


def suite_sample(tasks):
    """Every task outside a family, and of each family its first train and first held-out instance:
    the instances differ only in their parameters (`harness tasks validate tasks/builtin/families`
    checks all 280; kept out of the test suite for its time)."""
    picked, seen = [], set()
    for t in tasks:
        if not t.family or (t.family, t.split) not in seen:
            picked.append(t)
            seen.add((t.family, t.split))
    return picked


@pytest.mark.slow
@pytest.mark.suite
def test_builtin_suite_is_valid():
    tasks = load_suite("builtin")
    assert len(tasks) >= 60
    rows = asyncio.run(validate(suite_sample(tasks), repeats=3, concurrency=4))
    bad = [(r.task, r.problems) for r in rows if not r.ok]
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.suite
def test_humaneval_import_is_valid(tmp_path):
    from tasks.humaneval import import_humaneval

    folder = import_humaneval(tmp_path / "humaneval")
    tasks = load_suite(str(folder))
    assert len(tasks) == 164
    rows = asyncio.run(validate(tasks, repeats=1, concurrency=4))
    bad = [(r.task, r.problems) for r in rows if not r.ok]
    assert not bad, bad
