"""The execute -> observe -> correct loop, read top to bottom in run_loop.

The model acts (a shell command, a file write, or submit), the action runs in the sandbox, the
real output goes back, until the model submits or a limit ends the attempt. Two protocols:
native tool calls, or text (one ```bash block per reply) for models without tool support; what the
model is told and how its replies are read is agent/prompt_format.py.
Each step is query (ask the model), execute (run its actions, build the observation) and the limit
checks; whatever ends the attempt raises a LoopExit (agent/exits.py) whose `reason` is the recorded
exit_reason. The loop makes no span or metric: it announces each model call and tool call to
results/hooks.py's observer, which telemetry subscribes to while it is on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from agent.config import LoopConfig, default_reply_tokens
from agent.exits import (
    ContextExceeded,
    CostBudget,
    LoopExit,
    MaxSteps,
    ModelFailed,
    SandboxOutOfMemory,
    ServerKilled,
    Stuck,
    Submitted,
    TokenBudget,
    WallTime,
)
from agent.models.base import WAITING, Completion, Model, ModelError, Waiting
from agent.models.retry import ContextLengthError
from agent.prompt_format import TOOLS, opening_messages, parse_text_reply, parse_tool_calls, prompt
from results import hooks
from results.schema import Action, Step, clip

# The sandbox package (Docker SDK) is imported where a sandbox is used (see _Loop.execute), so that the
# CLIs and the server import the loop on machines without it.
if TYPE_CHECKING:
    from agent.sandbox.contract import Sandbox


@dataclass
class LoopResult:
    steps: list[Step] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    exit_reason: str = "max_steps"
    model_error: Optional[str] = None
    model_error_status: Optional[int] = None  # the provider's HTTP status, when it answered with an error
    # time in a model call that never returned a reply (the wall-time limit hit it, or it failed)
    unanswered_model_seconds: float = 0.0

    @property
    def model_seconds(self) -> float:
        return sum(s.model_seconds for s in self.steps) + self.unanswered_model_seconds

    @property
    def tool_seconds(self) -> float:
        return sum(s.tool_seconds for s in self.steps)


async def run_action(sb: Sandbox, action: Action, cfg: LoopConfig) -> tuple[str, Optional[int], bool, float]:
    """Runs one action; returns (observation, exit code, timed out, seconds)."""
    if action.kind == "format_error":
        return prompt("format_error", problem=action.content), None, False, 0.0
    if action.kind == "write":
        path = action.path if action.path.startswith("/") else f"{sb.workdir}/{action.path}"
        r = await sb.exec(
            ["bash", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "_", path],
            cfg.command_timeout,
            stdin=action.content.encode(),
        )
        text = f"wrote {len(action.content)} characters to {action.path}" if r.exit_code == 0 else r.output
        return prompt("observation", exit_code=r.exit_code, output=text), r.exit_code, False, r.duration
    r = await sb.exec(action.command, cfg.command_timeout)
    output = clip(r.output, cfg.observation_chars) or "(no output)"
    if r.timed_out:
        return prompt("timeout", timeout=cfg.command_timeout, output=output), r.exit_code, True, r.duration
    if r.oom:
        output += "\n[the command was killed: out of memory]"
    return prompt("observation", exit_code=r.exit_code, output=output), r.exit_code, False, r.duration


def fit_context(model: Model, messages: list[dict], reply_tokens: int) -> bool:
    """Elides the oldest observations until the conversation fits the context window."""
    limit = model.context_window - reply_tokens
    for msg in messages[1:]:
        if model.count_tokens(messages) <= limit:
            return True
        if msg["role"] in ("user", "tool") and not msg.get("elided") and not msg.get("pinned"):
            msg["content"], msg["elided"] = "[observation elided to fit the context window]", True
    return model.count_tokens(messages) <= limit


def clean(messages: list[dict]) -> list[dict]:
    """Messages as the model sees them (without the loop's own bookkeeping keys)."""
    return [{k: v for k, v in m.items() if k not in ("elided", "pinned")} for m in messages]


async def run_loop(
    model: Model,
    sb: Sandbox,
    instruction: str,
    cfg: LoopConfig,
    example: Sequence[dict] = (),
    on_step: Optional[Callable[[Step], None]] = None,
) -> LoopResult:
    """One attempt: steps of query -> execute -> limit checks until a LoopExit ends it; `example`: worked
    example messages before the instruction (a hint); `on_step` sees each step once it has run (a watcher,
    e.g. `harness run` printing it)."""
    loop = _Loop(model, sb, cfg)
    res = loop.res
    waiting = WAITING.set(loop.waiting)  # this attempt's task: its model calls report their queue time
    loop.start(instruction, example)
    try:
        for index in range(cfg.max_steps):
            loop.check_context()
            step, completion = await loop.query(index)
            await loop.execute(step, completion)
            if on_step is not None:
                on_step(step)
            loop.check_limits(step)
        raise MaxSteps()
    except ModelFailed as e:
        res.exit_reason, res.model_error, res.model_error_status = e.reason, e.message, e.status
    except LoopExit as e:
        res.exit_reason = e.reason
    finally:
        WAITING.reset(waiting)
    res.messages = clean(res.messages)
    return res


class _Loop:
    """One attempt's state (the conversation, its steps, what it has spent) and the three parts of a step."""

    def __init__(self, model: Model, sb: Sandbox, cfg: LoopConfig):
        if cfg.max_reply_tokens is None:
            cfg = replace(cfg, max_reply_tokens=default_reply_tokens(model.name))
        self.model, self.sb, self.cfg = model, sb, cfg
        self.use_tools = cfg.protocol == "tools" or (cfg.protocol == "auto" and model.supports_tools)
        self.tools = TOOLS
        self.res = LoopResult()
        # The wall-time limit: `deadline` plus the time model calls spent queued (for a shared local
        # decoder, the run's model slots, a provider's rate limit), which measures the machine, not the agent.
        self.deadline = time.monotonic() + cfg.wall_time
        self.waiting = Waiting()
        self.tokens = self.cost = 0.0
        self.recent: list[str] = []  # each step's actions, to see the same ones repeated
        self.observer = hooks.observer()  # hears its model and tool calls (telemetry, while it is on)

    def start(self, instruction: str, example: Sequence[dict] = ()) -> None:
        """The system prompt, the worked example (text protocol), the task's example (a hint) and the
        task."""
        if self.sb.workdir != "/workspace":  # a Harbor task's working folder is its image's WORKDIR
            self.tools = json.loads(json.dumps(TOOLS).replace("/workspace", self.sb.workdir))
        self.res.messages += opening_messages(
            instruction, self.use_tools, self.cfg.demonstration, self.sb.workdir, example
        )

    def check_context(self) -> None:
        """Elides old observations so the next prompt fits the window; ends the attempt when it cannot."""
        if not fit_context(self.model, self.res.messages, self.cfg.max_reply_tokens):
            raise ContextExceeded()

    async def query(self, index: int) -> tuple[Step, Completion]:
        """Asks the model for its next reply; records it as a step and as the assistant's message."""
        cfg, messages = self.cfg, clean(self.res.messages)
        started, waited = time.monotonic(), self.waiting.seconds()
        announce = self.observer.model_call
        with announce(self.model.name, index, cfg.temperature, cfg.max_reply_tokens, messages) as watch:
            call = self.ask(messages, index)
            try:
                completion = await self.reply(call, started)
            except (WallTime, ContextLengthError, ModelError) as e:
                seconds = time.monotonic() - started
                self.res.unanswered_model_seconds += seconds  # waited for, though no reply came: model time
                watch.failed("timeout" if isinstance(e, WallTime) else type(e).__name__, seconds)
                if isinstance(e, WallTime):
                    raise
                if isinstance(e, ContextLengthError):  # the server's own count said the prompt no longer fits
                    raise ContextExceeded() from None
                raise ModelFailed(e) from None
            finally:
                await _stop(call)
            watch.answered(completion, time.monotonic() - started)
        return self.record_reply(index, completion, started, waited), completion

    def ask(self, messages: list[dict], index: int) -> asyncio.Future:
        """Starts the model call: a task of its own, which the wall-time limit can stop waiting for."""
        cfg = self.cfg
        return asyncio.ensure_future(
            self.model.complete(
                messages,
                tools=self.tools if self.use_tools else None,
                temperature=cfg.temperature,
                max_tokens=cfg.max_reply_tokens,
                seed=None if cfg.seed is None else cfg.seed + index,
            )
        )

    async def reply(self, call: asyncio.Future, started: float) -> Completion:
        """The call's reply, waited for until the deadline (moved on by the time the call spends queued)."""
        while not call.done():
            left = max(self.deadline + self.waiting.seconds(), started + 1.0) - time.monotonic()
            if left <= 0:
                raise WallTime()
            await asyncio.wait({call}, timeout=left)
        return call.result()[0]

    def record_reply(self, index: int, completion: Completion, started: float, waited: float) -> Step:
        """The reply as the attempt's next step (its actions parsed) and as the assistant's message."""
        step = Step(
            index=index,
            raw_output=completion.content,
            model_seconds=time.monotonic() - started,
            wait_seconds=self.waiting.seconds() - waited,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls
            ],
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cost=completion.cost,
            prompt_ids=completion.prompt_ids,
            completion_ids=completion.completion_ids,
        )
        self.res.steps.append(step)
        self.tokens += completion.prompt_tokens + completion.completion_tokens
        self.cost += completion.cost
        assistant: dict[str, Any] = {"role": "assistant", "content": completion.content}
        if self.use_tools and completion.tool_calls:
            assistant["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in completion.tool_calls
            ]
        self.res.messages.append(assistant)
        step.actions = (
            parse_tool_calls(completion) if self.use_tools else [parse_text_reply(completion.content)]
        )
        return step

    async def execute(self, step: Step, completion: Completion) -> None:
        """Runs the step's actions in the sandbox; their output goes back to the model as the observation."""
        from agent.sandbox import SandboxDied  # here, not at the top: see the TYPE_CHECKING import

        observations = []
        for action in step.actions:
            if action.kind == "submit":
                if self.use_tools and action.tool_call_id:
                    self.res.messages.append(
                        {"role": "tool", "tool_call_id": action.tool_call_id, "content": "submitted"}
                    )
                raise Submitted()
            try:
                with self.observer.tool_call(action) as tool:
                    obs, code, timed_out, seconds = await run_action(self.sb, action, self.cfg)
                    tool.ran(obs, code, timed_out, seconds)
            except SandboxDied:
                # The agent used its memory limit up (processes, or files in /tmp or /workspace) and the
                # sandbox died of it, or (a root agent, Harbor tasks) it killed or stopped the command
                # server: the attempt ends as the agent's result, graded like any other. Any other death
                # stays an infra error, retried by the runner (see SandboxUnresponsive there).
                cause = await asyncio.to_thread(self.sb.death_cause)
                if cause == "helper":
                    step.observation = "[the sandbox's command server was killed or stopped from inside]"
                    raise ServerKilled() from None
                if cause != "oom":
                    raise
                step.observation = "[the sandbox ran out of memory and stopped]"
                raise SandboxOutOfMemory() from None
            step.tool_seconds += seconds
            step.exit_code, step.timed_out = code, step.timed_out or timed_out
            observations.append((action, obs))
        step.observation = "\n\n".join(obs for _, obs in observations)
        if self.use_tools and completion.tool_calls:
            self.res.messages += [
                {"role": "tool", "tool_call_id": a.tool_call_id, "content": o} for a, o in observations
            ]
        else:
            self.res.messages.append({"role": "user", "content": step.observation})

    def check_limits(self, step: Step) -> None:
        """Guard rails after each step: the same actions three times running, budgets, wall time."""
        self.recent.append(json.dumps([a.model_dump(exclude={"tool_call_id"}) for a in step.actions]))
        if len(self.recent) >= 3 and len(set(self.recent[-3:])) == 1:
            raise Stuck()
        if self.cfg.token_budget is not None and self.tokens >= self.cfg.token_budget:
            raise TokenBudget()
        if self.cfg.cost_limit is not None and self.cost >= self.cfg.cost_limit:
            raise CostBudget()
        if time.monotonic() >= self.deadline + self.waiting.seconds():
            raise WallTime()


async def _stop(call: asyncio.Future) -> None:
    """Stops the model's work for a call the wall-time limit or a cancellation cut short."""
    if not call.done():
        call.cancel()
        await asyncio.wait({call}, timeout=5)
