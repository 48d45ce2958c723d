"""The images a list of tasks runs in: each distinct build context is built once (Harbor tasks: the
task's image and its verifier's)."""

from __future__ import annotations

import asyncio

from agent.sandbox import content_hash
from agent.sandbox.images import harbor_task_image, harbor_verifier_image, task_image
from results.errors import UserError
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
            repr(
                t.harbor
                and (t.harbor.docker_image, t.harbor.verifier_docker_image, t.harbor.verifier_dockerfile)
            ),
        )
        if key not in cache:
            try:
                if t.harbor is not None:
                    cache[key] = await asyncio.to_thread(harbor_task_image, t, log)
                    await asyncio.to_thread(
                        harbor_verifier_image, t, log
                    )  # built now, found by grading later
                else:
                    cache[key] = await asyncio.to_thread(task_image, t.dockerfile, t.build_context, log)
            except UserError as e:
                where = f"{t.path}/environment/Dockerfile" if t.path else f"task {t.id}"
                raise UserError(f"{where}: {e}") from None
        out[t.id] = cache[key]
    return out
