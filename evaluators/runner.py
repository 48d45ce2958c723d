"""Runs many attempts concurrently and records each one as it finishes.

One attempt: fresh sandbox -> starting files -> a policy acts (evaluators/policies.py: the agent loop,
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
from typing import Callable, Optional

from agent.config import LoopConfig, default_reply_tokens
from agent.loop import LoopResult
from agent.models import get_model
from agent.models.base import Model
from agent.protocol import TOOLS
from agent.sandbox import Changes, FilesNotWritten, Limits, SandboxPool, SandboxUnresponsive, prune
from evaluators.grade import grade
from evaluators.policies import Policy, loop_policy
from evaluators.progress import Progress
from evaluators.task_images import build_images
from results.errors import InfraError, OracleFailed, UserError
from results.flags import scan_flags
from results.schema import Attempt, KeptChanges, attempt_key
from tasks.model import Task

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
) -> Attempt:
    """One attempt, start to record. Infrastructure failures raise InfraError (the caller retries);
    nothing the agent does in its sandbox raises: it is graded. `keep` stores the final changes in the
    run folder (RunStore.keep_changes) before the record that names them is written."""
    started, t0 = now(), time.monotonic()
    rec = _record(task, run_id, model_name, sample, temperature, image)
    rec.started_at = started
    result: Optional[LoopResult] = None
    verdict = None
    harbor = None
    kept: dict[str, bytes] = {}
    if task.harbor is not None:  # Harbor's runtime contract and verifier modes (evaluators/harbor_kind.py)
        from evaluators import harbor_kind as harbor
    limits = harbor.limits(task) if harbor else Limits.for_task(task.environment)
    async with pool.sandbox(image, limits, task=task.id) as sb:
        try:
            await sb.put_files(task.workspace_files, executable=task.executable_files)
        except FilesNotWritten as e:  # nothing of the agent's yet: the task's files, or the engine
            raise InfraError(str(e)) from None
        if harbor:
            await harbor.prepare(task, sb)
        await sb.mark_baseline()
        if harbor and task.harbor.steps:  # a multi-step Harbor task: the agent and a verifier per step
            verdict, result, kept, changes = await harbor.run_steps(task, policy, sb, pool, image)
        else:
            try:
                result = await policy(task, sb)
            except OracleFailed as e:
                rec.error = str(e)
            if harbor:  # the agent's processes end (not in shared mode); artifacts are collected
                kept = await harbor.after_agent(task, sb)
            if harbor:  # its processes live on: one of them may end the container while it is captured
                changes = await harbor.capture(sb)
            elif sb.dead:
                changes = Changes(rejected=["the sandbox died before its changes could be captured"])
            else:
                changes = await sb.changes()
            if (
                harbor
            ):  # tamper checks, then (snapshot, shared) verification while the agent's container lives
                verdict = await harbor.verify_agent(task, sb, pool, changes)
    if harbor and verdict is None:  # fresh mode
        verdict = await harbor.grade_fresh(task, changes, pool, image, kept)
    if result is not None:
        rec.steps, rec.messages, rec.exit_reason = result.steps, result.messages, result.exit_reason
        rec.n_steps = len(result.steps)
        rec.prompt_tokens = sum(s.prompt_tokens for s in result.steps)
        rec.completion_tokens = sum(s.completion_tokens for s in result.steps)
        rec.cost = sum(s.cost for s in result.steps)
        rec.durations.model, rec.durations.sandbox = result.model_seconds, result.tool_seconds
        rec.flags = scan_flags(result.steps)
        if result.exit_reason == "model_error":
            if (
                result.model_error_status not in REJECTED_STATUSES
            ):  # the provider failed, not the model: infra
                raise InfraError(result.model_error or "model error")
            rec.error = (result.model_error or "")[:2000]  # the conversation was refused: graded as it stands
    rec.patch_files = len(changes.paths)
    if keep is not None:
        rec.changes = await asyncio.to_thread(keep, task, changes)
    if changes.rejected and not verdict:
        rec.detail = "not captured: " + "; ".join(changes.rejected)[:300] + "\n"
    verdict = verdict or await grade(task, changes, pool, image)
    rec.reward, rec.solved, rec.reason, rec.tests = (
        verdict.reward,
        verdict.solved,
        verdict.reason,
        verdict.tests,
    )
    rec.status = "solved" if verdict.solved else "failed"
    rec.detail = (rec.detail + verdict.detail)[:1000]
    if harbor:  # what explains the verdict: test.sh's output in the record, files in the run folder
        rec.verifier_output = verdict.output
        rec.keep_files({**kept, **verdict.files})
    rec.durations.evaluation = verdict.seconds
    rec.durations.total = time.monotonic() - t0
    rec.finished_at = now()
    return rec


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
    """Retries infrastructure failures a bounded number of times; then records status=error. Any other
    exception (a bug, or something no check foresaw) is recorded as this attempt's failure: one attempt
    never aborts the run, and nothing an agent causes can turn its failure into an excluded error."""
    last, unresponsive = "", 0
    rec_args = (task, kw["run_id"], kw["model_name"], kw.get("sample", 0), kw.get("temperature", 0.0), image)
    for _ in range(1 + INFRA_RETRIES):
        try:
            return await run_attempt(task, make_policy(), pool, image, **kw)
        except (InfraError, OSError) as e:
            last = f"{type(e).__name__}: {e}"
            unresponsive += isinstance(e, SandboxUnresponsive)
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
    model: str,
    tasks: list[Task],
    *,
    samples: int = 1,
    temperature: float = 0.0,
    out_dir: Optional[Path] = None,
    concurrency: int = 4,
    resume: bool = False,
    retry_errors: bool = False,
    seed: int = 0,
    model_options: Optional[dict] = None,
    loop: Optional[LoopConfig] = None,
    model_concurrency: Optional[int] = None,
    max_sandboxes: Optional[int] = None,
    progress: bool = True,
    model_obj: Optional[Model] = None,
    suite: str = "",
    cluster: Optional[str] = None,
    sandbox: str = "docker",
    sandbox_options: Optional[dict] = None,
    filters: Optional[dict] = None,
) -> Path:
    """Evaluates `model` on `tasks` (samples each); returns the run folder (manifest + attempts.jsonl).
    With `cluster` (a Ray address, evaluators/cluster.py) the attempts run on the cluster's nodes; with
    sandbox="k8s" (agent/sandbox/k8s/) the sandboxes are pods of a Kubernetes cluster."""
    from results.manifest import Manifest
    from results.store import RunStore, default_run_dir

    if not tasks:
        raise UserError("no tasks selected: check the suite path and the filters")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise UserError(f"duplicate task ids in the suite: {', '.join(dup[:5])}: give each task a unique id")
    model_options = dict(model_options or {})
    cfg = loop or LoopConfig()
    # the manifest records the reply-token limit the loop will use
    reply_tokens = cfg.max_reply_tokens or default_reply_tokens(model)
    cfg = replace(cfg, temperature=temperature, seed=seed, max_reply_tokens=reply_tokens)
    config = {
        "model": model,
        "suite": suite,
        "tasks": sorted(ids),
        "samples": samples,
        "temperature": temperature,
        "model_options": {k: str(v) for k, v in model_options.items()},
        "loop": cfg.__dict__,
        "tools": TOOLS,
        "concurrency": concurrency,
        "model_concurrency": model_concurrency or concurrency,
        "filters": dict(filters or {}),
    }  # recorded, not compared on resume (results/manifest.RESUME_KEYS)
    if cluster:
        from evaluators.cluster import check_address, import_ray

        check_address(cluster), import_ray()
    # A bad model string, missing API key or adapter fails here: before images are built or a run folder
    # is made.
    the_model = model_obj or get_model(model, **model_options)
    if sandbox == "k8s":
        from agent.sandbox.k8s import k8s_images, k8s_pool

        if cluster:
            raise UserError("--cluster and --sandbox k8s do not combine yet: pick one")
        images = k8s_images(tasks, sandbox_options or {})
        Pool = k8s_pool(sandbox_options or {})  # a bad kubeconfig fails here, before the run folder is made
    else:
        Pool = SandboxPool
        images = await build_images(tasks)
        await asyncio.to_thread(prune, None, True)  # containers left by harness processes that died (kill -9)
    manifest = Manifest.build(model, config, tasks, images=images, seed=seed)
    out_dir = Path(out_dir) if out_dir else default_run_dir(model)
    store = RunStore.open(out_dir, manifest) if resume else RunStore.create(out_dir, manifest)
    try:
        if resume and retry_errors:  # their records move to retried.jsonl; the attempts run again
            n = store.drop_errors()
            if progress or n:
                print(f"harness eval: retrying {n} attempt(s) recorded as error", file=sys.stderr)
        done = store.done_keys()
        run_id = store.run_id
        todo = [(t, s) for t in tasks for s in range(samples) if attempt_key(run_id, t.id, s) not in done]
        if not todo:
            return out_dir
        model_slots = asyncio.Semaphore(model_concurrency or concurrency)
        attempt_slots = asyncio.Semaphore(concurrency)
        bar = Progress(total=len(todo), started=time.monotonic()) if progress else None
        if cluster:
            from evaluators.cluster import run_on_cluster

            def record(rec: Attempt):
                store.append(rec)  # durable before it counts as done
                if bar:
                    bar.update(rec)

            try:
                await run_on_cluster(
                    cluster,
                    todo,
                    tasks=tasks,
                    images=images,
                    run_id=run_id,
                    model=model,
                    model_obj=the_model,
                    model_options=model_options,
                    loop=cfg,
                    temperature=temperature,
                    concurrency=concurrency,
                    model_concurrency=model_concurrency,
                    on_record=record,
                    put_object=store.put_object,
                )
            except BaseException:
                if bar and bar.done < bar.total:
                    print(file=bar.stream)
                raise
            store.finish()
            return out_dir
        async with Pool(
            run_id=run_id,
            warm=concurrency + 1,  # an agent and a grader container each
            max_containers=max_sandboxes or 2 * concurrency + 2,
        ) as pool:

            async def one(task: Task, sample: int):
                async with attempt_slots:
                    rec = await attempt_with_retries(
                        task,
                        lambda: loop_policy(the_model, cfg, model_slots, sample),
                        pool,
                        images[task.id],
                        run_id=run_id,
                        model_name=model,
                        sample=sample,
                        temperature=temperature,
                        keep=lambda t, ch: store.keep_changes(
                            t.workspace_files, ch.files, ch.deleted, ch.executable
                        ),
                    )
                store.append(rec)  # durable before it counts as done
                if bar:
                    bar.update(rec)

            jobs = [asyncio.ensure_future(one(t, s)) for t, s in todo]
            try:
                await asyncio.gather(*jobs)
            except BaseException:
                if bar and bar.done < bar.total:
                    print(file=bar.stream)  # end the progress line: the error message follows on its own
                for j in jobs:
                    j.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.gather(*jobs, return_exceptions=True)
                raise
        store.finish()
    finally:
        store.close()
        if model_obj is None and hasattr(the_model, "close"):
            the_model.close()  # an in-process model: give its memory back now, not at exit
    return out_dir


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
    async with SandboxPool(warm=0, max_containers=3) as pool:
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
