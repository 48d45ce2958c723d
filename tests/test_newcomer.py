"""A new user's first hour, as they meet it: every --help page fits 80 columns, and the commands the
harness prints (resume, report) run when pasted into a shell whose PATH has no venv on it."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from results.commandline import invocation
from tests.helpers import GOOD_TOML, ROOT, SUBMIT, signals_as_in_a_shell, write_task

CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a login shell's, no venv


def all_parsers(parser: argparse.ArgumentParser, name: str = "harness"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from all_parsers(p, f"{name} {sub}")


def test_every_help_page_fits_80_columns(monkeypatch):
    from harness import build_parser

    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal must not widen the pages past 80
    pages = dict(all_parsers(build_parser()))
    assert len(pages) > 15 and "harness tasks validate" in pages
    wide = {
        name: line for name, p in pages.items() for line in p.format_help().splitlines() if len(line) > 80
    }
    assert not wide, wide


def test_a_long_example_folds_into_one_pastable_command():
    from results.commandline import _fold_example

    line = "  harness eval --model openai/gpt-4o-mini --tasks builtin --samples 5 --concurrency 8 --limit 20"
    folded = _fold_example(line + "  # twenty tasks", 80)
    assert all(len(x) <= 80 for x in folded) and folded[0] == "  # twenty tasks"
    joined = " ".join(x.rstrip(" \\").strip() for x in folded[1:])
    assert joined == line.strip()


def test_the_invocation_is_the_venvs_entry_point_unless_harness_on_path_is_this_program(
    tmp_path, monkeypatch
):
    venv = tmp_path / "v" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    entry = venv / "harness"
    entry.write_text("#!/bin/sh\n")
    entry.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert invocation("harness.py", str(venv / "python")) == "v/bin/harness"  # `python harness.py`
    assert invocation(str(entry), str(venv / "python")) == "v/bin/harness"  # the entry point, not on PATH
    monkeypatch.setenv("PATH", f"{venv}:/usr/bin:/bin")
    assert invocation(str(entry), str(venv / "python")) == "harness"  # activated: the short name works
    entry.unlink()  # no entry point installed: the interpreter and the script
    assert invocation("harness.py", str(venv / "python")) == "v/bin/python ./harness.py"


@pytest.mark.slow
def test_the_printed_resume_command_runs_from_a_shell_without_the_venv(image, tmp_path):
    """Ctrl-C an eval started as `make demo` starts it (the venv's python, harness.py), paste the command it
    prints into a clean-PATH shell, and the run finishes."""
    suite = tmp_path / "suite"
    for name in ("t1", "t2"):
        write_task(suite, name, toml=GOOD_TOML)
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps({"*": ["```bash\nsleep 6; echo ok > answer.txt\n```", SUBMIT]}))
    run = tmp_path / "run"
    cmd = [".venv/bin/python", "harness.py", "eval", "--model", f"replay:{replies}", "--tasks", str(suite)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*cmd, "--concurrency", "1", "--out", str(run)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=signals_as_in_a_shell,
    )
    deadline = time.monotonic() + 120
    while not (run / "manifest.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    printed = re.search(r"resume with:\n\s+(.+)", err)
    assert printed, err[-2000:]
    line = printed.group(1).strip()
    assert line.startswith(".venv/bin/harness "), line  # not `python harness.py`: the system python
    clean = {"PATH": CLEAN_PATH, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    resumed = subprocess.run(
        ["bash", "-c", line], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    recs = [json.loads(x) for x in (run / "attempts.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in recs) == ["t1", "t2"] and all(r["solved"] for r in recs)
    report = re.search(r"plots and each attempt's steps:\n\s+(.+)", resumed.stdout)
    assert report, resumed.stdout[-2000:]
    shown = subprocess.run(
        ["bash", "-c", report.group(1).strip()], cwd=ROOT, env=clean, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert (run / "report.html").is_file() and "report.html" in shown.stdout


def small_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    return repo


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [".venv/bin/harness", "run", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_apply_without_verify_refuses_in_one_line_and_touches_nothing(tmp_path):
    repo = small_repo(tmp_path)
    proc = run_cli("--model", "replay:/nonexistent.json", "--workspace", str(repo), "fix add", "--apply")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--verify" in proc.stderr and "--no-verify" in proc.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


@pytest.mark.slow
def test_run_shows_its_steps_and_verify_finds_python(image, tmp_path):
    """The README's `harness run ... --verify "python -m pytest -q" --apply`, with the fix scripted by a
    replay model: each step is printed as it runs, `python` is found in the verify sandbox (the image has
    only python3), the check passes and the patch is applied."""
    repo = small_repo(tmp_path)
    script = tmp_path / "fix.json"
    fix = "sed -i 's/a - b/a + b/' calc.py && echo FIXED"
    script.write_text(json.dumps({"*": [f"Fix it.\n```bash\n{fix}\n```", SUBMIT]}))
    proc = run_cli(
        "--model", f"replay:{script}", "--workspace", str(repo), "fix add",
        "--verify", "python -m pytest -q", "--apply",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"step 1: $ {fix}  -> exit 0" in proc.stderr
    assert "verify: python -m pytest -q -> exit 0" in proc.stderr and "1 passed" in proc.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_the_demo_selection_covers_every_domain_and_three_difficulties():
    from tasks.loader import DEMO, load_suite
    from tasks.model import DOMAINS

    tasks = load_suite("builtin:demo")
    assert [t.id for t in tasks] == list(DEMO)
    assert {t.domain for t in tasks} == set(DOMAINS) and {t.difficulty for t in tasks} == {1, 2, 3}


def test_limit_spreads_over_difficulties_and_domains():
    from evaluators.cli import select_tasks
    from evaluators.run.config import EvalConfig

    picked = select_tasks(EvalConfig(suite="builtin:easy", limit=6))
    assert (
        len(picked) == 6 and len({t.domain for t in picked}) >= 4 and {t.difficulty for t in picked} == {1, 2}
    )
    assert len({t.family or t.id for t in picked}) == 6


@pytest.mark.slow
def test_make_demo_says_what_it_runs_and_a_second_run_shows_the_first(image, tmp_path):
    """`make demo`'s command (`harness demo`) on its selection, with a scripted model standing in for the
    embedded one: it names the tasks up front, ends with three commands to try next, and run again it
    runs nothing new."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": ["Look.\n```bash\nls\n```", SUBMIT]}))
    out = tmp_path / "demo"
    first = subprocess.run(
        [".venv/bin/harness", "demo", "--model", f"replay:{script}", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    assert "on the 12 tasks of builtin:demo" in first.stderr
    steps = first.stdout.split("next:\n", 1)[1].splitlines()
    assert len(steps) == 3 and all(line.strip().startswith(".venv/bin/harness ") for line in steps)
    recorded = (out / "attempts.jsonl").read_text()
    assert len(recorded.splitlines()) == 12
    again = subprocess.run(
        [".venv/bin/harness", "demo", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and "the demo has run already" in again.stderr, again.stderr[-2000:]
    assert (out / "attempts.jsonl").read_text() == recorded and "next:" in again.stdout
