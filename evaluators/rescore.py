"""`harness rescore`: grade a run's kept changes again with the current (or a given) version of each task,
in fresh containers, without calling the model; the result is a new run folder.

Each attempt's final changes are in the source run folder (Attempt.changes, results/store.py). They go
through the same grading as in `eval` (evaluators/grading: tamper check, fresh container, hidden tests).
The new run's manifest says where it came from (config.rescore): the source run, each task's grading hash
before (from the records) and after (Task.grading_hash of the tasks loaded now), and every verdict that
changed. What cannot be graded again keeps its recorded verdict and is listed there too: attempts of a run
written before changes were kept, of tasks no longer in the suite, infrastructure errors (nothing to
grade), and Harbor tasks verified in the agent's own container (snapshot/shared: that container is gone).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

from agent.sandbox import DEFAULT, Changes, SandboxPool, sandbox_backend
from evaluators.grading.grade import grade
from evaluators.grading.kind import InPlace
from evaluators.grading.verdict import Verdict
from evaluators.run.attempt import INFRA_RETRIES, now, verdict_into
from evaluators.run.task_images import sandbox_images
from results.errors import InfraError, UserError
from results.manifest import Manifest
from results.run_writer import RunStore
from results.schema import Attempt, KeptChanges, attempt_key
from results.store import RunReader, kept_files, open_run, read_object, verify_objects
from tasks import kinds
from tasks.loader import load_suite
from tasks.model import Task


def _changes(run_dir: Path, kept: KeptChanges) -> Changes:
    files = kept_files(run_dir, kept)
    rejected = [f"{p}: over the keep cap when recorded, not kept" for p in kept.omitted]
    return Changes(
        files=files,
        executable=set(kept.executable),
        deleted=list(kept.deleted),
        rejected=rejected,
        links=dict(kept.links),  # {} in runs written before links were kept
    )


def _why_not(attempt: Attempt, task: Optional[Task]) -> str:
    if task is None:
        return "task not in the suite"
    if attempt.status == "error":
        return "infrastructure error (nothing to grade)"
    if attempt.changes is None:
        return "changes not kept (a run written before they were)"
    kind = kinds.of(task)  # an InPlace kind may have verified in the agent's container (now gone)
    return kind.not_regradable(task) if isinstance(kind, InPlace) else ""


async def rescore_run(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    suite: Optional[str] = None,
    concurrency: int = 4,
    log=print,
    sandbox: str = DEFAULT,
    sandbox_options: Optional[dict] = None,
) -> Path:
    """Grades every attempt of `run_dir` again into the new run folder `out_dir`, in the sandboxes of the
    backend `sandbox` (agent/sandbox/registry.py); returns it."""
    backend = sandbox_backend(sandbox)
    source = open_run(run_dir)
    records = list(source.iter_attempts())
    if not records:
        raise UserError(f"{run_dir}: no attempts recorded, nothing to rescore")
    verify_objects(source.dir, records)  # a damaged run folder stops here, before anything is written
    spec, tasks = _load_tasks(source, records, suite, run_dir)
    images = await sandbox_images(backend, sandbox_options, list(tasks.values()), log=log)
    after = {tid: t.grading_hash() for tid, t in tasks.items()}
    config = dict(source.manifest.config)
    config["rescore"] = _provenance(source, run_dir, spec, records, tasks)
    manifest = Manifest.build(
        source.manifest.model, config, list(tasks.values()), images=images, seed=source.manifest.seed
    )
    store = RunStore.create(out_dir, manifest)
    flips: list[dict] = []
    kept_old: list[dict] = []
    try:
        slots = asyncio.Semaphore(concurrency)
        Pool = backend.pool(sandbox_options)
        async with Pool(run_id=store.run_id, warm=concurrency, max_containers=concurrency + 2) as pool:

            async def one(old: Attempt) -> None:
                task = tasks.get(old.task_id)
                new = old.model_copy(deep=True)
                new.run_id, new.key = store.run_id, attempt_key(store.run_id, old.task_id, old.sample)
                why = _why_not(old, task)
                _copy_objects(source, store, old.changes)
                if why:
                    kept_old.append({"task_id": old.task_id, "sample": old.sample, "why": why})
                    new.detail = f"not re-graded: {why}\n{old.detail}"[:1000]
                    store.append(new)
                    return
                changes = _changes(source.dir, old.changes)
                async with slots:
                    started = time.monotonic()
                    verdict, error = await _grade_again(task, changes, pool, images[task.id])
                _record_verdict(new, verdict, error, started)
                new.grading_hash, new.task_version, new.image = after[task.id], task.version, images[task.id]
                new.impossible = "impossible" in task.tags
                new.finished_at = now()
                if (new.status, new.reward) != (old.status, old.reward):
                    flips.append(_flip(old, new))
                store.append(new)

            await asyncio.gather(*(one(a) for a in records))
        flips.sort(key=lambda f: (f["task_id"], f["sample"]))
        config["rescore"]["changed_verdicts"] = flips
        config["rescore"]["not_regraded"] = sorted(kept_old, key=lambda f: (f["task_id"], f["sample"]))
        store.manifest = store.manifest.model_copy(update={"config": config})
        store.finish()
    finally:
        store.close()
    return Path(out_dir)


def _copy_objects(source: RunReader, store: RunStore, kept: Optional[KeptChanges]) -> None:
    """The new run folder holds its own copy of the kept changes' objects."""
    if kept is not None:
        for digest in [*kept.files.values(), kept.diff]:
            if digest:
                store.put_object(read_object(source.dir, digest))


def _load_tasks(
    source: RunReader, records: list[Attempt], suite: Optional[str], run_dir: str | Path
) -> tuple[str, dict[str, Task]]:
    """(the suite spec, the run's tasks in it by id): the given suite, else the one the manifest names."""
    spec = suite or source.manifest.config.get("suite") or ""
    if not spec:
        raise UserError(f"{run_dir}: the manifest names no task suite; give one with --tasks SUITE")
    wanted = {a.task_id for a in records}
    tasks = {t.id: t for t in load_suite(spec) if t.id in wanted}
    if not tasks:
        raise UserError(
            f"{spec}: none of the run's tasks ({', '.join(sorted(wanted)[:5])}) are in this suite"
        )
    return spec, tasks


def _provenance(
    source: RunReader, run_dir: str | Path, spec: str, records: list[Attempt], tasks: dict[str, Task]
) -> dict:
    """config.rescore before grading: the source run and each task's hashes before and after."""
    before = {a.task_id: a.grading_hash for a in records}
    after = {tid: t.grading_hash() for tid, t in tasks.items()}
    recorded = {t.id: t.hash for t in source.manifest.task_suite}
    return {
        "source_run": str(Path(run_dir)),
        "source_run_id": source.run_id,
        "suite": spec,
        "tasks_before": {
            tid: {"grading_hash": h, "content_hash": recorded.get(tid, "")} for tid, h in before.items()
        },
        "tasks_after": {
            tid: {"grading_hash": t.grading_hash(), "content_hash": t.content_hash()}
            for tid, t in tasks.items()
        },
        "tasks_changed": sorted(t for t in after if before.get(t) != after[t]),
    }


async def _grade_again(
    task: Task, changes: Changes, pool: SandboxPool, image: str
) -> tuple[Optional[Verdict], str]:
    """(the verdict, or None after INFRA_RETRIES infrastructure failures; the last failure)."""
    error = ""
    for _ in range(1 + INFRA_RETRIES):
        try:
            return await grade(task, changes, pool, image), error
        except InfraError as e:
            error = f"InfraError: {e}"
    return None, error


def _record_verdict(new: Attempt, verdict: Optional[Verdict], error: str, started: float) -> None:
    """Write the new verdict into the attempt's copy, or the infrastructure error that stopped it."""
    if verdict is None:
        new.status, new.reason, new.error, new.solved, new.reward = "error", "infra_error", error, False, 0.0
        return
    verdict_into(new, verdict)
    new.detail = verdict.detail[:1000]
    new.durations.evaluation = time.monotonic() - started


def _flip(old: Attempt, new: Attempt) -> dict:
    """One entry of config.rescore.changed_verdicts."""
    return {
        "task_id": old.task_id,
        "sample": old.sample,
        "before": old.status,
        "after": new.status,
        "reason_before": old.reason,
        "reason_after": new.reason,
    }
