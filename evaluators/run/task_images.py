"""The images a list of tasks runs in on a sandbox backend (sandbox_images): each distinct build context is
built once, as the task's evaluator kind builds it (tasks/kinds.py: the task's image, and any its verifier
needs), or the backend names them."""

from __future__ import annotations

import asyncio

from agent.sandbox import Backend, content_hash
from evaluators.grading.kind import refuse_unsupported
from results.errors import UserError
from tasks import kinds
from tasks.model import Task


async def build_images(tasks: list[Task], log=print) -> dict[str, str]:
    """task id -> image id, building each distinct image once."""
    cache: dict[str, str] = {}
    out = {}
    for t in tasks:
        # The whole build context is part of the key: two tasks with one Dockerfile but different files
        # differ.
        key = content_hash(
            t.dockerfile or "",
            *[p + "\0" for p in sorted(t.build_context)],
            *[t.build_context[p] for p in sorted(t.build_context)],
            kinds.of(t).image_key(t),
        )
        if key not in cache:
            try:
                cache[key] = await asyncio.to_thread(kinds.of(t).build_image, t, log)
            except UserError as e:
                where = f"{t.path}/environment/Dockerfile" if t.path else f"task {t.id}"
                raise UserError(f"{where}: {e}") from None
        out[t.id] = cache[key]
    return out


async def sandbox_images(backend: Backend, options: dict, tasks: list[Task], log=print) -> dict[str, str]:
    """task id -> the image its sandboxes run on `backend` (agent/sandbox/registry.py): the images the backend
    names, or on a backend with own_images the tasks' own, built here. Tasks whose sandboxes need a
    capability the backend lacks (their kind's sandbox_needs) are refused first, with the fix."""
    if backend.has("own_images"):
        refuse_unsupported(tasks, backend)
        return await build_images(tasks, log)
    images = backend.images(tasks, options)  # a missing setting (--k8s-image) is said first
    refuse_unsupported(tasks, backend)
    return images
