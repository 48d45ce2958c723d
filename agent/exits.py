"""How an attempt ends: the loop raises a LoopExit, and its `reason` is the exit_reason recorded
(results/schema.py); run_loop catches them."""

from __future__ import annotations

from agent.models.base import ModelError


class LoopExit(Exception):
    reason = ""


class Submitted(LoopExit):
    reason = "submitted"


class Stuck(LoopExit):  # the same actions three steps running
    reason = "stuck"


class LimitReached(LoopExit):
    """One of LoopConfig's limits (or the model's context window) ended the attempt."""


class MaxSteps(LimitReached):
    reason = "max_steps"


class WallTime(LimitReached):
    reason = "wall_time"


class TokenBudget(LimitReached):
    reason = "token_budget"


class CostBudget(LimitReached):
    reason = "cost_budget"


class ContextExceeded(LimitReached):
    reason = "context_exceeded"


class SandboxOutOfMemory(LoopExit):
    reason = "sandbox_died"


class ServerKilled(SandboxOutOfMemory):
    """The sandbox's command server was killed or stopped by what ran in it (a Harbor agent is root): the
    attempt ends as the agent's result and is verified from the container's filesystem."""


class ModelFailed(LoopExit):
    reason = "model_error"

    def __init__(self, error: ModelError):
        super().__init__(str(error))
        self.message, self.status = str(error), error.status
