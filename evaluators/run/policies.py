"""The policies: what acts in an attempt's sandbox between its starting files and the capture of its
changes. The agent loop (loop_policy), the task's own solution (oracle_policy), or nothing (null_policy).
evaluators/run/attempt.py runs an attempt with one of them."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from typing import Awaitable, Callable, Optional

from agent.config import LoopConfig
from agent.loop import LoopResult, run_loop
from agent.models import model_for_attempt
from agent.models.base import Model, waiting
from agent.sandbox import Sandbox
from evaluators.run.attempt_sandbox import sandbox_of
from tasks import kinds
from tasks.model import Task

# A policy acts in the sandbox; it returns the loop's result (or None for oracle/null).
Policy = Callable[[Task, Sandbox], Awaitable[Optional[LoopResult]]]


async def oracle_policy(task: Task, sb: Sandbox) -> None:
    """Runs the task's own solution as its evaluator kind's sandbox says (evaluators/run/attempt_sandbox.py;
    an ordinary kind's: solution/solve.sh in /workspace, as the agent would)."""
    await sandbox_of(kinds.of(task)).oracle(task, sb)


async def null_policy(task: Task, sb: Sandbox) -> None:
    """Does nothing: the untouched workspace must not be solved."""


def attempt_seed(seed: int, task_id: str, sample: int) -> int:
    """The seed of one attempt: a run's samples of a task must differ (a seeded sampler given the same
    seed and prompt returns the same reply), and a re-run of the same attempt must repeat."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}:{sample}".encode()).digest()[:4], "big") >> 1


def loop_policy(
    model: Model,
    cfg: LoopConfig,
    model_slots: asyncio.Semaphore,
    sample: int,
    on_phase: Optional[Callable[[str], None]] = None,
) -> Policy:
    """The agent loop; `on_phase` hears what the attempt waits on (the progress display): "queued for the
    model", "model", "commands", and "grading" once the loop is done."""

    async def act(task: Task, sb: Sandbox) -> LoopResult:
        per_task = replace(
            cfg,
            max_steps=min(cfg.max_steps, task.agent.max_steps),
            wall_time=min(cfg.wall_time, task.agent.timeout_sec) if cfg.task_wall_time else cfg.wall_time,
            command_timeout=min(cfg.command_timeout, task.agent.command_timeout_sec),
            seed=None if cfg.seed is None else attempt_seed(cfg.seed, task.id, sample),
        )
        limited = _Limited(model_for_attempt(model, task.id, sample), model_slots, on_phase or _quiet)
        result = await run_loop(limited, sb, task.instruction, per_task, task.example)
        (on_phase or _quiet)("grading")
        return result

    return act


def _quiet(what: str) -> None:
    pass


class _Limited:
    """A model whose complete() waits for one of a shared number of request slots."""

    def __init__(self, model: Model, slots: asyncio.Semaphore, on_phase: Callable[[str], None] = _quiet):
        self._model, self._slots, self._on_phase = model, slots, on_phase

    def __getattr__(self, name):
        return getattr(self._model, name)

    async def complete(self, *args, **kwargs):
        if self._slots.locked():
            self._on_phase("queued for the model")
        with waiting():  # queued behind other attempts: not this attempt's time (agent.models.base.Waiting)
            await self._slots.acquire()
        self._on_phase("model")
        try:
            reply = await self._model.complete(*args, **kwargs)
        finally:
            self._slots.release()
        self._on_phase("commands")  # not when cancelled: the display keeps what it was waiting on
        return reply
