"""A Harbor verifier's load map: what its pristine runs loaded (traced.LoadMap), from two traced runs of
the task's verifier on the task's image in the task's own mode, the null agent's (nothing changed) and the
oracle's (so that what only a working solution makes the verifier load is seen too). Cached per hidden
tests, environment, starting files and oracle (not per task id), image and verifier mode, in memory and on
disk (HARNESS_CACHE/loadmaps), valid while the tracer and the rule are the same; the first grading that
needs it makes it (`harness tasks validate`'s oracle run does, for every task it checks)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

from agent.sandbox.backends.docker.native import CACHE_DIR, TRACE_SOURCE
from evaluators.grading.harbor import runtime, traced
from results.errors import OracleFailed

_MEMORY: dict[str, traced.LoadMap] = {}
_LOCKS: dict[str, asyncio.Lock] = {}
RULE_SOURCE = Path(traced.__file__)


def key(task, image: str) -> str:
    """What the verifier's runs depend on: the hidden tests, the environment and the starting files (the
    grading hash, which leaves the task's id and instruction out: copies of one task share a map), the
    oracle, the image id and the mode; and the tracer's and the rule's sources."""
    from agent.sandbox.backends.docker.client import docker_client

    try:
        image_id = docker_client().images.get(image).id
    except Exception:  # not a local image name: its name is all there is
        image_id = image
    h = hashlib.sha256()
    for part in (task.grading_hash(), image_id, task.harbor.verifier_mode, task.harbor.workdir):
        h.update(str(part).encode() + b"\0")
    for name in sorted(task.solution_files):
        h.update(name.encode() + b"\0" + task.solution_files[name] + b"\0")
    h.update(TRACE_SOURCE.read_bytes() + RULE_SOURCE.read_bytes())
    return h.hexdigest()[:24]


async def get(task, pool, image: str, workdir: str) -> traced.LoadMap:
    """The load map of `task` on `image` (made now when no cache holds it)."""
    k = key(task, image)
    if k in _MEMORY:
        return _MEMORY[k]
    async with _LOCKS.setdefault(k, asyncio.Lock()):
        if k not in _MEMORY:
            path = CACHE_DIR / "loadmaps" / f"{k}.json"
            try:
                _MEMORY[k] = traced.LoadMap.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                m = await make(task, pool, image, workdir)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(m.__dict__, sort_keys=True))
                os.replace(tmp, path)  # atomic: concurrent graders agree
                _MEMORY[k] = m
    return _MEMORY[k]


async def make(task, pool, image: str, workdir: str) -> traced.LoadMap:
    """The two pristine runs, traced, and the map built from them."""
    runs = []
    for oracle in (False, True):
        trace, made = await pristine_run(task, pool, image, oracle)
        if trace is not None:
            runs.append((trace, made))
    wd = workdir.rstrip("/")
    return traced.build(wd, runs, {f"{wd}/{p}" for p in task.workspace_files})


async def pristine_run(task, pool, image: str, oracle: bool):
    """One attempt as the runner makes it (the task's files, its preparation, the baseline, the oracle or
    nothing, the artifacts, the capture) verified in the task's mode without any tamper check: (the
    verifier's trace, the absolute paths the run made or changed). (None, set()) when the oracle fails."""
    from evaluators.grading.harbor import tamper, verifier

    mode = task.harbor.verifier_mode
    async with pool.sandbox(image, runtime.limits(task), task=task.id) as sb:
        await sb.put_files(task.workspace_files, executable=task.executable_files)
        await runtime.prepare(task, sb)
        await sb.mark_baseline()
        if oracle:
            try:
                await runtime.oracle(task, sb)
            except OracleFailed:
                return None, set()
        kept = await runtime.after_agent(task, sb)
        changes = await runtime.capture(sb)
        if mode == "fresh":
            seen = tamper.fresh_changes(task, changes, kept, sb.workdir)
        else:
            original = set(sb.capture.baseline or {}) | set(task.workspace_files)
            seen = await tamper.attempt_changes(task, sb, changes, original)
            if isinstance(seen, str):
                return None, set()
            v = await verifier.verify_in_place(task, sb, pool)
    if mode == "fresh":
        v = await verifier.grade_fresh(task, changes, pool, image, kept, judged=False)
    made = {p for p, k in seen[0].items() if k != "D"}
    return getattr(v, "trace", None), made
