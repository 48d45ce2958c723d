"""Test strength by mutation (evaluators/mutants.py): the operators' mutants on small sources, the rule that
equivalent, invalid and timed-out mutants are counted apart, and weak vs strong tests through the grader."""

import asyncio
from dataclasses import replace

import pytest

from evaluators import mutants
from evaluators.mutants import MutationRow, draw
from evaluators.mutation_ops import Mutant, language, mutants_of, python_mutants, shell_mutants
from tests.helpers import make_task


def changes(muts: list[Mutant]) -> set[tuple[str, int, str]]:
    return {(m.operator, m.line, m.what) for m in muts}


def test_python_operators_make_the_standard_mutants():
    src = 'def f(a, b):\n    """Doc."""\n    if a < 10 and not b:\n        return a + 1\n    return "x"\n'
    got = changes(python_mutants("f.py", src))
    assert got == {
        ("delete", 3, "if a < 10 and not b: ... -> pass"),
        ("logic", 3, "a < 10 and not b -> (a < 10 or not b)"),
        ("comparison", 3, "a < 10 -> (a <= 10)"),
        ("boundary", 3, "10 -> (11)"),
        ("boundary", 3, "10 -> (9)"),
        ("logic", 3, "not b -> (b)"),
        ("delete", 4, "return a + 1 -> pass"),
        ("return", 4, "a + 1 -> None"),
        ("arithmetic", 4, "a + 1 -> (a - 1)"),
        ("constant", 4, "1 -> (2)"),
        ("delete", 5, 'return "x" -> pass'),
        ("return", 5, '"x" -> None'),
        ("constant", 5, "\"x\" -> ''"),
    }  # the docstring is left alone
    for m in python_mutants("f.py", src):
        compile(m.source, "f.py", "exec")  # each a whole, valid program
    assert "return (a - 1)" in next(
        m.source for m in python_mutants("f.py", src) if m.operator == "arithmetic"
    )


def test_shell_operators_leave_comments_structure_and_heredocs_alone():
    src = (
        '#!/bin/bash\n# count 5\nn=$(( $1 + 2 ))\nif [ "$n" -gt 3 ]; then\n  echo big\nfi\n'
        "cat > out <<EOF\nkeep 7\nEOF\nexit 0\n"
    )
    got = changes(shell_mutants("s.sh", src))
    assert got == {
        ("delete", 3, "n=$(( $1 + 2 )) -> :"),
        ("arithmetic", 3, "+ -> -"),
        ("boundary", 3, "2 -> 3"),
        ("boundary", 3, "2 -> 1"),
        ("comparison", 4, "-gt -> -ge"),
        ("boundary", 4, "3 -> 4"),
        ("boundary", 4, "3 -> 2"),
        ("delete", 5, "echo big -> :"),
        ("constant", 10, "0 -> 1"),
        ("return", 10, "0 -> 1"),
        ("delete", 10, "exit 0 -> :"),
    }
    # the same text twice (exit 0 -> 1 by two operators) is one mutant
    assert sum(m.line == 10 and "exit 1" in m.source for m in mutants_of({"s.sh": src.encode()})) == 1


def test_equivalent_and_invalid_mutants_are_decided_without_running():
    folded = python_mutants("e.py", "x = 2 + 0\n")  # 2 - 0 folds to the same constant: same bytecode
    assert [m.outcome for m in folded if m.operator == "arithmetic"] == ["equivalent"]
    # deleting the binding a nonlocal needs does not compile
    src = "def f():\n    x = 1\n    def g():\n        nonlocal x\n        x = 2\n    return g\n"
    invalid = [m for m in python_mutants("n.py", src) if m.what == "x = 1 -> pass"]
    assert [m.outcome for m in invalid] == ["invalid"] and "nonlocal" in invalid[0].detail
    assert {m.outcome for m in shell_mutants("b.sh", "echo $(( 1 + 2 ))\n")} == {""}  # all to be run
    assert language("run", b"#!/usr/bin/env bash\necho\n") == "shell"
    assert language("data.csv", b"a,b\n") == ""


def test_the_kill_rate_counts_equivalent_invalid_and_timeout_apart():
    row = MutationRow("t", mutants=[Mutant("f.py", "delete", 1, "", "", outcome=o) for o in (
        "killed", "killed", "killed", "survived", "equivalent", "invalid", "timeout", "timeout",
    )])  # fmt: skip
    assert row.kill_rate == 0.75
    line = mutants.table([row])[1].split()
    assert line[2:9] == ["4", "3", "1", "1", "1", "2", "0.75"]
    assert (
        MutationRow("u", mutants=[Mutant("f.py", "delete", 1, "", "", outcome="timeout")]).kill_rate is None
    )


def test_the_draw_is_seeded_per_task():
    pool = [Mutant("f.py", "delete", i, str(i), str(i)) for i in range(50)]
    first = [m.line for m in draw("task-a", pool, 10)]
    assert first == [m.line for m in draw("task-a", pool, 10)] and len(set(first)) == 10
    assert first != [m.line for m in draw("task-b", pool, 10)]
    assert draw("task-a", pool[:3], 10) == pool[:3]


def test_one_instance_stands_for_its_family_and_answer_tasks_are_out():
    from tasks.model import EvaluatorConfig

    tasks = [
        replace(make_task(), id="fam-02", family="fam"),
        replace(make_task(), id="fam-01", family="fam"),
        replace(make_task(), id="solo"),
        replace(make_task(), id="quiz", evaluator=EvaluatorConfig(kind="answer")),
    ]
    assert [t.id for t in mutants.representatives(tasks)] == ["fam-01", "solo"]


# A grading function whose oracle writes solution.py; tests that check one value (weak) or every boundary.
GRADE = """def grade(score):
    if score >= 90:
        return "A"
    if score >= 50:
        return "pass"
    return "fail"
"""
COUNT = """def count(n):
    i = 0
    while i < n:
        i += 1
    return i
"""
WEAK_TESTS = (
    'from solution import grade\n\n\ndef test_grade():\n    assert grade(100) in ("A", "pass", "fail")\n'
)
STRONG_TESTS = """from solution import grade


def test_grade():
    assert [grade(s) for s in (100, 90, 89, 50, 49, 0)] == ["A", "A", "pass", "pass", "fail", "fail"]
"""
COUNT_TESTS = """from solution import count


def test_count():
    assert [count(n) for n in (0, 1, 3)] == [0, 1, 3]
"""


def fixture(task_id: str, solution: str, tests: str):
    solve = f"cat > solution.py <<'PY'\n{solution}PY\n".encode()
    files = {f"test_{task_id}.py": tests.encode()}
    return replace(make_task(), id=task_id, solution_files={"solve.sh": solve}, test_files=files)


@pytest.mark.slow
def test_weak_tests_let_mutants_survive_and_strong_ones_kill_them(monkeypatch):
    """Through the real grader: one value checked loosely kills few mutants; every boundary kills them all;
    a mutant that loops forever (i -= 1, a deleted i += 1) times out and is counted apart."""
    monkeypatch.setattr(mutants, "MIN_BUDGET", 5.0)  # a looping mutant's budget: 5 s, not 20
    tasks = [
        fixture("weak", GRADE, WEAK_TESTS),
        fixture("strong", GRADE, STRONG_TESTS),
        fixture("loop", COUNT, COUNT_TESTS),
    ]
    rows = {r.task: r for r in asyncio.run(mutants.mutate(tasks, n=30, concurrency=2, log=lambda m: None))}
    assert rows["weak"].kill_rate < 0.5 and rows["weak"].count("survived") >= 5, mutants.table(rows.values())
    assert rows["strong"].kill_rate == 1.0, mutants.survivors(rows.values())
    loop = rows["loop"]
    assert loop.count("timeout") == 2 and loop.kill_rate == 1.0, [(m.what, m.outcome) for m in loop.mutants]
    assert {m.what for m in loop.mutants if m.outcome == "timeout"} == {"i += 1 -> i -= 1", "i += 1 -> pass"}


def test_validate_hands_its_valid_tasks_to_the_mutation_run(monkeypatch):
    """`harness tasks validate --mutants N -v`: the mutation table follows, for the tasks that validated."""
    from evaluators import validate
    from harness import build_parser

    args = build_parser().parse_args(["tasks", "validate", "builtin", "--mutants", "3", "-v"])
    assert args.mutants == 3 and args.verbose and args.mutants_out is None
    tasks = [replace(make_task(), id="good"), replace(make_task(), id="bad")]
    monkeypatch.setattr("tasks.loader.load_suite", lambda *a, **k: tasks)

    async def rows(tasks, **kw):
        return [validate.Row("good"), validate.Row("bad", problems=["oracle not solved"])]

    monkeypatch.setattr(validate, "validate", rows)
    handed = []
    monkeypatch.setattr(mutants, "main", lambda tasks, args: handed.append([t.id for t in tasks]))
    assert validate.main(args) == 1 and handed == [["good"]]
    args.mutants = 0
    assert validate.main(args) == 1 and handed == [["good"]]  # without --mutants: no mutation run
