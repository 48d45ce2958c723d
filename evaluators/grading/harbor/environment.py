"""A Harbor task's environment as a run sees it: its images (the task's, and its verifier's own) and its
network (--no-internet, the run's network line)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from agent.sandbox.backends.docker import images


def task_image(task, log=print) -> str:
    """A Harbor task's image: its prebuilt docker_image, else its Dockerfile with environment/ as the build
    context, else (no Dockerfile: our convention) the base image."""
    if task.harbor.docker_image:
        return images.prebuilt_image(task.harbor.docker_image)
    return images.task_image(task.dockerfile, task.build_context, log)


def verifier_image(task, log=print) -> Optional[str]:
    """The image of a separate verifier environment ([verifier.environment] docker_image, or tests/Dockerfile
    with tests/ as its context); None -> the task's own image."""
    spec = task.harbor
    if spec.verifier_docker_image:
        return images.prebuilt_image(spec.verifier_docker_image)
    if spec.verifier_dockerfile:
        context = {p: d for p, d in task.test_files.items() if p != "Dockerfile"}
        return images.task_image(spec.verifier_dockerfile, context, log)
    return None


def offline(tasks: list) -> list:
    """--no-internet: every Harbor task's containers (the agent's and the verifier's) without network."""
    out = []
    for t in tasks:
        if t.harbor is not None and (t.environment.allow_internet or t.harbor.verifier_network):
            t = dataclasses.replace(
                t,
                environment=dataclasses.replace(t.environment, allow_internet=False),
                harbor=dataclasses.replace(
                    t.harbor,
                    verifier_network=False,
                    network_why="--no-internet (was: " + t.harbor.network_why + ")",
                ),
            )
        out.append(t)
    return out


def network_line(tasks: list) -> str:
    """One line for a run: which Harbor tasks have network and why ("" without Harbor tasks)."""
    hb = [t for t in tasks if t.harbor is not None]
    if not hb:
        return ""
    groups: dict[str, list[str]] = {}
    for t in hb:
        on = t.environment.allow_internet or t.harbor.verifier_network
        groups.setdefault(f"{'network' if on else 'no network'}: {t.harbor.network_why}", []).append(t.id)
    parts = []
    for why, ids in sorted(groups.items()):
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        parts.append(f"{len(ids)} ({shown}) {why}")
    return "Harbor tasks: " + "; ".join(parts)
