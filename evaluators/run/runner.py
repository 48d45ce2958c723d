"""Runs many attempts concurrently and records each one as it finishes.

One attempt: fresh sandbox -> starting files -> a policy acts (evaluators/run/policies.py: the agent loop,
the oracle, or nothing) -> changes captured -> sandbox destroyed -> graded in a fresh container -> one record.
Model calls and sandbox work overlap under asyncio; separate limits bound concurrent attempts,
model requests and containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import traceback
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Awaitable, Callable, Optional

from agent.config import LoopConfig, default_reply_tokens
from agent.loop import LoopResult
from agent.models import get_model
from agent.models.base import Model
from agent.prompt_format import TOOLS
from agent.sandbox import (
    Changes,
    FilesNotWritten,
    Sandbox,
    SandboxPool,
    SandboxSpec,
    SandboxUnresponsive,
)
from evaluators.grading.grade import GradingStations, batchable, grade
from evaluators.grading.kind import Kind
from evaluators.grading.verdict import Verdict
from evaluators.run.config import EvalConfig
from evaluators.run.policies import Policy, loop_policy
from evaluators.run.progress import Progress, attempt_name
from evaluators.run.task_images import build_images, sandbox_images
from results import telemetry
from results.errors import InfraError, OracleFailed, UserError
from results.flags import scan_flags
from results.schema import Attempt, KeptChanges, attempt_key
from tasks import kinds
from tasks.model import Task

MAX_BATCH_GRADING = 1000  # attempts one grading container may grade (each its own uid from 10002)
INFRA_RETRIES = 2  # an attempt hit by an infrastructure error is run again this many times


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# the provider refused the conversation's content: the attempt's own failure
REJECTED_STATUSES = (400, 413, 422)


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
    rec = _record(task, run_id, model_name, sample, temperature, image)
    rec.started_at = started
    result: Optional[LoopResult] = None
    verdict = None
    kind = kinds.of(task)  # what the attempt's sandbox is, what runs in it around the policy, what grades
    kept: dict[str, bytes] = {}
    dur = rec.durations
    async with contextlib.AsyncExitStack() as stack:  # the sandbox is released when the block ends
        sb, dur.acquire = await _acquire(stack, pool, image, kind.limits(task), task.id)
        t = time.monotonic()
        await _set_up(task, kind, sb)
        dur.setup, t = time.monotonic() - t, time.monotonic()
        if kind.has_steps(task):  # the agent and a verifier per step
            with telemetry.span("grade", kind.span(task)) as span:
                verdict, result, kept, changes = await kind.run_steps(task, policy, sb, pool, image)
                span.set(_verdict_attrs(verdict))
            dur.agent = time.monotonic() - t
        else:
            try:
                result = await policy(task, sb)
            except OracleFailed as e:
                rec.error = str(e)
            kept = await kind.after_agent(task, sb)
            dur.agent, t = time.monotonic() - t, time.monotonic()
            changes = await _capture(kind, task, sb)
            dur.capture = time.monotonic() - t
            if kind.in_place:  # e.g. tamper checks, then verification while the agent's sandbox lives
                verdict = await _traced_grade(kind, task, kind.verify_in_place(task, sb, pool, changes))
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
        verdict = await _traced_grade(kind, task, grade(task, changes, pool, image, stations, kept))
    _record_verdict(rec, verdict, kept)
    rec.durations.total = time.monotonic() - t0
    rec.finished_at = now()
    return rec


async def _acquire(
    stack: contextlib.AsyncExitStack, pool: SandboxPool, image: str, limits: SandboxSpec, task_id: str
) -> tuple[Sandbox, float]:
    """(the attempt's sandbox, released when the stack closes; the seconds it took to get it)."""
    t = time.monotonic()
    with telemetry.span("sandbox acquire", {"harness.sandbox.image": image}) as span:
        sb = await stack.enter_async_context(pool.sandbox(image, limits, task=task_id))
        warm = getattr(sb, "warm_start", None)  # None: a pool that does not say (k8s)
        span.set({"harness.sandbox.warm": warm})
    seconds = time.monotonic() - t
    if telemetry.metrics() and warm is not None:
        telemetry.metrics().acquired(seconds, warm)
    return sb, seconds


async def _set_up(task: Task, kind: Kind, sb: Sandbox) -> None:
    """The task's starting files and its kind's preparation, then the baseline the changes are read from."""
    try:
        await sb.put_files(task.workspace_files, executable=task.executable_files)
    except FilesNotWritten as e:  # nothing of the agent's yet: the task's files, or the engine
        raise InfraError(str(e)) from None
    await kind.prepare(task, sb)
    await sb.mark_baseline()


async def _traced_grade(kind: Kind, task: Task, grading: Awaitable[Optional[Verdict]]) -> Optional[Verdict]:
    """A grading's verdict (None: the kind leaves it to the fresh grading), traced as a "grade" span."""
    with telemetry.span("grade", kind.span(task)) as span:
        verdict = await grading
        if verdict is not None:
            span.set(_verdict_attrs(verdict))
    return verdict


async def _capture(kind: Kind, task: Task, sb: Sandbox) -> Changes:
    """The agent's final changes, as its kind reads them from the sandbox."""
    with telemetry.span("capture changes") as span:
        changes = await kind.capture(task, sb)
        span.set(
            {"harness.changes.files": len(changes.paths), "harness.changes.rejected": len(changes.rejected)}
        )
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


def _verdict_attrs(verdict) -> dict:
    return {
        "harness.reward": verdict.reward,
        "harness.reason": verdict.reason,
        "harness.solved": verdict.solved,
    }


def containers_per_attempt(task: Task) -> int:
    """Sandboxes one attempt takes from the pool (its kind says: the agent's, and a grading container unless
    the verdict is read on the host or in the agent's own container)."""
    return kinds.of(task).containers(task)


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


def _record(task: Task, run_id: str, model_name: str, sample: int, temperature: float, image: str) -> Attempt:
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


async def attempt_with_retries(
    task: Task, make_policy: Callable[[], Policy], pool: SandboxPool, image: str, **kw
) -> Attempt:
    """One attempt's trace (an `invoke_agent` span over every try) around _attempt_with_retries; the record
    keeps its trace id."""
    model, key = kw["model_name"], attempt_key(kw["run_id"], task.id, kw.get("sample", 0))
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": telemetry.AGENT_NAME,
        "gen_ai.conversation.id": key,
        "gen_ai.provider.name": telemetry.provider_name(model),
        "gen_ai.request.model": model,
        "harness.run.id": kw["run_id"],
        "harness.task.id": task.id,
        "harness.sample": kw.get("sample", 0),
        "openinference.span.kind": "AGENT",
    }
    m = telemetry.metrics()
    with telemetry.span(f"invoke_agent {telemetry.AGENT_NAME}", attrs, root=True) as span:
        telemetry.event("attempt_started", key=key, task_id=task.id, sample=kw.get("sample", 0))
        if m:
            m.in_flight.inc()
        try:
            rec = await _attempt_with_retries(task, make_policy, pool, image, span, **kw)
        finally:
            if m:
                m.in_flight.dec()
        rec.trace_id = span.trace_id
        span.set(
            {
                "harness.status": rec.status,
                "harness.reason": rec.reason,
                "harness.reward": rec.reward,
                "harness.exit_reason": rec.exit_reason,
                "gen_ai.usage.input_tokens": rec.prompt_tokens,
                "gen_ai.usage.output_tokens": rec.completion_tokens,
            }
        )
        if rec.status == "error":
            span.set({"error.type": rec.reason})
    return rec


def attempt_finished(rec: Attempt) -> None:
    """After an attempt's record is durable: its log event and its metrics."""
    d = rec.durations
    telemetry.event(
        "attempt_finished",
        key=rec.key,
        task_id=rec.task_id,
        sample=rec.sample,
        status=rec.status,
        reason=rec.reason,
        exit_reason=rec.exit_reason,
        reward=rec.reward,
        steps=rec.n_steps,
        error=(rec.error or "")[:300] or None,
        durations=d.model_dump(),
        trace_id=rec.trace_id or None,
    )
    m = telemetry.metrics()
    if m:
        m.attempts.labels(rec.status, rec.reason).inc()
        m.attempt_duration.labels(rec.status).observe(d.total)
        m.cost.inc(rec.cost)


async def _attempt_with_retries(
    task: Task, make_policy: Callable[[], Policy], pool: SandboxPool, image: str, span, **kw
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
            span.event(
                "retry", {"harness.try": attempt_try, "error.type": type(e).__name__, "message": last[:500]}
            )
            telemetry.event(
                "infra_error",
                key=attempt_key(kw["run_id"], task.id, kw.get("sample", 0)),
                attempt_try=attempt_try,
                cause=type(e).__name__,
                error=last[:500],
                retry=attempt_try < INFRA_RETRIES,
            )
            if telemetry.metrics():
                telemetry.metrics().retries.labels(type(e).__name__).inc()
        except (UserError, asyncio.CancelledError):
            raise  # bad input stops the run with its one-line message; cancellation is the caller's
        except Exception as e:
            rec = _record(*rec_args)
            rec.status, rec.reason = "failed", "harness_error"
            rec.error = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"[:2000]
            rec.finished_at = now()
            return rec
    rec = _record(*rec_args)
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


async def run_eval(
    cfg: EvalConfig, tasks: list[Task], *, model_obj: Optional[Model] = None, progress: bool = True
) -> Path:
    """Evaluates cfg.model on `tasks` (cfg.samples each); returns the run folder (manifest + attempts.jsonl).
    `model_obj` is a model already loaded for cfg.model (the caller keeps it); `progress` draws the display.
    With cfg.batch_grading N > 1, up to N attempts of one image share a fresh grading container, each as its
    own user (evaluators/grading/grade.GradingStations; the tasks that may: grade.batchable).
    With cfg.cluster (a Ray address, evaluators/run/cluster.py) the attempts run on the cluster's nodes; with
    cfg.sandbox another backend (agent/sandbox/registry.py: k8s, ...) makes the sandboxes."""
    from results.manifest import Manifest
    from results.store import RunStore

    check_run(cfg, tasks)
    # the manifest records the reply-token limit the loop will use
    reply_tokens = cfg.loop.max_reply_tokens or default_reply_tokens(cfg.model)
    cfg = replace(cfg, loop=replace(cfg.loop, max_reply_tokens=reply_tokens))
    # The progress display starts now: loading a local model and building images take a while. The JSON
    # events replace it (both on stderr).
    bar = Progress() if progress and not telemetry.json_logs() else None
    stage = bar.set_stage if bar else (lambda text: None)
    try:
        # A bad model string, missing API key or adapter fails here: before images are built or a run
        # folder is made.
        stage(f"loading the model {cfg.model}")
        the_model = model_obj or get_model(cfg.model, **cfg.model_options)
        Pool, images = await sandbox_backend(cfg, tasks, stage)
        config = cfg.record([t.id for t in tasks], TOOLS)
        manifest = Manifest.build(cfg.model, config, tasks, images=images, seed=cfg.loop.seed)
        out_dir = cfg.run_dir()
        store = RunStore.open(out_dir, manifest) if cfg.resume else RunStore.create(out_dir, manifest)
        try:
            todo = _todo(cfg, store, tasks, bar, progress)
            if not todo:
                return out_dir
            if bar:
                bar.set_total(len(todo))
            if cfg.cluster:
                await _on_cluster(cfg, todo, tasks, images, store, the_model, bar)
            else:
                await _on_this_machine(cfg, todo, Pool, images, store, the_model, bar)
            store.finish()
        finally:
            store.close()
            if model_obj is None and hasattr(the_model, "close"):
                the_model.close()  # an in-process model: give its memory back now, not at exit
        return out_dir
    finally:
        if bar:
            bar.close()


def check_run(cfg: EvalConfig, tasks: list[Task]) -> None:
    """Settings and suites that cannot run, refused before anything starts."""
    if not tasks:
        raise UserError("no tasks selected: check the suite path and the filters")
    from agent.sandbox.registry import sandbox_backend as backend_named

    backend = backend_named(cfg.sandbox)  # a name no backend registered: one line naming the choices
    if cfg.samples < 1 or cfg.concurrency < 1:
        raise UserError("--samples and --concurrency must be at least 1")
    if not 0 <= cfg.batch_grading <= MAX_BATCH_GRADING:
        raise UserError(
            f"batch grading of {cfg.batch_grading} attempts per grading container: give 0 to "
            f"{MAX_BATCH_GRADING} (0 or 1: a grading container per attempt)"
        )
    if cfg.batch_grading > 1:
        backend.require("batch_grading", f"--batch-grading {cfg.batch_grading}")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise UserError(f"duplicate task ids in the suite: {', '.join(dup[:5])}: give each task a unique id")
    if cfg.retry_errors and cfg.resume is None:
        raise UserError("--retry-errors needs --resume DIR (the run whose errored attempts to run again)")
    if cfg.cluster:
        from evaluators.run.cluster import check_address, import_ray

        check_address(cfg.cluster), import_ray()
        backend.require("cluster", "--cluster")


async def sandbox_backend(cfg: EvalConfig, tasks: list[Task], stage: Callable[[str], None]):
    """The run's sandbox pool class (cfg.sandbox, from agent/sandbox/registry.py) and its tasks' images: the
    one place a backend is picked. A bad kubeconfig or a missing image fails here, before the run folder."""
    from agent.sandbox.registry import sandbox_backend as backend_named

    backend = backend_named(cfg.sandbox)
    if backend.has("own_images"):
        stage(f"building the images of {len(tasks)} tasks")
    images = await sandbox_images(backend, cfg.sandbox_options, tasks)
    if backend.has("local"):  # sandboxes left by harness processes that died (kill -9)
        await asyncio.to_thread(backend.prune, cfg.sandbox_options, True)
    return backend.pool(cfg.sandbox_options), images


def _todo(cfg: EvalConfig, store, tasks: list[Task], bar: Optional[Progress], progress: bool) -> list:
    """The (task, sample) pairs not recorded yet; on resume with retry_errors, those recorded as error too."""
    if cfg.resume and cfg.retry_errors:  # their records move to retried.jsonl; the attempts run again
        n = store.drop_errors()
        if progress or n:
            note = f"retrying {n} attempt(s) recorded as error"
            if bar:
                bar.say(note)
            else:
                print(f"harness eval: {note}", file=sys.stderr)
    done, run_id = store.done_keys(), store.run_id
    todo = [(t, s) for t in tasks for s in range(cfg.samples) if attempt_key(run_id, t.id, s) not in done]
    telemetry.event(
        "resume" if cfg.resume else "run_started",
        run_id=run_id,
        out=str(store.dir),
        model=cfg.model,
        recorded=len(done),  # on resume: kept and skipped
        todo=len(todo),
    )
    if cfg.resume and bar:
        bar.say(resume_note(store.dir, len(tasks) * cfg.samples - len(todo), len(todo)))
    return todo


async def _on_cluster(cfg: EvalConfig, todo: list, tasks: list[Task], images, store, the_model, bar) -> None:
    from evaluators.run.cluster import run_on_cluster

    def record(rec: Attempt):
        store.append(rec)  # durable before it counts as done
        attempt_finished(rec)
        if bar:
            bar.update(rec)

    try:
        await run_on_cluster(
            cfg,
            todo,
            tasks=tasks,
            images=images,
            run_id=store.run_id,
            model_obj=the_model,
            on_record=record,
            put_object=store.put_object,
        )
    except BaseException:
        if bar:
            bar.close()
        raise


async def _on_this_machine(cfg: EvalConfig, todo: list, Pool, images, store, the_model, bar) -> None:
    """The attempts on this machine: at most cfg.concurrency in flight, cfg.model_slots model requests."""
    model_slots = asyncio.Semaphore(cfg.model_slots)
    attempt_slots = asyncio.Semaphore(cfg.concurrency)
    async with Pool(
        run_id=store.run_id,
        warm=cfg.concurrency + 1,  # an agent and a grader container each
        max_containers=cfg.max_sandboxes or 2 * cfg.concurrency + 2,
    ) as pool:
        if telemetry.metrics():
            telemetry.metrics().pools[:] = [pool]  # one run's pool at a time (train runs several)
        stations = None
        if cfg.batch_grading > 1:  # the backend has batch_grading (check_run)
            # half as many grading containers as attempts in flight: a grading waits for a turn
            # rather than start a container that grades only one or two attempts
            stations = GradingStations(pool, cfg.batch_grading, max_containers=stations_for(cfg.concurrency))
        if hasattr(pool, "expect"):  # no warm container beyond what the attempts will take
            pool.expect(expected_containers([t for t, _ in todo], stations, cfg.concurrency))

        async def one(task: Task, sample: int):
            name = attempt_name(task.id, sample)
            phase = (lambda what: bar.phase(name, what)) if bar else None
            async with attempt_slots:
                if bar:
                    bar.start(name)
                rec = await attempt_with_retries(
                    task,
                    lambda: loop_policy(the_model, cfg.loop, model_slots, sample, phase),
                    pool,
                    images[task.id],
                    run_id=store.run_id,
                    model_name=cfg.model,
                    sample=sample,
                    temperature=cfg.loop.temperature,
                    keep=lambda t, ch: store.keep_changes(
                        t.workspace_files, ch.files, ch.deleted, ch.executable
                    ),
                    stations=stations,
                )
            # durable before it counts as done; the fsync waits on the disk, not on the event loop
            await asyncio.to_thread(store.append, rec)
            attempt_finished(rec)
            if bar:
                bar.update(rec)

        try:
            await _all_or_none([asyncio.ensure_future(one(t, s)) for t, s in todo], bar)
        finally:
            if stations is not None:
                await stations.close()


async def _all_or_none(jobs: list, bar: Optional[Progress]) -> None:
    """Waits for every attempt; when one raises (or the run is interrupted), says which attempts in flight
    were not recorded, cancels the others and raises."""
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        flying = bar.in_flight() if bar else []
        if bar:
            bar.close()  # the display ends: the messages follow on lines of their own
        if flying:
            print(
                f"harness eval: {len(flying)} attempts in flight were not recorded;\n"
                "  --resume runs them again from the start",
                file=sys.stderr,
            )
        for j in jobs:
            j.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*jobs, return_exceptions=True)
        raise


def resume_note(out_dir: Path, recorded: int, todo: int) -> str:
    """What --resume skips and what it runs again, and why (said before it starts)."""
    if not todo:
        return f"resuming {out_dir}: all {recorded} attempts are recorded; nothing to run"
    return (
        f"resuming {out_dir}: skipping {recorded} recorded attempts; running {todo} not recorded "
        "(never started, or in flight when the run stopped: those start over and are paid again)"
    )


async def run_task(
    model: str,
    task: Task,
    *,
    sample: int = 0,
    temperature: float = 0.0,
    cfg: Optional[LoopConfig] = None,
    model_options: Optional[dict] = None,
) -> Attempt:
    """One graded attempt of one task, without a run folder."""
    images = await build_images([task])
    the_model = get_model(model, **(model_options or {}))
    cfg = cfg or LoopConfig(temperature=temperature)
    from agent.sandbox.registry import DEFAULT
    from agent.sandbox.registry import sandbox_backend as backend_named

    async with backend_named(DEFAULT).pool()(warm=0, max_containers=3) as pool:
        return await run_attempt(
            task,
            loop_policy(the_model, cfg, asyncio.Semaphore(1), sample),
            pool,
            images[task.id],
            run_id=pool.run_id,
            model_name=model,
            sample=sample,
            temperature=temperature,
        )
