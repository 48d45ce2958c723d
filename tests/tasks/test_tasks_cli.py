"""`harness tasks list | import | validate` through the real CLI entry point."""

from __future__ import annotations

import re

import harness
from tests.helpers import write_task


def run(argv, capsys):
    rc = harness.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_builtin_filters_and_columns(capsys):
    rc, out, _ = run(["tasks", "list", "builtin", "--domain", "data", "--difficulty", "1"], capsys)
    lines = out.splitlines()
    assert rc == 0
    assert lines[0].split() == ["id", "domain", "difficulty", "split", "evaluator"]
    rows = [line.split() for line in lines[1:-1]]
    assert rows and all(r[1] == "data" and r[2] == "1" for r in rows)
    assert ["count-lines-01", "data", "1", "train", "answer"] in rows
    assert lines[-1] == f"{len(rows)} tasks"


def test_list_split_and_easy_suite(capsys):
    rc, out, _ = run(["tasks", "list", "builtin:easy", "--split", "heldout"], capsys)
    rows = [line.split() for line in out.splitlines()[1:-1]]
    assert rc == 0 and rows and all(r[3] == "heldout" and r[2] in ("1", "2") for r in rows)


def test_list_bad_input_is_a_one_line_error(capsys, tmp_path):
    rc, _, err = run(["tasks", "list", str(tmp_path / "missing")], capsys)
    assert rc == 2 and "no such suite" in err and err.count("\n") == 1
    rc, _, err = run(["tasks", "list", "--difficulty", "9"], capsys)
    assert rc == 2 and "difficulty filter" in err


def test_import_humaneval_to_out(capsys, tmp_path):
    rc, out, _ = run(["tasks", "import", "humaneval", "--out", str(tmp_path / "he")], capsys)
    assert rc == 0 and str(tmp_path / "he") in out
    assert len([p for p in (tmp_path / "he").iterdir() if p.is_dir()]) == 164
    rc, out, _ = run(["tasks", "list", str(tmp_path / "he")], capsys)
    assert rc == 0 and out.splitlines()[-1] == "164 tasks"


def test_validate_grades_a_suite_for_real(capsys, tmp_path, image):
    """`tasks validate` on a suite written here: one good task, one whose oracle is wrong (real
    containers)."""
    suite = tmp_path / "suite"
    write_task(suite, "good")
    write_task(suite, "broken", files={"solution/solve.sh": "echo not-ok > answer.txt\n"})
    rc, out, _ = run(["tasks", "validate", str(suite), "--repeats", "1", "--concurrency", "2"], capsys)
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:-1]}
    assert rc == 1, out
    assert set(rows) == {"good", "broken"}
    assert rows["good"][1:5] == ["1/1", "not", "solved", "no"] and len(rows["good"]) == 7, out  # no problems
    assert re.fullmatch(r"\d+/\d+s", rows["good"][6]), out  # the oracle's tests / their budget
    assert rows["broken"][1:5] == ["0/1", "not", "solved", "no"], out
    assert rows["broken"][7:] == ["oracle", "not", "solved:", "wrong_answer"], out
    assert out.splitlines()[-1].startswith("1/2 tasks valid")
