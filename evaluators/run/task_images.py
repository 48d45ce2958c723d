"""The images a list of tasks runs in on a sandbox backend (sandbox_images): each distinct build context is
built once, from the task's Dockerfile (or the base image), or as its evaluator kind builds it when the kind
has images of its own (the OwnImage capability, evaluators/grading/kind.py: e.g. Harbor's prebuilt image
and its verifier's); or the backend names them. Tasks whose sandboxes need a capability the backend lacks
are refused first (evaluators/run/attempt_sandbox.py)."""

from __future__ import annotations

import asyncio

from agent.sandbox import Backend, content_hash
from evaluators.grading.kind import OwnImage
from evaluators.run.attempt_sandbox import refuse_unsupported
from results.errors import UserError
from tasks import kinds
from tasks.model import Task


def _image_key(task: Task) -> str:
    """What, besides the build context, tells the task's image apart."""
    kind = kinds.of(task)
    return kind.image_key(task) if isinstance(kind, OwnImage) else repr(None)


def _build(task: Task, log) -> str:
    kind = kinds.of(task)
    if isinstance(kind, OwnImage):
        return kind.build_image(task, log)
    from agent.sandbox.backends.docker.images import task_image  # the backends with own_images run it

    return task_image(task.dockerfile, task.build_context, log)


async def build_images(tasks: list[Task], log=print) -> dict[str, str]:
    """task id -> image id, building each distinct image once on this host's Docker engine."""
    cache: dict[str, str] = {}
    out = {}
    for t in tasks:
        # The whole build context is part of the key: two tasks with one Dockerfile but different files
        # differ.
        key = content_hash(
            t.dockerfile or "",
            *[p + "\0" for p in sorted(t.build_context)],
            *[t.build_context[p] for p in sorted(t.build_context)],
            _image_key(t),
        )
        if key not in cache:
            try:
                cache[key] = await asyncio.to_thread(_build, t, log)
            except UserError as e:
                where = f"{t.path}/environment/Dockerfile" if t.path else f"task {t.id}"
                raise UserError(f"{where}: {e}") from None
        out[t.id] = cache[key]
    return out


async def sandbox_images(backend: Backend, options: dict, tasks: list[Task], log=print) -> dict[str, str]:
    """task id -> the image its sandboxes run on `backend` (agent/sandbox/registry.py): the images the backend
    names, or on a backend with own_images the tasks' own, built here. Tasks whose sandboxes need a
    capability the backend lacks are refused first, with the fix."""
    if backend.has("own_images"):
        refuse_unsupported(tasks, backend)
        return await build_images(tasks, log)
    images = backend.images(tasks, options)  # a missing setting (--k8s-image) is said first
    refuse_unsupported(tasks, backend)
    return images
