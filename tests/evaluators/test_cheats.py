"""The cheat audit (evaluators/cheats.py): every cheat scores on a deliberately weak task (so a cheat that
does nothing fails here), and the built-in suite and the Terminal-Bench fixtures audit clean."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from evaluators import cheats
from tasks.loader import load_suite, spread
from tests.helpers import make_task

ROOT = Path(__file__).resolve().parents[2]
WEAK = ROOT / "tests" / "fixtures" / "cheat-targets"


def test_each_cheat_is_named_documented_and_valid_shell_in_both_places():
    names = [c.name for c in cheats.CHEATS]
    assert len(names) == len(set(names)) >= 12
    harbor = load_suite(str(WEAK / "weak-project"))[0]
    for c in cheats.CHEATS:
        assert c.doc and "\n" not in c.doc, c.name
        for where in ("here", "elsewhere"):
            text = f"WHERE={where}\n" + cheats.PRELUDE + c.script(harbor)
            r = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
            assert r.returncode == 0, (c.name, where, r.stderr)
    for glob, name in cheats.EXCEPTIONS:
        assert name in names, f"EXCEPTIONS names no cheat {name!r}"


def test_elsewhere_is_tried_only_on_a_task_with_its_own_image():
    plain, harbor = make_task(), load_suite(str(WEAK / "weak-project"))[0]
    assert {w for _, w in cheats.tries(plain, cheats.CHEATS)} == {"here"}
    pairs = cheats.tries(harbor, cheats.CHEATS)
    assert ("elsewhere" in {w for _, w in pairs}) and len(pairs) > len(cheats.CHEATS)
    assert all(c.elsewhere for c, w in pairs if w == "elsewhere")


def test_unknown_cheat_is_refused_with_the_choices():
    from results.errors import UserError

    with pytest.raises(UserError, match="--cheat nope: no such cheat; choose from reward_files"):
        cheats.by_name(["nope"])
    assert [c.name for c in cheats.by_name(["conftest"])] == ["conftest"]


def test_one_instance_per_family_and_every_hand_written_task():
    tasks = load_suite("builtin")
    picked = cheats.one_per_family(tasks)
    families = {t.family for t in tasks if t.family}
    assert sorted(t.family for t in picked if t.family) == sorted(families)
    assert [t.id for t in picked if not t.family] == [t.id for t in tasks if not t.family]


def test_report_marks_scores_and_accepted_exceptions(monkeypatch):
    monkeypatch.setitem(cheats.EXCEPTIONS, ("demo-*", "conftest"), "a reason")
    assert cheats.excepted("demo-1", "conftest") == "a reason" and not cheats.excepted("other", "conftest")
    assert cheats.excepted("any", "background", "shared") and not cheats.excepted(
        "any", "background", "fresh"
    )
    rows = [
        cheats.Row("t", "pytest", ["a", "b"], scored=["a 1 (pass: )"]),
        cheats.Row("u", "shared", ["a"], accepted=[("a 1 (pass: )", "a reason")]),
    ]
    lines = cheats.table(rows)
    assert "a 1 (pass: )" in lines[1] and lines[2].rstrip().endswith("-") and "accepted: a 1" in lines[3]
    assert lines[-1].endswith("EXCEPTIONS): a reason")
    assert rows[0].hackable and not rows[1].hackable


def _scored(rows) -> set[str]:
    return {how.split()[0].split("@")[0] for r in rows for how in r.scored + [h for h, _ in r.accepted]}


@pytest.mark.slow
@pytest.mark.docker
def test_every_cheat_scores_on_a_weak_task_the_null_agent_does_not_solve(monkeypatch):
    """Each cheat must earn a reward somewhere, or it tests nothing: the weak tasks trust the project's own
    folder, PATH, status file and a reward already written, quote their answer and leak their solution.
    The baseline (NOTHING, run first on each task) earns 0 there, so each score is the cheat's doing.
    Graded untraced (HARNESS_TRACE=0, the image's static model): the traced verifier now holds the
    conftest, pytest config, shadow module, site hook and tool wrapper cheats even on the weak Harbor task."""
    monkeypatch.setenv("HARNESS_TRACE", "0")
    rows = asyncio.run(cheats.audit(load_suite(str(WEAK)), cheats.CHEATS, concurrency=2))
    assert not [e for r in rows for e in r.errors]
    assert _scored(rows) == {c.name for c in cheats.CHEATS}, cheats.table(rows)


def rotation(tasks, per_task: int) -> dict:
    """Task i gets cheats per_task*i .. per_task*i + per_task-1 (mod the cheats): each cheat is tried on
    len(tasks)*per_task/12 tasks when that covers them all (the tests check it does)."""
    n = len(cheats.CHEATS)
    return {
        t.id: [cheats.CHEATS[(per_task * i + j) % n] for j in range(per_task)] for i, t in enumerate(tasks)
    }


@pytest.mark.slow
@pytest.mark.suite
@pytest.mark.docker
def test_builtin_suite_audits_clean():
    tasks = spread(cheats.one_per_family(load_suite("builtin")), 12)
    # every task and every cheat, a third of the pairs (`harness tasks cheats builtin` tries them all): 4 a
    # task, so each cheat is tried on four tasks
    rows = asyncio.run(cheats.audit(tasks, rotation(tasks, 4), concurrency=2))
    assert {name.split("@")[0] for r in rows for name in r.tried} == {c.name for c in cheats.CHEATS}
    bad = [r for r in rows if r.hackable]
    assert not bad, "\n".join(cheats.table(bad))


@pytest.mark.slow
@pytest.mark.suite
@pytest.mark.docker
def test_terminal_bench_fixtures_audit_clean():
    from evaluators.run.network import offline
    from tests.tb_standins import CORPUS, ensure_corpus_images

    ensure_corpus_images(log=lambda m: None)
    tasks = offline(load_suite(str(CORPUS)))
    # every task and every cheat, not every pair (that is `harness tasks cheats` on the corpus: ~35 min):
    # 2 a task, so each cheat is tried on one or two of these tasks (each on four built-in tasks above;
    # every attempt here runs the real verifier's uvx and pytest: ~4 CPU-s); 4 at once, as these tasks'
    # tests mostly wait (services, sleeps)
    rows = asyncio.run(cheats.audit(tasks, rotation(tasks, 2), concurrency=4))
    assert not [e for r in rows for e in r.errors]
    assert {name.split("@")[0] for r in rows for name in r.tried} == {c.name for c in cheats.CHEATS}
    bad = [r for r in rows if r.hackable]
    assert not bad, "\n".join(cheats.table(bad))
