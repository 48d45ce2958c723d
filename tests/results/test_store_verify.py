"""Stores that verify: every read of a kept object checks it against its sha256, so a run folder changed
outside harness (objects swapped, cut or removed) stops rescore, show, export and the report with one
line naming the object and the run folder, before anything is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evaluators.rescore import rescore_run
from results.errors import UserError
from results.export.atif import export_atif
from results.export.run import export_run
from results.manifest import Manifest, TaskEntry
from results.run_writer import RunStore
from results.store import OBJECTS, kept_diff, kept_files, open_run, read_object
from results.synthetic import make_attempt
from tests.helpers import CORRECT, STUB, WRONG, harness


def make_run(root: Path) -> Path:
    """A run folder of two attempts through the real store: each with kept changes (a file, a diff) and
    a kept verifier file, as an eval writes them."""
    run = root / "run"
    manifest = Manifest(
        model="test/model",
        config={"suite": "builtin", "tasks": ["t1", "t2"]},
        task_suite=[TaskEntry(id="t1", hash="a"), TaskEntry(id="t2", hash="b")],
    )
    with RunStore.create(run, manifest) as store:
        for task, body, solved in (("t1", CORRECT, True), ("t2", WRONG, False)):
            a = make_attempt(store.run_id, task, solved=solved)
            a.changes = store.keep_changes({"solution.py": STUB}, {"solution.py": body})
            a.keep_files(
                {"verifier/test-stdout.txt": f"{task}: {'1 passed' if solved else '1 failed'}\n".encode()}
            )
            store.append(a)
    return run


def object_path(run: Path, digest: str) -> Path:
    return run / OBJECTS / digest[:2] / digest


def damage(run: Path, how: str) -> Path:
    """Damage t1's kept solution.py the way `how` says; returns the damaged object's path."""
    first, second = list(open_run(run).iter_attempts())
    a, b = (
        object_path(run, first.changes.files["solution.py"]),
        object_path(run, second.changes.files["solution.py"]),
    )
    if how == "swapped":  # the two attempts' solutions trade places: verdicts would flip on rescore
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
    elif how == "truncated":
        a.write_bytes(a.read_bytes()[:7])
    else:
        a.unlink()
    return a


def test_an_intact_run_reads_back_through_the_check(tmp_path):
    run = make_run(tmp_path)
    first = next(open_run(run, verify=True).iter_attempts())
    assert kept_files(run, first.changes) == {"solution.py": CORRECT}
    assert "+    return a + b" in kept_diff(run, first)


@pytest.mark.parametrize("how", ["swapped", "truncated", "missing"])
def test_every_reader_refuses_a_damaged_object_and_writes_nothing(tmp_path, how):
    run = make_run(tmp_path)
    bad = damage(run, how)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    calls = {
        "read_object": lambda: read_object(run, bad.name),
        "rescore": lambda: asyncio.run(rescore_run(run, tmp_path / "new", log=lambda m: None)),
        "export": lambda: export_run(run, "openai"),
        "export atif": lambda: export_atif(run),
    }
    for name, call in calls.items():
        with pytest.raises(UserError) as e:
            call()
        message = str(e.value)
        assert str(bad) in message and f"run folder {run}" in message and "\n" not in message, name
    assert not (tmp_path / "new").exists()  # rescore stopped before its new run folder
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # no export file, not even a temp


@pytest.mark.slow
def test_the_cli_prints_one_line_for_a_swapped_object(tmp_path):
    """Swapped objects: rescore, show and each export stop with exit 2 and one line, no traceback."""
    run = make_run(tmp_path)
    bad = damage(run, "swapped")
    out = tmp_path / "out"
    for args in (
        ["rescore", str(run), "--out", str(out / "new")],
        ["show", str(run), "t1"],
        ["export", str(run), "--format", "openai", "--out", str(out / "x.jsonl")],
        ["export", str(run), "--format", "atif", "--out", str(out / "x.atif.json")],
        ["export", str(run), "--format", "inspect", "--out", str(out / "x.eval")],
    ):
        p = harness(*args)
        assert p.returncode == 2, (args, p.stderr[-2000:])
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.startswith(f"harness: error: {bad}: kept object does not match its sha256"), p.stderr
        assert p.stdout == "", (args, p.stdout)
    assert not out.exists()


@pytest.mark.slow
def test_show_checks_the_attempt_it_shows_not_only_its_diff(tmp_path):
    run = make_run(tmp_path)
    second = list(open_run(run).iter_attempts())[1]
    kept = object_path(run, Path(second.files[0].path).name)  # t2's kept verifier output
    kept.write_bytes(b"t2: 1 passed\n")  # a forged verifier log
    p = harness("show", str(run), "t2")
    assert p.returncode == 2 and f"{kept}: kept object does not match its sha256" in p.stderr
    assert harness("show", str(run), "t1").returncode == 0  # t1's objects are intact


def test_the_report_refuses_a_forged_kept_file(tmp_path):
    from results.report import build_report

    run = make_run(tmp_path)
    first = next(open_run(run).iter_attempts())
    kept = object_path(run, Path(first.files[0].path).name)
    kept.write_bytes(b"forged\n")
    with pytest.raises(UserError, match="kept object does not match its sha256"):
        build_report([run], tmp_path / "rep")


def test_writing_an_object_again_repairs_a_damaged_copy(tmp_path):
    """A resumed run that keeps the same bytes again does not trust a damaged object under their name."""
    run = make_run(tmp_path)
    bad = damage(run, "truncated")
    with RunStore.open(run) as store:
        assert store.put_object(CORRECT) == bad.name
    assert bad.read_bytes() == CORRECT and read_object(run, bad.name) == CORRECT
