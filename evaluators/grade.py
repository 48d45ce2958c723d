"""The grading protocol: never trust anything the agent could write.

1. The caller captured the agent's changes (Sandbox.changes) and destroyed its sandbox.
2. Changes to test hooks, pytest config, shadowing modules or visible tests -> 0, `tamper`.
3. A FRESH container from the same image: pristine workspace + the changes; hidden tests copied
   as root into /grader, which the test user cannot write.
4. Tests run in a clean environment; the verdict is read on the host (evaluators/pytest_kind.py).
"""
from __future__ import annotations

import json
import math
import re
import secrets
import time
from dataclasses import dataclass, field

from agent.sandbox import Changes, Limits, SandboxDied, SandboxPool
from evaluators import pytest_kind
from evaluators.tamper import tamper_reason
from results.schema import TestOutcome
from tasks.model import Task


@dataclass
class Verdict:
    reward: float
    solved: bool
    reason: str  # pass | fail | timeout | no_report | missing_tests | tamper | skipped | error_in_tests | wrong_answer | no_answer
    tests: list[TestOutcome] = field(default_factory=list)
    detail: str = ""
    seconds: float = 0.0


async def grade(task: Task, changes: Changes, pool: SandboxPool, image: str) -> Verdict:
    started = time.monotonic()
    v = await _grade(task, changes, pool, image)
    v.seconds = time.monotonic() - started
    return v


async def _grade(task: Task, changes: Changes, pool: SandboxPool, image: str) -> Verdict:
    ev = task.evaluator
    if ev.kind == "harbor":  # a Harbor verifier in `fresh` mode (the other modes ran in agent/runner.py)
        from evaluators import harbor_kind
        return await harbor_kind.grade_fresh(task, changes, pool, image)
    if ev.kind == "answer":  # decided on the host from the captured bytes; no container needed
        data = changes.files.get(ev.answer_file, task.workspace_files.get(ev.answer_file))
        if data is None:
            return Verdict(0.0, False, "no_answer", detail=f"{ev.answer_file} was not written")
        ok = answer_matches(data.decode("utf-8", "replace"), ev.expected, ev.mode, ev.tolerance)
        return Verdict(float(ok), ok, "pass" if ok else "wrong_answer")
    changed = {**changes.files, **{p: None for p in changes.deleted}}
    why = tamper_reason(changed, task.workspace_files, ev.protected)
    if why:
        return Verdict(0.0, False, "tamper", detail=why)
    async with pool.sandbox(image, Limits.for_task(task.environment), task=task.id) as sb:
        workspace = {p: d for p, d in task.workspace_files.items() if p not in changes.deleted}
        workspace.update(changes.files)
        await sb.put_files(workspace, executable=(set(task.executable_files) - set(changes.files)) | changes.executable)
        tests = dict(task.test_files)
        timeout = task.verifier_timeout_sec
        if ev.kind == "pytest":
            tests.update({"conftest.py": pytest_kind.GRADER_CONFTEST, "pytest.ini": pytest_kind.GRADER_INI})
            await sb.put_files({f"tests/{p}" if p not in ("conftest.py", "pytest.ini") else p: d
                                for p, d in tests.items()}, dest="/grader", user="root")
            argv, report_path = pytest_kind.command(timeout)
            await sb.exec_raw(["mkdir", "-p", report_path.rsplit("/", 1)[0]], timeout=10)
            run = await sb.exec_raw(argv, timeout=timeout + 5, env=pytest_kind.CLEAN_ENV, cap=16 << 10)
            report = await _read(sb, report_path)
            pv = pytest_kind.verdict(report, run["exit_code"], run["timed_out"],
                                     pytest_kind.expected_ids(task.test_files))
            tail = run["out_tail"].decode("utf-8", "replace")[-400:]
            return Verdict(pv.reward, pv.solved, pv.reason, pv.tests, pv.detail or tail)
        if ev.kind == "script":
            await sb.put_files(tests, dest="/grader/tests", user="root")
            reward_dir = f"/tmp/{secrets.token_hex(8)}"
            await sb.exec_raw(["mkdir", "-p", reward_dir], timeout=10)
            env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "WORKSPACE": "/workspace",
                   "REWARD_FILE": f"{reward_dir}/reward.txt"}
            run = await sb.exec_raw(["timeout", "-s", "KILL", str(int(timeout)), "bash", "/grader/tests/test.sh"],
                                    timeout=timeout + 5, env=env)
            if run["timed_out"] or run["exit_code"] in (124, 137, -9):
                return Verdict(0.0, False, "timeout")
            raw = await _read(sb, f"{reward_dir}/reward.txt")
            try:
                reward = float((raw or b"").decode().strip())
            except ValueError:
                return Verdict(0.0, False, "no_report", detail="test.sh wrote no reward number")
            if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
                return Verdict(0.0, False, "no_report", detail=f"reward {reward} outside 0..1")
            return Verdict(reward, reward >= 1.0, "pass" if reward >= 1.0 else "fail")
    raise ValueError(f"unknown evaluator kind {ev.kind!r}")  # the loader rejects these; a bug if reached


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
    """Compares an answer file's text with the expected value."""
    if mode == "exact":
        return got.rstrip("\n") == str(expected)
    if mode == "normalized":
        norm = lambda s: " ".join(str(s).split()).lower()
        return norm(got) == norm(expected)
    if mode == "regex":
        return re.fullmatch(str(expected), got.strip(), flags=re.DOTALL) is not None
    if mode == "numeric":
        try:
            value = float(got.strip().replace(",", ""))
        except ValueError:
            return False
        return math.isfinite(value) and abs(value - float(expected)) <= tolerance * max(1.0, abs(float(expected)))
    if mode == "json":
        try:
            return json.loads(got) == (json.loads(expected) if isinstance(expected, str) else expected)
        except ValueError:
            return False
    raise ValueError(f"unknown answer mode {mode!r}")
