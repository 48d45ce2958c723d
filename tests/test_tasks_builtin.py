"""The built-in suite: its size and coverage, and every task verified on this machine without Docker:
the oracle (solution/solve.sh) solves it, the untouched workspace (null agent) does not, canaries fail for both.
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tasks_localcheck import answer_matches, check_suite  # noqa: E402

from tasks.loader import DOMAINS, load_suite  # noqa: E402

TASKS = load_suite("builtin")
BY_ID = {t.id: t for t in TASKS}


@pytest.fixture(scope="module")
def local_results():
    return check_suite(TASKS)


@pytest.mark.parametrize("task_id", sorted(BY_ID))
def test_task_verified_on_host(task_id, local_results):
    assert local_results[task_id] == []


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
        assert 6 <= len(ts) <= 12, name
        assert splits["train"] >= 4 and splits["heldout"] >= 2, name
        assert len({t.instruction for t in ts}) == len(ts), f"{name}: instances must differ"


def test_evaluator_mix():
    kinds = Counter(t.evaluator.kind for t in TASKS)
    assert kinds["pytest"] > len(TASKS) / 2
    assert kinds["answer"] >= 5 and kinds["script"] >= 3


def test_some_coding_tasks_have_protected_public_tests():
    with_public = [t for t in TASKS if any(n.startswith("tests/test_") for n in t.workspace_files)]
    assert len([t for t in with_public if t.domain == "coding"]) >= 3
    for t in with_public:
        assert "tests/**" in t.evaluator.protected, t.id
        assert not set(t.workspace_files) & {f"tests/{n}" for n in t.test_files}, f"{t.id}: hidden test visible"


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


@pytest.mark.parametrize("text,mode,expected,ok", [
    ("42\n", "numeric", 42, True), ("42 lines", "numeric", 42, False), (" Lisbon \n", "normalized", "lisbon", True),
    ('["a", 1.0]', "json", ["a", 1], True), ('["a"]', "json", ["a", 1], False), ("x7", "regex", r"x\d", True),
])
def test_local_answer_comparison(text, mode, expected, ok):
    assert answer_matches(text, mode, expected, 1e-6) is ok
