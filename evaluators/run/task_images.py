"""The images a list of tasks runs in: each distinct build context is built once, from the task's Dockerfile
(or the base image), or as its evaluator kind builds it when the kind has images of its own (the OwnImage
capability, evaluators/grading/kind.py: e.g. Harbor's prebuilt image and its verifier's)."""

from __future__ import annotations

import asyncio

from agent.sandbox import content_hash
from agent.sandbox.images import task_image
from evaluators.grading.kind import OwnImage
from results.errors import UserError
from tasks import kinds
from tasks.model import Task


def own_image(task: Task) -> str:
    """What makes the task's image its own ("" when it runs on the base image)."""
    kind = kinds.of(task)
    if isinstance(kind, OwnImage):
        return kind.own_image(task)
    return "environment/Dockerfile" if task.dockerfile else ""


def refuse_own_images(tasks: list[Task], sandbox: str) -> None:
    """For a sandbox backend that runs only the base image (it names the images itself: --sandbox k8s): a
    UserError for the first task with an image of its own."""
    for t in tasks:
        if own := own_image(t):
            raise UserError(
                f"task {t.id} has its own image ({own}): --sandbox {sandbox} runs only tasks on the base "
                "image for now; leave such tasks out (--glob) or run them on Docker"
            )


def _image_key(task: Task) -> str:
    """What, besides the build context, tells the task's image apart."""
    kind = kinds.of(task)
    return kind.image_key(task) if isinstance(kind, OwnImage) else repr(None)


def _build(task: Task, log) -> str:
    kind = kinds.of(task)
    if isinstance(kind, OwnImage):
        return kind.build_image(task, log)
    return task_image(task.dockerfile, task.build_context, log)


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
