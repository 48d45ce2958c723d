"""Runs many attempts concurrently and records each one as it finishes.

One attempt, and its retries after an infrastructure error: evaluators/run/attempt.py. Here: the run around
the attempts. Model calls and sandbox work overlap under asyncio; separate limits
bound concurrent attempts, model requests and containers. What happens is announced to results/hooks.py's
observer, where telemetry's spans and metrics come from.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from agent.config import LoopConfig, default_reply_tokens
from agent.models import get_model
from agent.models.base import Model
from agent.prompt_format import TOOLS
from evaluators.grading.grade import GradingStations
from evaluators.run.attempt import attempt_with_retries, expect_attempts, run_attempt, stations_for
from evaluators.run.config import EvalConfig
from evaluators.run.policies import loop_policy
from evaluators.run.progress import Progress, attempt_name
from evaluators.run.task_images import build_images, sandbox_images
from results import hooks, telemetry
from results.errors import UserError
from results.schema import Attempt, attempt_key
from tasks.model import Task

MAX_BATCH_GRADING = 1000  # attempts one grading container may grade (each its own uid from 10002)


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
    from results.run_writer import RunStore

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
        hooks.observer().recorded(rec)
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
        hooks.observer().run_pool(pool)
        stations = None
        if cfg.batch_grading > 1:  # the backend has batch_grading (check_run)
            # half as many grading containers as attempts in flight: a grading waits for a turn
            # rather than start a container that grades only one or two attempts
            stations = GradingStations(pool, cfg.batch_grading, max_containers=stations_for(cfg.concurrency))
        if hasattr(pool, "expect"):  # no warm container beyond what the attempts will take
            expect_attempts(pool, [(t, images[t.id]) for t, _ in todo], stations, cfg.concurrency)

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
                        t.workspace_files, ch.files, ch.deleted, ch.executable, ch.links
                    ),
                    stations=stations,
                )
            # durable before it counts as done; the fsync waits on the disk, not on the event loop
            await asyncio.to_thread(store.append, rec)
            hooks.observer().recorded(rec)
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
