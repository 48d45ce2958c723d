"""Check tasks on this machine, without Docker: the oracle must solve every task and the untouched workspace must not.

It grades roughly the way the sandbox grader does, but with no isolation. Hidden tests go into their own
folder with a harness conftest.py that puts the workspace on sys.path. They run as
`python -I -m pytest` with plugin autoload off, and the outcome of each test is read from a JUnit report:
every real test must pass and every canary must fail. Tests find the workspace through $WORKSPACE (in the
sandbox it is unset, so they use /workspace). Answer tasks compare the answer file here, and script tasks
run tests/test.sh with $REWARD_FILE.

Use it only for tasks we wrote: solve.sh and the hidden tests run unsandboxed on this machine.
The real check in Docker is `harness tasks validate`.

    .venv/bin/python tests/tasks_localcheck.py [SUITE]      # prints each problem; exit 1 if there are any
"""
from __future__ import annotations

import atexit
import json
import math
import os
import queue
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from tasks.loader import is_canary, load_suite  # noqa: E402
from tasks.model import Task  # noqa: E402

PYTHON = Path(sys.executable)
GRADER_CONFTEST = """\
import os, sys
sys.path.append(os.environ["WORKSPACE"])  # the grader puts the workspace on sys.path, after everything else
"""

# Starting pytest costs ~0.25 s of CPU, and the check starts it twice per task, so on a 2-core machine that
# start-up was most of the run time. Each pytest run is therefore a fork of a `python -I` process that has
# already imported pytest: a fresh process per run (nothing the tests import survives it), same arguments.
FORK_SERVER = r"""
import json, os, signal, sys
import pytest
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        signal.alarm(req["timeout"])  # SIGALRM ends a run that hangs
        try:
            code = int(pytest.main(req["args"]))
        except BaseException:
            code = 99
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""
_servers: "queue.Queue[subprocess.Popen]" = queue.Queue()


def run_pytest(args: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float) -> int:
    """`python -I -m pytest *args` in cwd with exactly env; output to log; the exit code (-14 on timeout)."""
    try:
        server = _servers.get_nowait()
    except queue.Empty:
        server = subprocess.Popen([str(PYTHON), "-I", "-c", FORK_SERVER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={"PATH": env["PATH"]})
        atexit.register(server.stdin.close)  # it exits at end of input
    try:
        request = {"args": args, "cwd": str(cwd), "env": env, "log": str(log), "timeout": max(1, int(timeout))}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        return int(server.stdout.readline())
    finally:
        _servers.put(server)


@dataclass
class Grade:
    solved: bool
    reward: float = 0.0
    detail: str = ""  # why it is not solved (for messages)
    tests: dict[str, str] = field(default_factory=dict)  # pytest: test name -> passed | failed | error | skipped


def _env(ws: Path, home: Path) -> dict[str, str]:
    return {
        "PATH": f"{PYTHON.parent}:/usr/local/bin:/usr/bin:/bin",  # python3 = this venv (numpy, pandas, pytest)
        "HOME": str(home), "LC_ALL": "C", "WORKSPACE": str(ws),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1",
    }


def write_files(files: dict[str, bytes], dest: Path) -> None:
    for rel, data in files.items():
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def run_oracle(task: Task, ws: Path, tmp: Path) -> str:
    """Run solution/solve.sh in the workspace; returns "" or a problem."""
    sol = tmp / "solution"
    write_files(task.solution_files, sol)
    p = subprocess.run(["bash", str(sol / "solve.sh")], cwd=ws, env=_env(ws, tmp), capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        return f"solve.sh exited {p.returncode}: {(p.stderr or p.stdout).strip()[-300:]}"
    return ""


def grade(task: Task, ws: Path, tmp: Path) -> Grade:
    kind = task.evaluator.kind
    if kind == "pytest":
        return _grade_pytest(task, ws, tmp)
    if kind == "script":
        return _grade_script(task, ws, tmp)
    return _grade_answer(task, ws)


def _grade_pytest(task: Task, ws: Path, tmp: Path) -> Grade:
    grader = tmp / "grader"
    write_files(task.test_files, grader / "tests")
    (grader / "conftest.py").write_text(GRADER_CONFTEST)
    (grader / "pytest.ini").write_text("[pytest]\n")
    report = tmp / "report.xml"
    args = ["-q", "-p", "no:cacheprovider", "-c", str(grader / "pytest.ini"), f"--rootdir={grader}",
            f"--confcutdir={grader}", f"--junitxml={report}", str(grader / "tests")]
    log = tmp / "pytest.log"
    rc = run_pytest(args, ws, _env(ws, tmp), log, task.verifier_timeout_sec)
    if not report.exists():
        return Grade(False, detail=f"no report (rc={rc}): {log.read_text(errors='replace')[-300:]}")
    tests: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        outcome, msg = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                msg = (child.get("message") or "").splitlines()[0][:200] if child.get("message") else ""
        tests[name], messages[name] = outcome, msg
    real = {n: o for n, o in tests.items() if not is_canary(n)}
    canaries = {n: o for n, o in tests.items() if is_canary(n)}
    bad = [f"{n} {o}: {messages[n]}" for n, o in real.items() if o != "passed"]
    bad += [f"{n} (canary) {o}" for n, o in canaries.items() if o != "failed"]
    if not real or not canaries:
        bad.append(f"collected {len(real)} tests and {len(canaries)} canaries (rc={rc})")
    passed = sum(o == "passed" for o in real.values())
    return Grade(not bad, reward=passed / len(real) if real and not bad else 0.0, detail="; ".join(bad), tests=tests)


def _grade_script(task: Task, ws: Path, tmp: Path) -> Grade:
    grader = tmp / "grader"
    write_files(task.test_files, grader / "tests")
    reward_file = tmp / "reward.txt"
    # On the host there is no separate candidate user: `as-candidate CMD` (evaluators/grade.py) just runs CMD.
    shim = grader / "bin" / "as-candidate"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text('#!/bin/sh\nexec "$@"\n')
    shim.chmod(0o755)
    env = _env(ws, tmp) | {"REWARD_FILE": str(reward_file)}
    env["PATH"] = f"{shim.parent}:{env['PATH']}"
    try:
        p = subprocess.run(["bash", str(grader / "tests" / "test.sh")], cwd=ws, env=env, capture_output=True,
                           text=True, timeout=task.verifier_timeout_sec)
    except subprocess.TimeoutExpired:
        return Grade(False, detail="test.sh timed out")
    try:
        reward = float(reward_file.read_text().strip())
    except (OSError, ValueError):
        return Grade(False, detail=f"test.sh wrote no reward (rc={p.returncode}): {p.stderr[-300:]}")
    if not 0.0 <= reward <= 1.0:
        return Grade(False, detail=f"reward {reward} outside 0..1")
    return Grade(reward >= 1.0, reward=reward, detail="" if reward >= 1.0 else f"reward {reward}")


def answer_matches(text: str, mode: str, expected, tolerance: float) -> bool:
    """Our reading of the answer modes (evaluators/ owns the real one; tasks are written to pass either)."""
    if mode == "exact":
        return text.rstrip("\n") == str(expected).rstrip("\n")
    if mode == "normalized":
        return " ".join(text.split()).casefold() == " ".join(str(expected).split()).casefold()
    if mode == "regex":
        return re.fullmatch(expected, text.strip()) is not None
    if mode == "numeric":
        try:
            return abs(float(text.strip()) - float(expected)) <= tolerance
        except ValueError:
            return False
    try:
        return _json_close(json.loads(text), expected, tolerance)
    except ValueError:
        return False


def _json_close(a, b, tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=0, abs_tol=tol)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_close(a[k], b[k], tol) for k in a)
    return type(a) is type(b) and a == b


def _grade_answer(task: Task, ws: Path) -> Grade:
    ev = task.evaluator
    path = ws / ev.answer_file
    if not path.is_file():
        return Grade(False, detail=f"no {ev.answer_file}")
    text = path.read_text(errors="replace")
    if answer_matches(text, ev.mode, ev.expected, ev.tolerance):
        return Grade(True, reward=1.0)
    return Grade(False, detail=f"{ev.answer_file} = {text[:80]!r}, expected {ev.expected!r} ({ev.mode})")


def check_task(task: Task) -> list[str]:
    """Problems with one task: [] when the oracle solves it and the untouched workspace does not."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"lc-{task.id}-") as d:
        tmp = Path(d)
        for agent in ("oracle", "null"):
            ws, scratch = tmp / agent / "workspace", tmp / agent / "scratch"
            ws.mkdir(parents=True)
            scratch.mkdir()
            write_files(task.workspace_files, ws)
            if agent == "oracle":
                problem = run_oracle(task, ws, scratch)
                if problem:
                    problems.append(f"oracle: {problem}")
                    continue
            g = grade(task, ws, scratch)
            if agent == "oracle" and not g.solved:
                problems.append(f"oracle not solved: {g.detail}")
            if agent == "null":
                if g.solved:
                    problems.append("null agent (untouched workspace) solved it")
                passing_canaries = [n for n, o in g.tests.items() if is_canary(n) and o != "failed"]
                if passing_canaries:  # a canary must be impossible for every workspace, not only the right one
                    problems.append(f"null agent: canary {passing_canaries[0]} did not fail")
    if task.evaluator.kind == "answer" and task.evaluator.answer_file not in task.instruction:
        problems.append(f"instruction does not name the answer file {task.evaluator.answer_file}")
    return problems


def check_suite(tasks: list[Task], workers: int = 3) -> dict[str, list[str]]:
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip((t.id for t in tasks), pool.map(check_task, tasks)))


def main(argv: list[str]) -> int:
    tasks = load_suite(argv[0] if argv else "builtin")
    results = check_suite(tasks)
    bad = {k: v for k, v in results.items() if v}
    for task_id, problems in bad.items():
        for p in problems:
            print(f"{task_id}: {p}")
    print(f"{len(tasks) - len(bad)}/{len(tasks)} tasks ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
