"""Runs cases one at a time against real sandboxes, checks the conditions every case must meet, and
formats the result table."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from evaluators.selftest.case import Case, Ctx, Outcome
from evaluators.selftest.catalogue import select
from evaluators.selftest.cross_cases import LEAKY
from evaluators.selftest.fixtures import (
    HONEST,
    SUBMIT,
    WRONG,
    add_task,
    answer_task,
    bash,
    honest_version,
    json_answer_task,
    score_task,
    script_task,
    write,
)
from evaluators.selftest.harbor_cases import harbor_task
from evaluators.selftest.probes import (
    docker_root,
    file_digest,
    host_state,
    labeled_containers,
    new_host_files,
    stray_sandbox_processes,
)
from results.schema import Attempt
from tasks.model import Task

RSS_SLACK = 200 << 20  # growth of this process's resident memory over one case
THREAD_SLACK = 2


# ------------------------------------------------------------------------------------------ running


@dataclass
class Row:
    case: str
    expected: str
    observed: str = ""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    host: dict = field(default_factory=dict)  # deltas measured around the case

    @property
    def ok(self) -> bool:
        return not self.problems


class Runner:
    """Runs cases one at a time in a private folder; keeps the honest controls' results."""

    def __init__(
        self, image: str, workdir: Optional[Path] = None, log: Callable[[str], None] = lambda m: None
    ):
        self.image = image
        self.nonce = secrets.token_hex(4)
        self.own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="harness-selftest-")).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ctx = Ctx(self.nonce, self.workdir)
        self.ctx.secret.write_text(self.ctx.answer + "\n")
        self.docker_root = docker_root()
        self.controls: dict[str, Row] = {}
        self.log = log

    def close(self):
        if self.own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def task(self, kind: str, task_id: str, command_timeout: float) -> Task:
        if kind == "answer":
            return answer_task(task_id, self.ctx.answer, command_timeout)
        if kind == "json_answer":
            return json_answer_task(task_id, self.ctx.answer, command_timeout)
        if kind == "script":
            return script_task(task_id, self.ctx.answer, command_timeout, self.ctx.marker)
        if kind == "score":
            return score_task(task_id, command_timeout)
        if kind.startswith("harbor:"):  # a Harbor task in that verifier mode (harbor_cases.py)
            return harbor_task(self.workdir / "harbor", task_id, kind.split(":", 1)[1], command_timeout)
        if kind == "add_brief":  # for cases whose verdict is a verifier timeout: it comes in 20 s, not 60
            return add_task(task_id, "", command_timeout, verifier_timeout=20)
        return add_task(task_id, self.ctx.marker if kind == "add_marker" else "", command_timeout)

    def _eval(
        self, name: str, tasks: list[Task], scripts: dict[str, list], concurrency: int = 1, batch: int = 0
    ):
        """One run_eval in a fresh run folder; returns (records by task id, run id, error text)."""
        from evaluators.run.config import EvalConfig
        from evaluators.run.runner import run_eval
        from results.store import RunReader

        folder = self.workdir / f"st-{self.nonce}-{name}"
        script = self.workdir / f"{name}.json"
        script.write_text(json.dumps(scripts))
        error = ""
        try:
            asyncio.run(
                run_eval(
                    EvalConfig(
                        model=f"replay:{script}",
                        samples=1,
                        out=folder,
                        concurrency=concurrency,
                        suite=f"selftest:{name}",
                        batch_grading=batch,
                    ),
                    tasks,
                    progress=False,
                )
            )
        except Exception as e:
            error = f"run_eval raised {type(e).__name__}: {str(e)[:300]}"
        recs: dict[str, Attempt] = {}
        try:
            reader = RunReader(folder)
            recs = {a.task_id: a for a in reader.iter_attempts()}
            run_id = reader.run_id
        except Exception as e:
            error = error or f"run folder unreadable: {e}"
            run_id = folder.name
        return recs, run_id, error

    def honest_replies(self, kind: str) -> list[str]:
        """What an honest agent does for a task kind."""
        if kind == "script":
            return [bash(f"echo 'echo {self.ctx.answer}' > run.sh"), SUBMIT]
        if kind == "score":
            return [bash("echo 'echo 1' > score.sh"), SUBMIT]
        if kind == "json_answer":
            return [bash(write("answer.json", json.dumps({"ok": self.ctx.answer}))), SUBMIT]
        if kind == "answer":
            return [bash(f"echo {self.ctx.answer} > answer.txt"), SUBMIT]
        return HONEST

    def control(self, kind: str) -> Row:
        """The honest solution of a reward task: must score 1 through the same path."""
        if kind not in self.controls:
            row = Row(f"control_{kind}", "honest solution: reward 1")
            t0 = time.monotonic()
            tid = f"{kind}-honest"
            recs, _, error = self._eval(
                f"control-{kind}", [self.task(kind, tid, 30)], {tid: self.honest_replies(kind)}
            )
            rec = recs.get(tid)
            if error:
                row.problems.append(error)
            if rec is None:
                row.problems.append("no record")
            else:
                row.observed = f"{rec.status}/{rec.reason} r={rec.reward:g}"
                if not (rec.solved and rec.reward == 1.0):
                    row.problems.append(
                        f"the honest solution scored {rec.reward} ({rec.reason}: {rec.detail[:200]})"
                    )
            row.seconds = time.monotonic() - t0
            self.controls[kind] = row
        return self.controls[kind]

    def _host_checks(self, row: Row, since: float, before, passwd_before: str):
        """The global conditions on the host after a case: no sandbox-user process outside a container, no
        new host file, /etc/passwd unchanged, this process's memory, threads and children back."""
        after = host_state(self.docker_root)
        strays = stray_sandbox_processes()
        if strays:
            row.problems.append(f"sandbox-user processes outside containers: {strays[:5]}")
        files = new_host_files(since, self.nonce, self.workdir, extra=(os.getcwd(),))
        if files:
            row.problems.append(f"new host files: {files[:5]}")
        if file_digest("/etc/passwd") != passwd_before:
            row.problems.append("the host's /etc/passwd changed")
        row.host = {
            "disk_root_mb": (after.disk_root - before.disk_root) / 2**20,
            "disk_docker_mb": (
                (after.disk_docker - before.disk_docker) / 2**20
                if after.disk_docker is not None and before.disk_docker is not None
                else None
            ),
            "mem_available_mb": (after.mem_available - before.mem_available) / 2**20,
            "rss_mb": (after.rss - before.rss) / 2**20,
            "threads": after.threads - before.threads,
            "children": after.children - before.children,
        }
        # Disk use is shown, not judged: other processes share the disk, so a change of used space says
        # nothing about this case. What a case may not leave behind is checked above by name and owner:
        # its containers (and with them their writable layers), sandbox-user processes and files.
        if after.rss - before.rss > RSS_SLACK:
            row.problems.append(f"the harness grew by {row.host['rss_mb']:.0f} MB")
        if after.threads - before.threads > THREAD_SLACK:
            row.problems.append(f"{after.threads - before.threads} more threads than before")
        if after.children > before.children:
            row.problems.append(f"{after.children - before.children} child processes left")

    def run_apply(self, case: Case, *extra: str) -> Row:
        """A `harness run --apply` case (apply_repo.py): the CLI on a scratch repository, then the host."""
        from evaluators.selftest.apply_repo import observed, run_apply

        row = Row(case.name, case.expected)
        t0 = time.monotonic()
        since, before, passwd_before = (
            time.time() - 1,
            host_state(self.docker_root),
            file_digest("/etc/passwd"),
        )
        run = None
        try:
            run = run_apply(case, self.ctx, *extra)
        except Exception as e:
            row.problems.append(f"the case could not run: {type(e).__name__}: {str(e)[:300]}")
        if run is not None:
            left = labeled_containers(pid=run.pid)
            if left:
                row.problems.append(f"containers left behind: {left}")
            row.observed = observed(run)
            try:
                row.problems += case.check(Outcome(None, self.ctx, run))
            except Exception as e:
                row.problems.append(f"check raised {type(e).__name__}: {e}")
        self._host_checks(row, since, before, passwd_before)
        row.seconds = time.monotonic() - t0
        self.log(
            f"{case.name}: {'ok' if row.ok else 'FAILED: ' + '; '.join(row.problems)} ({row.seconds:.0f}s)"
        )
        return row

    def run(self, case: Case) -> Row:
        from agent.sandbox.backends.docker.cleanup import (
            prune,
        )  # not at the top: --list imports nothing heavy
        from evaluators.grading.grade import GradingStations

        if case.group == "apply":
            return self.run_apply(case)
        row = Row(case.name, case.expected)
        t0 = time.monotonic()
        if case.group == "reward":
            control = self.control(case.task)
            if not control.ok:
                row.problems.append(f"the honest control of {case.task} failed: {control.problems[0]}")
        next_id, honest_id = f"{case.name}-next", f"{case.name}-honest"
        tasks, scripts, cross = self._case_run(case, next_id, honest_id)
        since = time.time() - 1
        before = host_state(self.docker_root)
        passwd_before = file_digest("/etc/passwd")
        shared_before = GradingStations.shared_turns
        recs, run_id, error = self._eval(case.name, tasks, scripts, batch=len(tasks) if cross else 0)
        if cross:
            _cross_checks(row, case, recs, cross, GradingStations.shared_turns - shared_before)
        if error:
            row.problems.append(error)

        # the global conditions
        rec, nxt, hon = recs.get(case.name), recs.get(next_id), recs.get(honest_id)
        for tid, r in ((case.name, rec), (next_id, nxt)) + (((honest_id, hon),) if case.honest else ()):
            if r is None:
                row.problems.append(f"no record for {tid}")
            elif not r.reason or r.status not in ("solved", "failed", "error"):
                row.problems.append(f"record for {tid} lacks status/reason ({r.status!r}, {r.reason!r})")
        if nxt is not None and not nxt.solved:
            row.problems.append(
                f"the attempt after the attack was not solved ({nxt.status}/{nxt.reason} {nxt.error or ''})"
            )
        left = labeled_containers(run_id)
        if left:
            row.problems.append(f"containers left behind: {left}")
            prune(run_id=run_id)  # reported; the next case starts clean
        self._host_checks(row, since, before, passwd_before)

        self._expectation(row, case, rec, hon)
        row.seconds = time.monotonic() - t0
        self.log(
            f"{case.name}: {'ok' if row.ok else 'FAILED: ' + '; '.join(row.problems)} ({row.seconds:.0f}s)"
        )
        return row

    def _case_run(
        self, case: Case, next_id: str, honest_id: str
    ) -> tuple[list[Task], dict[str, list], dict[str, str]]:
        """(the tasks, their replay scripts, the cross neighbours {task id: role}) of one case's run: the
        attack, an honest attempt after it in the same run, the case's honest variant if it has one, and
        for a cross case the attempts graded beside it, in grading order (cross_cases.py)."""
        tasks = [self.task(case.task, case.name, case.command_timeout), self.task("answer", next_id, 10)]
        scripts = {
            case.name: case.script(self.ctx),
            next_id: [bash(f"echo {self.ctx.answer} > answer.txt"), SUBMIT],
        }
        if case.honest:
            tasks.append(self.task(case.task, honest_id, case.command_timeout))
            scripts[honest_id] = (case.honest_script or (lambda c: honest_version(case.script(c))))(self.ctx)
        cross = {}
        if case.group == "cross":  # graded in this order, in one grading container
            cross = {f"{case.name}-{k}": k for k in ("leaky", "wrong", "honest")}
            ids = list(cross)
            tasks = [add_task(ids[0]), tasks[0], add_task(ids[1]), add_task(ids[2]), tasks[1]]
            scripts[ids[0]] = [bash(write("solution.py", LEAKY)), SUBMIT]
            scripts[ids[1]] = [bash(write("solution.py", WRONG)), SUBMIT]
            scripts[ids[2]] = HONEST
        return tasks, scripts, cross

    def _expectation(self, row: Row, case: Case, rec: Optional[Attempt], hon: Optional[Attempt]) -> None:
        """The case's own expectation on its record (and its honest variant's): row.observed, problems."""
        if rec is None:
            row.observed = "no record"
            return
        row.observed = f"{rec.status}/{rec.reason} r={rec.reward:g}"
        if rec.exit_reason not in (None, "submitted"):
            row.observed += f" ({rec.exit_reason})"
        if case.check:
            try:
                row.problems += case.check(Outcome(rec, self.ctx))
            except Exception as e:
                row.problems.append(f"check raised {type(e).__name__}: {e}")
        if rec.status == "error" or rec.reason == "harness_error":
            row.observed += f" [{(rec.error or '')[-300:]}]"
        if case.honest and hon is not None:
            row.observed += f"; honest: {hon.status}/{hon.reason}"
            try:
                row.problems += [f"honest variant: {p}" for p in case.honest(Outcome(hon, self.ctx))]
            except Exception as e:
                row.problems.append(f"honest check raised {type(e).__name__}: {e}")


def _cross_checks(row: Row, case: Case, recs: dict[str, Attempt], cross: dict[str, str], shared: int) -> None:
    """A cross case's neighbours scored as if alone (the leaky and honest ones 1, the wrong one 0), and
    the attack really shared a grading container with them (`shared` turns)."""
    for tid, role in cross.items():
        r = recs.get(tid)
        want = role != "wrong"
        if r is None:
            row.problems.append(f"no record for {tid}")
        elif r.solved != want or (role == "wrong" and (r.reward != 0.0 or r.reason != "fail")):
            row.problems.append(
                f"the {role} attempt graded beside the attack scored {r.reward} ({r.reason}), "
                f"expected {'1' if want else '0 (fail)'}: {r.detail[:200]}"
            )
    if shared < case.shared_turns:
        row.problems.append(
            f"only {shared} turns in a grading container shared with another attempt, "
            f"expected {case.shared_turns}: the attack was not graded beside the others"
        )


# ------------------------------------------------------------------------------------------ the table


def format_table(rows: list[Row]) -> str:
    header = ("case", "expected", "observed", "ok")
    cells = [header] + [(r.case, r.expected, r.observed, "ok" if r.ok else "FAIL") for r in rows]
    widths = [min(max(len(c[i]) for c in cells), limit) for i, limit in enumerate((26, 70, 40, 4))]
    clip = lambda s, w: s if len(s) <= w else s[: w - 3] + "..."  # noqa: E731
    lines = ["  ".join(clip(c[i], widths[i]).ljust(widths[i]) for i in range(4)).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        for p in r.problems:
            lines.append(f"  {r.case}: {p}")
    hosts = [r.host for r in rows if r.host]
    if hosts:

        def worst(key):
            values = [h[key] for h in hosts if h.get(key) is not None]
            return max(values, key=abs) if values else 0.0

        lines.append(
            f"host, worst case: disk / {worst('disk_root_mb'):+.1f} MB, docker root "
            f"{worst('disk_docker_mb'):+.1f} MB, available memory {worst('mem_available_mb'):+.0f} MB, "
            f"harness RSS {worst('rss_mb'):+.1f} MB, threads {worst('threads'):+d}, "
            f"child processes {worst('children'):+d}"
        )
    passed = sum(r.ok for r in rows)
    lines.append(f"{passed} passed, {len(rows) - passed} failed")
    return "\n".join(lines)


def run_selftest(only: Optional[str] = None, log: Callable[[str], None] = lambda m: None) -> list[Row]:
    """Runs the chosen cases (all by default) against the installed harness; returns one row per case,
    plus a row per honest control used."""
    from agent.sandbox.backends.docker.images import ensure_base_image

    cases = select(only)
    image = ensure_base_image(log=log)
    runner = Runner(image, log=log)
    try:
        rows = [runner.run(c) for c in cases]
    finally:
        runner.close()
    return list(runner.controls.values()) + rows
