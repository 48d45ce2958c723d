"""The grading protocol: no code under test decides its own verdict.

1. The caller captured the agent's changes (Sandbox.changes) and destroyed its sandbox.
2. Changes to test hooks, pytest config, shadowing modules or visible tests -> 0, `tamper`.
3. A FRESH container from the same image: pristine workspace + the changes. The test runner runs as
   root; the candidate's code runs as the sandbox user (10001): through the proxy in
   evaluators/grader/candidate.py for Python imports, as that user for processes the tests start. Hidden
   tests, the report and the reward file sit in /grader (root-only, mode 0700): the candidate can neither
   read nor write them. Every process of the candidate is killed before the verdict is read.
4. The verdict is read on the host (evaluators/pytest_kind.py for pytest, a number for scripts).
Each evaluator kind is registered in evaluators/kinds.py; a Harbor verifier in `fresh` mode grades in
evaluators/harbor_kind.py (snapshot and shared run in evaluators/runner.py, before the agent's container
is released).
Anything that goes wrong while grading one attempt is that attempt's failed verdict with a reason; only
the Docker engine failing is an infrastructure error (InfraError, retried by the runner).
"""

from __future__ import annotations

import json
import math
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field

from agent.sandbox import Changes, Limits, SandboxDied, SandboxPool
from evaluators import kinds, pytest_kind
from evaluators.tamper import tamper_reason
from results.errors import InfraError
from results.schema import TestOutcome
from tasks.model import Task

GRADER = pytest_kind.GRADER
CANDIDATE_UID = 10001  # agent.sandbox.AGENT_UID
MAX_ANSWER_CHARS = 1 << 20
MAX_JSON_DEPTH = 100
REGEX_TIMEOUT_SEC = 5.0
# On test.sh's PATH: runs the candidate's code as the candidate user with a clean environment.
AS_CANDIDATE = (
    f"#!/bin/sh\n# Runs a command as the candidate user, with a clean environment.\n"
    f"exec setpriv --reuid={CANDIDATE_UID} --regid={CANDIDATE_UID} --clear-groups -- "
    f"env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 WORKSPACE=/workspace "
    f'"$@"\n'
).encode()


@dataclass
class Verdict:
    reward: float
    solved: bool
    # pass | fail | timeout | no_report | missing_tests | tamper | skipped | error_in_tests | wrong_answer |
    # no_answer | oom | grader_error
    reason: str
    tests: list[TestOutcome] = field(default_factory=list)
    detail: str = ""
    seconds: float = 0.0
    output: str = ""  # the verifier's own output, head and tail (Harbor: test.sh's stdout and stderr)
    files: dict[str, bytes] = field(default_factory=dict)  # kept with the attempt (Harbor: /logs/verifier/*)


async def grade(task: Task, changes: Changes, pool: SandboxPool, image: str) -> Verdict:
    """Grades one attempt with its kind's registered grade function (evaluators/kinds.py). Raises only
    InfraError (the engine failed); everything else is a verdict."""
    started = time.monotonic()
    try:
        v = await kinds.grader(task.evaluator.kind)(task, changes, pool, image)
    except InfraError:
        raise
    except Exception as e:
        v = Verdict(0.0, False, "grader_error", detail=f"{type(e).__name__}: {str(e)[:500]}")
    v.seconds = time.monotonic() - started
    return v


async def grade_answer(task: Task, changes: Changes, pool: SandboxPool, image: str) -> Verdict:
    """Decided on the host from the captured bytes; no container needed."""
    ev = task.evaluator
    data = changes.files.get(ev.answer_file, task.workspace_files.get(ev.answer_file))
    if data is None:
        return Verdict(0.0, False, "no_answer", detail=f"{ev.answer_file} was not written")
    ok = answer_matches(data.decode("utf-8", "replace"), ev.expected, ev.mode, ev.tolerance)
    return Verdict(float(ok), ok, "pass" if ok else "wrong_answer")


async def grade_pytest(task: Task, changes: Changes, pool: SandboxPool, image: str) -> Verdict:
    why = _tamper(task, changes)
    if why:
        return Verdict(0.0, False, "tamper", detail=why)
    prepared = pytest_kind.prepare(task.test_files)
    timeout = task.verifier_timeout_sec
    files = {f"tests/{p}": d for p, d in prepared.files.items()}
    files.update(
        {
            "conftest.py": pytest_kind.GRADER_CONFTEST,
            "pytest.ini": pytest_kind.GRADER_INI,
            "_harness/_harness_candidate.py": pytest_kind.CANDIDATE_PROXY,
        }
    )
    argv, report = pytest_kind.command(timeout)
    folder = _private_folder()
    env = pytest_kind.clean_env(task.evaluator.import_mode, timeout, folder)
    async with _grading_sandbox(task, changes, pool, image) as sb:
        await _mkdirs(sb, f"{folder}/tmp", f"{folder}/home")
        await sb.put_files(files, dest=folder, user="root")
        run = await _run(sb, argv, timeout, env, cwd=folder)
        if isinstance(run, Verdict):
            return run
        report = await _read(sb, f"{folder}/{report}")
    pv = pytest_kind.verdict(
        report, run["exit_code"], run["timed_out"], prepared.expected, prepared.canaries, prepared.names
    )
    tail = run["out_tail"].decode("utf-8", "replace")[-400:]
    return Verdict(pv.reward, pv.solved, pv.reason, pv.tests, pv.detail or tail)


async def grade_script(task: Task, changes: Changes, pool: SandboxPool, image: str) -> Verdict:
    """tests/test.sh runs as root in /workspace and writes a reward to $REWARD_FILE (root-only); it starts
    the candidate's code with `as-candidate CMD...`, so that code cannot reach the reward file."""
    why = _tamper(task, changes)
    if why:
        return Verdict(0.0, False, "tamper", detail=why)
    timeout = task.verifier_timeout_sec
    folder = _private_folder()
    reward_file = f"{folder}/reward.txt"
    files = {f"tests/{p}": d for p, d in task.test_files.items()}
    files["bin/as-candidate"] = AS_CANDIDATE
    env = {
        "PATH": f"{folder}/bin:/usr/bin:/bin",
        "HOME": f"{folder}/home",
        "LANG": "C.UTF-8",
        "WORKSPACE": "/workspace",
        "REWARD_FILE": reward_file,
        "HARNESS_TEST_SH": f"{folder}/tests/test.sh",
    }
    async with _grading_sandbox(task, changes, pool, image) as sb:
        await _mkdirs(sb, f"{folder}/home")
        await sb.put_files(files, dest=folder, user="root", executable={"bin/as-candidate"})
        # Sourced by name from the environment, which only root can read: the command line (readable by
        # anyone) does not say where the hidden files are. ${BASH_SOURCE[0]} is the script's path.
        run = await _run(
            sb,
            ["timeout", "-s", "KILL", str(int(timeout)), "bash", "-c", '. "$HARNESS_TEST_SH"'],
            timeout,
            env,
            cwd="/workspace",
        )
        if isinstance(run, Verdict):
            return run
        raw = await _read(sb, reward_file)
    if run["timed_out"] or run["exit_code"] in (124, 137, -9):
        return Verdict(0.0, False, "timeout")
    reward = parse_reward(raw)
    if isinstance(reward, str):
        return Verdict(0.0, False, "no_report", detail=reward)
    return Verdict(reward, reward >= 1.0, "pass" if reward >= 1.0 else "fail")


def parse_reward(raw: bytes | None) -> float | str:
    """The number a test.sh wrote, or why there is none."""
    if raw is None:
        return "test.sh wrote no reward file"
    text = raw[:256].decode("utf-8", "replace").strip()
    try:
        reward = float(text)
    except ValueError:
        return f"test.sh wrote no reward number ({text[:40]!r})"
    if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
        return f"reward {reward} outside 0..1"
    return reward


def _private_folder() -> str:
    """Where one grading keeps its hidden files: an unguessable name inside root-only /grader, so that no
    link the candidate's code makes can point at them."""
    return f"{GRADER}/{secrets.token_hex(12)}"


def _tamper(task: Task, changes: Changes) -> str:
    changed = {**changes.files, **{p: None for p in changes.deleted}}
    return tamper_reason(changed, task.workspace_files, task.evaluator.protected)


class _grading_sandbox:
    """A fresh container with the pristine workspace plus the changes."""

    def __init__(self, task, changes, pool, image):
        self.task, self.changes, self.pool, self.image = task, changes, pool, image

    async def __aenter__(self):
        self.cm = self.pool.sandbox(self.image, Limits.for_task(self.task.environment), task=self.task.id)
        sb = await self.cm.__aenter__()
        try:
            workspace = {p: d for p, d in self.task.workspace_files.items() if p not in self.changes.deleted}
            workspace.update(self.changes.files)
            await sb.put_files(
                workspace,
                executable=(set(self.task.executable_files) - set(self.changes.files))
                | self.changes.executable,
            )
        except BaseException:
            await self.cm.__aexit__(None, None, None)
            raise
        return sb

    async def __aexit__(self, *exc):
        return await self.cm.__aexit__(*exc)


async def _mkdirs(sb, *paths: str):
    """Makes /grader root-only (Docker does not always apply a tmpfs mount's mode to its folder: checked)
    and the folders the verifier needs, before anything is written there."""
    script = f'chmod 0700 {GRADER} && [ "$(stat -c %a {GRADER})" = 700 ] && mkdir -p "$@"'
    r = await sb.exec_raw(["sh", "-c", script, "_", *paths], timeout=10, user="root", cwd="/")
    if r["exit_code"] != 0:
        raise InfraError(f"could not prepare the grader's folders: {r['err_head'][:200]!r}")


async def _run(sb, argv, timeout, env, cwd):
    """Runs the verifier as root; a grading container that the candidate's code killed (memory) is the
    candidate's failure, any other death an infrastructure error (retried by the runner)."""
    try:
        return await sb.exec_raw(argv, timeout=timeout + 5, env=env, cap=16 << 10, user="root", cwd=cwd)
    except SandboxDied:
        if await _death_cause(sb) == "oom":
            return Verdict(
                0.0, False, "oom", detail="the code under test used the memory limit up while graded"
            )
        raise


async def _death_cause(sb) -> str | None:
    import asyncio

    return await asyncio.to_thread(sb.death_cause)


async def _read(sb, path: str) -> bytes | None:
    """Reads one file the harness created in the grading container, or None."""
    directory, name = path.rsplit("/", 1)
    try:
        files = await sb.get_files([name], root=directory, max_bytes=pytest_kind.MAX_REPORT_BYTES)
    except SandboxDied:
        raise
    except Exception:
        return None
    return files.get(name)


def answer_matches(got: str, expected, mode: str, tolerance: float = 1e-6) -> bool:
    """Compares an answer file's text with the expected value. Bounded: size, JSON depth, regex time."""
    if len(got) > MAX_ANSWER_CHARS:
        return False
    if mode == "exact":
        return got.rstrip("\n") == str(expected)
    if mode == "normalized":
        norm = lambda s: " ".join(str(s).split()).lower()  # noqa: E731
        return norm(got) == norm(expected)
    if mode == "regex":
        return _regex_fullmatch(str(expected), got.strip())
    if mode == "numeric":
        try:
            value = float(got.strip().replace(",", ""))
        except ValueError:
            return False
        return math.isfinite(value) and abs(value - float(expected)) <= tolerance * max(
            1.0, abs(float(expected))
        )
    if mode == "json":
        if json_depth(got) > MAX_JSON_DEPTH:
            return False
        try:
            return json.loads(got) == (json.loads(expected) if isinstance(expected, str) else expected)
        except (ValueError, RecursionError):
            return False
    raise ValueError(f"unknown answer mode {mode!r}")


def json_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings (without parsing: deep input cannot recurse)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _regex_fullmatch(pattern: str, text: str) -> bool:
    """In a child process with a time limit: a pathological answer cannot hang the grader."""
    code = (
        "import json, re, sys\np, t = json.load(sys.stdin)\n"
        "sys.exit(0 if re.fullmatch(p, t, flags=re.DOTALL) else 1)\n"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-I", "-c", code],
            input=json.dumps([pattern, text]).encode(),
            capture_output=True,
            timeout=REGEX_TIMEOUT_SEC,
        )
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0
