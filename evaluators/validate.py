"""`harness tasks validate`: the quality gate for a task suite.

Per task: the schema loads; the image builds; the oracle is solved on every repeat; the untouched
workspace (null agent) is not solved; hidden tests are unreachable from the agent's sandbox; the
instruction does not quote the hidden tests; nor do the task's files show a defect (evaluators/task_lint.py:
the solution given away, hidden tests that need the network or read the date). An impossible variant
(tag "impossible", tasks/impossible.py) must instead FAIL with the oracle on every repeat: its tests
contradict the instruction the oracle follows.
Runs concurrently through the warm pool.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field

from agent.sandbox import DEFAULT, Sandbox, SandboxPool, sandbox_backend
from evaluators.grading.grade import GradingStations
from evaluators.run.attempt import expect_attempts, run_attempt
from evaluators.run.network import network_lines, offline
from evaluators.run.policies import null_policy, oracle_policy
from evaluators.run.task_images import sandbox_images
from evaluators.task_lint import lint
from tasks.model import Task


@dataclass
class Row:
    task: str
    oracle: str = ""  # e.g. "3/3"
    null: str = ""
    flaky: bool = False
    seconds: float = 0.0
    # the slowest oracle grading and the task's budget for it: a share near 1 times out on a busy machine
    tests_seconds: float = 0.0
    tests_budget: float = 0.0
    problems: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)  # "oracle|null reason reward", one per attempt
    attempts: list = field(default_factory=list, repr=False)  # their records (results.task_audit.audit_tasks)

    @property
    def ok(self) -> bool:
        return not self.problems


def leaked_lines(task: Task) -> list[str]:
    """Distinctive lines of the hidden tests that appear in the instruction."""
    lines = set()
    for data in task.test_files.values():
        for line in data.decode("utf-8", "replace").splitlines():
            line = line.strip()
            if len(line) >= 25 and not line.startswith(("import ", "from ", "#", "def ", "class ")):
                lines.add(line)
    return sorted(line for line in lines if line in task.instruction)


async def hidden_tests_unreachable(task: Task, sb: Sandbox) -> str:
    """From inside an agent sandbox: /grader is empty and no hidden test file can be found."""
    for folder in (
        "/grader",
        "/tests",
        "/logs/verifier",
    ):  # /tests and /logs/verifier: Harbor's verifier folders
        r = await sb.exec(["sh", "-c", f"ls -A {folder} 2>/dev/null"], timeout=30)
        if r.stdout.strip():
            return f"{folder} is not empty in the agent sandbox: {r.stdout.strip()[:80]}"
    probes = [
        line.strip()
        for data in task.test_files.values()
        for line in data.decode("utf-8", "replace").splitlines()
        if len(line.strip()) >= 25
    ][:1]
    for probe in probes:
        roots = [sb.workdir] if sb.workdir != "/" else []  # never grep / (its /proc holds the probe itself)
        r = await sb.exec(["grep", "-rlF", "--", probe, *roots, "/tmp", "/home", "/opt", "/srv"], timeout=60)
        if r.stdout.strip() and not any(probe.encode() in d for d in task.workspace_files.values()):
            return f"hidden test content found at {r.stdout.split()[0]}"
    return ""


async def validate_task(
    task: Task, pool: SandboxPool, image: str, repeats: int, stations: GradingStations | None = None
) -> Row:
    row = Row(task.id)
    t0 = time.monotonic()
    leaks = leaked_lines(task)
    if leaks:
        row.problems.append(f"instruction quotes hidden tests: {leaks[0][:60]!r}")

    async def oracle_and_probe(task: Task, sb: Sandbox):
        problem = await hidden_tests_unreachable(task, sb)
        if problem:
            row.problems.append(problem)
        await oracle_policy(task, sb)

    kw = dict(run_id=pool.run_id, model_name="oracle", stations=stations)
    runs = await asyncio.gather(
        *(
            run_attempt(task, oracle_and_probe if i == 0 else oracle_policy, pool, image, sample=i, **kw)
            for i in range(repeats)
        )
    )
    solved = sum(r.solved for r in runs)
    row.tests_seconds = max(r.durations.evaluation for r in runs)
    row.tests_budget = task.verifier_timeout_sec
    row.oracle = f"{solved}/{repeats}"
    row.flaky = 0 < solved < repeats
    row.problems += lint(task, oracle_passed=solved == repeats)
    if "impossible" in task.tags:  # the oracle follows the instruction: an impossible variant must fail it
        if solved:
            row.problems.append("impossible variant solved by the oracle: its tests do not contradict it")
    elif solved < repeats:
        bad = next(r for r in runs if not r.solved)
        row.problems.append(f"oracle not solved: {bad.reason} {bad.error or bad.detail or ''}"[:200])
    null = await run_attempt(
        task, null_policy, pool, image, run_id=pool.run_id, model_name="null", stations=stations
    )
    row.verdicts = [f"oracle {r.reason} {r.reward:g}" for r in runs] + [f"null {null.reason} {null.reward:g}"]
    row.attempts = [*runs, null]
    row.null = "solved" if null.solved else "not solved"
    if null.solved:
        row.problems.append("the untouched workspace is solved: the tests check nothing the agent must do")
    row.seconds = time.monotonic() - t0
    return row


async def validate(
    tasks: list[Task],
    repeats: int = 3,
    concurrency: int = 4,
    batch_grading: int = 0,
    sandbox: str = DEFAULT,
    sandbox_options: dict | None = None,
) -> list[Row]:
    """With batch_grading N > 1 the attempts are graded as `harness eval --batch-grading N` grades them;
    `sandbox` names the backend (agent/sandbox/registry.py) whose pool makes the sandboxes."""
    backend = sandbox_backend(sandbox)
    if batch_grading > 1:
        backend.require("batch_grading", f"batch grading of {batch_grading}")
    images = await sandbox_images(backend, sandbox_options, tasks, log=lambda m: print(m, file=sys.stderr))
    pool_class = backend.pool(sandbox_options)
    slots = asyncio.Semaphore(concurrency)
    async with pool_class(
        run_id=f"validate-{int(time.time())}", warm=2, max_containers=concurrency * (repeats + 1) + 2
    ) as pool:
        stations = GradingStations(pool, batch_grading) if batch_grading > 1 else None
        # each task: `repeats` oracle attempts and the null agent's, on the task's image
        expect_attempts(
            pool, [(t, images[t.id]) for t in tasks for _ in range(repeats + 1)], stations, concurrency
        )

        async def one(t: Task) -> Row:
            async with slots:
                try:
                    return await validate_task(t, pool, images[t.id], repeats, stations)
                except Exception as e:  # report the task, keep validating the others
                    return Row(t.id, problems=[f"{type(e).__name__}: {e}"[:200]])

        try:
            return await asyncio.gather(*(one(t) for t in tasks))
        finally:
            if stations is not None:
                await stations.close()


def tight_budgets(rows: list[Row], share: float = 0.5) -> list[str]:
    """A note per task whose oracle grading used over `share` of its time budget: it passes here and times
    out on a busier machine (a CI runner, a run at high concurrency)."""
    return [
        f"note: {r.task}: the oracle's hidden tests took {r.tests_seconds:.0f}s of their"
        f" {r.tests_budget:.0f}s; a busier machine runs out of time:"
        " make the tests cheaper or raise [verifier] timeout_sec"
        for r in rows
        if r.tests_budget and r.tests_seconds > share * r.tests_budget
    ]


def main(args) -> int:
    from agent.config import backend_options
    from tasks.loader import load_suite

    tasks = load_suite(getattr(args, "suite", None) or "builtin")
    if getattr(args, "no_internet", False):
        tasks = offline(tasks)
    for line in network_lines(tasks):
        print(line, file=sys.stderr)
    t0 = time.monotonic()
    rows = asyncio.run(
        validate(
            tasks,
            repeats=args.repeats,
            concurrency=args.concurrency,
            sandbox=args.sandbox,
            sandbox_options=backend_options(args, args.sandbox),
        )
    )
    width = max(len(r.task) for r in rows)
    print(f"{'task':<{width}}  oracle  null        flaky  seconds  tests/budget  problems")
    for r in rows:
        tests = f"{r.tests_seconds:.0f}/{r.tests_budget:.0f}s" if r.tests_budget else ""
        print(
            f"{r.task:<{width}}  {r.oracle:<6}  {r.null:<10}  {'yes' if r.flaky else 'no':<5}  "
            f"{r.seconds:7.1f}  {tests:<12}  {'; '.join(r.problems)}"
        )
    for line in tight_budgets(rows):
        print(line, file=sys.stderr)
    bad = [r for r in rows if not r.ok]
    print(f"{len(rows) - len(bad)}/{len(rows)} tasks valid in {time.monotonic() - t0:.0f}s")
    if getattr(args, "mutants", 0):  # then test strength, of the valid tasks (evaluators/mutants.py)
        from evaluators import mutants

        mutants.main([t for t, r in zip(tasks, rows) if r.ok], args)
    return 1 if bad else 0
