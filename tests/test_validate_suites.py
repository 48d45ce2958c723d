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


@pytest.mark.slow
@pytest.mark.suite
def test_builtin_suite_is_valid():
    tasks = load_suite("builtin")
    assert len(tasks) >= 60
    rows = asyncio.run(validate(tasks, repeats=3, concurrency=4))
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
