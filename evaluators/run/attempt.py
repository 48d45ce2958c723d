"""One attempt, start to record: fresh sandbox -> starting files -> a policy acts (evaluators/run/policies.py:
the agent loop, the oracle, or nothing) -> changes captured -> sandbox destroyed -> graded in a fresh
container (or as the task's evaluator kind says) -> one record; and its retries after an infrastructure error
(attempt_with_retries). evaluators/run/runner.py runs many at once. Each phase is announced to
results/hooks.py's observer (where telemetry's spans and metrics come from).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from datetime import datetime, timezone
from typing import Awaitable, Callable, Optional

from agent.loop import LoopResult
from agent.sandbox import Changes, FilesNotWritten, Sandbox, SandboxPool, SandboxSpec, SandboxUnresponsive
from evaluators.grading.grade import GradingStations, batchable, grade
from evaluators.grading.kind import InPlace, Kind, OwnSandbox, Steps
from evaluators.grading.verdict import Verdict
from evaluators.run.attempt_sandbox import sandbox_of
from evaluators.run.policies import Policy
from results import hooks
from results.errors import InfraError, OracleFailed, UserError
from results.flags import scan_flags
from results.schema import Attempt, KeptChanges, attempt_key
from tasks import kinds
from tasks.model import Task


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# the provider refused the conversation's content: the attempt's own failure
REJECTED_STATUSES = (400, 413, 422)
INFRA_RETRIES = 2  # an attempt hit by an infrastructure error is run again this many times


def containers_per_attempt(task: Task) -> int:
    """Sandboxes one attempt takes from the pool (its kind says: the agent's, and a grading container unless
    the verdict is read on the host or in the agent's own container)."""
    return sandbox_of(kinds.of(task)).containers(task)


def expected_containers(todo: list[Task], stations: Optional[GradingStations], concurrency: int) -> int:
    """Containers the attempts will take from the pool; with batch grading, the shared grading containers:
    one per `batch` attempts, but at least as many as grade at once. Too few costs the last acquires a cold
    start; too many, containers made and destroyed unused (20 attempts at concurrency 8: 3 of 27 were)."""
    if stations is None:
        return sum(containers_per_attempt(t) for t in todo)
    shared = sum(batchable(t) for t in todo)
    rest = sum(containers_per_attempt(t) - (1 if batchable(t) else 0) for t in todo)
    return rest + (max(-(-shared // stations.batch), min(stations_for(concurrency), shared)) if shared else 0)


def stations_for(concurrency: int) -> int:
    """Grading containers at once with batch grading: one per two attempts in flight."""
    return max(1, (concurrency + 1) // 2)


def expect_attempts(
    pool: SandboxPool,
    todo: list[tuple[Task, str]],
    stations: Optional[GradingStations] = None,
    concurrency: int = 1,
) -> None:
    """Tells the pool what the attempts (task, image) will take from it, in all and of each image: it keeps
    warm no container of an image that no attempt will ask for (with an image per task, each task's last
    warm containers were made and destroyed unused)."""
    by_image: dict[str, list[Task]] = {}
    for task, image in todo:
        by_image.setdefault(image, []).append(task)
    pool.expect(
        expected_containers([t for t, _ in todo], stations, concurrency),
        {image: expected_containers(tasks, stations, concurrency) for image, tasks in by_image.items()},
    )


async def attempt_with_retries(
    task: Task, make_policy: Callable[[], Policy], pool: SandboxPool, image: str, **kw
) -> Attempt:
    """One attempt, announced as one over every try (its trace); the record keeps the trace id."""
    sample = kw.get("sample", 0)
    key = attempt_key(kw["run_id"], task.id, sample)
    with hooks.observer().attempt(key, task.id, kw["run_id"], sample, kw["model_name"]) as watch:
        rec = await _attempt_with_retries(task, make_policy, pool, image, watch, **kw)
        rec.trace_id = watch.trace_id
        watch.finished(rec)
    return rec


async def _attempt_with_retries(
    task: Task,
    make_policy: Callable[[], Policy],
    pool: SandboxPool,
    image: str,
    watch: hooks.AttemptWatch,
    **kw,
) -> Attempt:
    """Retries infrastructure failures a bounded number of times; then records status=error. Any other
    exception (a bug, or something no check foresaw) is recorded as this attempt's failure: one attempt
    never aborts the run, and nothing an agent causes can turn its failure into an excluded error."""
    last, unresponsive = "", 0
    rec_args = (task, kw["run_id"], kw["model_name"], kw.get("sample", 0), kw.get("temperature", 0.0), image)
    for attempt_try in range(1 + INFRA_RETRIES):
        try:
            return await run_attempt(task, make_policy(), pool, image, **kw)
        except (InfraError, OSError) as e:
            last = f"{type(e).__name__}: {e}"
            unresponsive += isinstance(e, SandboxUnresponsive)
            watch.retrying(attempt_try, e, again=attempt_try < INFRA_RETRIES)
        except (UserError, asyncio.CancelledError):
            raise  # bad input stops the run with its one-line message; cancellation is the caller's
        except Exception as e:
            rec = new_record(*rec_args)
            rec.status, rec.reason = "failed", "harness_error"
            rec.error = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"[:2000]
            rec.finished_at = now()
            return rec
    rec = new_record(*rec_args)
    if unresponsive == 1 + INFRA_RETRIES:  # every try: not a passing fault, the attempt's own doing
        rec.status, rec.reason, rec.error, rec.finished_at = (
            "failed",
            "sandbox_unresponsive",
            last[:2000],
            now(),
        )
        return rec
    rec.status, rec.reason, rec.error, rec.finished_at = "error", "infra_error", last[:2000], now()
    return rec


async def run_attempt(
    task: Task,
    policy: Policy,
    pool: SandboxPool,
    image: str,
    *,
    run_id: str,
    model_name: str,
    sample: int = 0,
    temperature: float = 0.0,
    keep: Optional[Callable[[Task, Changes], KeptChanges]] = None,
    stations: Optional[GradingStations] = None,
) -> Attempt:
    """One attempt, start to record. Infrastructure failures raise InfraError (the caller retries);
    nothing the agent does in its sandbox raises: it is graded. `keep` stores the final changes in the
    run folder (RunStore.keep_changes) before the record that names them is written."""
    started, t0 = now(), time.monotonic()
    rec = new_record(task, run_id, model_name, sample, temperature, image)
    rec.started_at = started
    result: Optional[LoopResult] = None
    verdict = None
    kind = kinds.of(
        task
    )  # what grades, and (its own sandbox or the ordinary one) what runs around the policy
    box = sandbox_of(kind)
    kept: dict[str, bytes] = {}
    dur = rec.durations
    async with contextlib.AsyncExitStack() as stack:  # the sandbox is released when the block ends
        sb, dur.acquire = await _acquire(stack, pool, image, box.limits(task), task.id)
        t = time.monotonic()
        await _set_up(task, box, sb)
        dur.setup, t = time.monotonic() - t, time.monotonic()
        if isinstance(kind, Steps) and kind.has_steps(task):  # the agent and a verifier per step
            with hooks.observer().grading(kind.span(task)) as watch:
                verdict, result, kept, changes = await kind.run_steps(task, policy, sb, pool, image)
                watch.graded(verdict)
            dur.agent = time.monotonic() - t
        else:
            try:
                result = await policy(task, sb)
            except OracleFailed as e:
                rec.error = str(e)
            kept = await box.after_agent(task, sb)
            dur.agent, t = time.monotonic() - t, time.monotonic()
            changes = await _capture(box, task, sb)
            dur.capture = time.monotonic() - t
            if isinstance(kind, InPlace):  # e.g. tamper checks, then verification while the sandbox lives
                verdict = await _graded(kind, task, kind.verify_in_place(task, sb, pool, changes))
            if getattr(sb, "agent_container", None) is not None:  # a root agent killed its command server
                rec.detail += "helper killed by the agent: graded from its container's filesystem\n"
    if result is not None:
        _record_loop(rec, result)
    rec.patch_files = len(changes.paths)
    if keep is not None:
        rec.changes = await asyncio.to_thread(keep, task, changes)
    if changes.rejected and not verdict:
        rec.detail += "not captured: " + "; ".join(changes.rejected)[:300] + "\n"
    if verdict is None:
        verdict = await _graded(kind, task, grade(task, changes, pool, image, stations, kept))
    _record_verdict(rec, verdict, kept)
    rec.durations.total = time.monotonic() - t0
    rec.finished_at = now()
    return rec


async def _acquire(
    stack: contextlib.AsyncExitStack, pool: SandboxPool, image: str, limits: SandboxSpec, task_id: str
) -> tuple[Sandbox, float]:
    """(the attempt's sandbox, released when the stack closes; the seconds it took to get it)."""
    t = time.monotonic()
    with hooks.observer().acquire(image) as watch:
        sb = await stack.enter_async_context(pool.sandbox(image, limits, task=task_id))
        seconds = time.monotonic() - t
        watch.acquired(getattr(sb, "warm_start", None), seconds)  # None: a pool that does not say (k8s)
    return sb, seconds


async def _set_up(task: Task, box: OwnSandbox, sb: Sandbox) -> None:
    """The task's starting files and its kind's preparation, then the baseline the changes are read from."""
    try:
        await sb.put_files(task.workspace_files, executable=task.executable_files)
    except FilesNotWritten as e:  # nothing of the agent's yet: the task's files, or the engine
        raise InfraError(str(e)) from None
    await box.prepare(task, sb)
    await sb.mark_baseline()


async def _graded(kind: Kind, task: Task, grading: Awaitable[Optional[Verdict]]) -> Optional[Verdict]:
    """A grading's verdict (None: the kind leaves it to the fresh grading), announced as one."""
    with hooks.observer().grading(kind.span(task)) as watch:
        verdict = await grading
        watch.graded(verdict)
    return verdict


async def _capture(box: OwnSandbox, task: Task, sb: Sandbox) -> Changes:
    """The agent's final changes, as its kind reads them from the sandbox."""
    with hooks.observer().capture() as watch:
        changes = await box.capture(task, sb)
        watch.captured(len(changes.paths), len(changes.rejected))
    return changes


def _record_loop(rec: Attempt, result: LoopResult) -> None:
    """What the policy's loop did, into the record. A provider that failed (not a refusal of the
    conversation's content) is an infrastructure error: InfraError, and the attempt runs again."""
    rec.steps, rec.messages, rec.exit_reason = result.steps, result.messages, result.exit_reason
    rec.n_steps = len(result.steps)
    rec.prompt_tokens = sum(s.prompt_tokens for s in result.steps)
    rec.completion_tokens = sum(s.completion_tokens for s in result.steps)
    rec.cost = sum(s.cost for s in result.steps)
    rec.durations.model, rec.durations.sandbox = result.model_seconds, result.tool_seconds
    rec.flags = scan_flags(result.steps)
    rec.durations.model_unanswered = result.unanswered_model_seconds
    if result.unanswered_model_seconds and result.exit_reason == "wall_time":
        rec.detail = (
            f"the model had not replied after {result.unanswered_model_seconds:.1f} s when the "
            f"wall-time limit ended the attempt (step {len(result.steps)})\n"
        )
    if result.exit_reason == "model_error":
        if result.model_error_status not in REJECTED_STATUSES:  # the provider failed, not the model: infra
            raise InfraError(result.model_error or "model error")
        rec.error = (result.model_error or "")[:2000]  # the conversation was refused: graded as it stands


def verdict_into(rec: Attempt, verdict: Verdict) -> None:
    """A verdict's outcome into a record (a fresh attempt's, or a rescored copy's): reward, solved, reason,
    the tests' outcomes and the status they make."""
    rec.reward, rec.solved, rec.reason, rec.tests = (
        verdict.reward,
        verdict.solved,
        verdict.reason,
        verdict.tests,
    )
    rec.status = "solved" if verdict.solved else "failed"


def _record_verdict(rec: Attempt, verdict: Verdict, kept: dict[str, bytes]) -> None:
    """The verdict into the record, with what explains it: the verifier's output, and the files it and
    the kind kept (stored in the run folder)."""
    verdict_into(rec, verdict)
    rec.detail = (rec.detail + verdict.detail)[:1000]
    rec.verifier_output = verdict.output
    rec.keep_files({**kept, **verdict.files})
    rec.durations.evaluation = verdict.seconds


def new_record(
    task: Task, run_id: str, model_name: str, sample: int, temperature: float, image: str
) -> Attempt:
    """The record of one attempt, before anything happened (the one place an Attempt is started)."""
    return Attempt(
        key=attempt_key(run_id, task.id, sample),
        run_id=run_id,
        task_id=task.id,
        task_version=task.version,
        domain=task.domain,
        difficulty=task.difficulty,
        split=task.split,
        sample=sample,
        model=model_name,
        temperature=temperature,
        image=image,
        grading_hash=task.grading_hash(),
        impossible="impossible" in task.tags,
    )
