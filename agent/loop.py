"""The execute -> observe -> correct loop. One function, read top to bottom.

The model acts (a shell command, a file write, or submit), the action runs in the sandbox, the
real output goes back, until the model submits or a limit ends the attempt. Two protocols:
native tool calls, or text (one ```bash block per reply) for models without tool support.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, Optional

from agent.models.base import Completion, Model, ModelError
from agent.models.retry import ContextLengthError
from agent.sandbox import Sandbox, SandboxDied
from results.schema import Action, Step

PROMPTS = Path(__file__).parent / "prompts"


def prompt(name: str, **values) -> str:
    return Template((PROMPTS / f"{name}.md").read_text()).safe_substitute(**values).strip()


TOOLS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run one shell command in /workspace; returns exit code and output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Write a file with exactly this content (path relative to /workspace).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Finish: the task is done.", "parameters": {"type": "object", "properties": {}}}},
]


@dataclass
class LoopConfig:
    max_steps: int = 30
    wall_time: float = 600.0  # seconds for the whole attempt
    command_timeout: float = 60.0
    max_reply_tokens: int = 512
    token_budget: Optional[int] = None  # prompt + completion tokens over the attempt; works with any model
    cost_limit: Optional[float] = None  # USD
    temperature: float = 0.0
    seed: Optional[int] = None
    protocol: str = "auto"  # auto | tools | text
    # False: the tasks' own wall-time limits are not applied. Sampling many attempts from one local model
    # on a shared CPU makes each wait for the others' generation; steps and reply tokens bound it instead.
    task_wall_time: bool = True
    demonstration: bool = True  # text protocol: one worked example exchange first (small models copy its form)
    observation_chars: int = 8000  # longer observations keep their head and tail


@dataclass
class LoopResult:
    steps: list[Step] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    exit_reason: str = "max_steps"
    model_error: Optional[str] = None
    model_error_status: Optional[int] = None  # the provider's HTTP status, when it answered with an error

    @property
    def model_seconds(self) -> float:
        return sum(s.model_seconds for s in self.steps)

    @property
    def tool_seconds(self) -> float:
        return sum(s.tool_seconds for s in self.steps)


BLOCK = re.compile(r"```[ \t]*([A-Za-z]*)[ \t]*\n(.*?)```", re.DOTALL)


def parse_text_reply(text: str) -> Action:
    """Text protocol: exactly one fenced shell block; `submit` alone in it ends the task."""
    blocks = [body for lang, body in BLOCK.findall(text) if lang.lower() in ("", "bash", "sh", "shell", "console")]
    if len(blocks) != 1:
        problem = "no ```bash block found." if not blocks else f"{len(blocks)} code blocks found, expected exactly one."
        return Action(kind="format_error", content=problem)
    command = blocks[0].strip()
    if command in ("submit", "echo submit", "exit", "exit 0"):
        return Action(kind="submit")
    if not command:
        return Action(kind="format_error", content="the code block is empty.")
    return Action(kind="bash", command=command)


def parse_tool_calls(completion: Completion) -> list[Action]:
    actions = []
    for call in completion.tool_calls:
        args = call.arguments
        if call.name == "bash" and isinstance(args.get("command"), str):
            actions.append(Action(kind="bash", command=args["command"], tool_call_id=call.id))
        elif call.name == "write_file" and isinstance(args.get("path"), str) and isinstance(args.get("content"), str):
            actions.append(Action(kind="write", path=args["path"], content=args["content"], tool_call_id=call.id))
        elif call.name == "submit":
            actions.append(Action(kind="submit", tool_call_id=call.id))
        else:
            actions.append(Action(kind="format_error", tool_call_id=call.id,
                                  content=f"unknown tool or bad arguments: {call.name}({json.dumps(args)[:200]})."))
    if not actions:
        actions.append(Action(kind="format_error", content="no tool call: call bash, write_file or submit."))
    return actions


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut here ...]\n{text[-half:]}"


async def run_action(sb: Sandbox, action: Action, cfg: LoopConfig) -> tuple[str, Optional[int], bool, float]:
    """Runs one action; returns (observation, exit code, timed out, seconds)."""
    if action.kind == "format_error":
        return prompt("format_error", problem=action.content), None, False, 0.0
    if action.kind == "write":
        path = action.path if action.path.startswith("/") else f"{sb.workdir}/{action.path}"
        r = await sb.exec(["bash", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "_", path],
                          cfg.command_timeout, stdin=action.content.encode())
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


async def run_loop(model: Model, sb: Sandbox, instruction: str, cfg: LoopConfig) -> LoopResult:
    res = await _run(model, sb, instruction, cfg)
    res.messages = clean(res.messages)
    return res


async def _run(model: Model, sb: Sandbox, instruction: str, cfg: LoopConfig) -> LoopResult:
    use_tools = cfg.protocol == "tools" or (cfg.protocol == "auto" and model.supports_tools)
    system = prompt("system_tools" if use_tools else "system_text")
    tools = TOOLS
    if sb.workdir != "/workspace":  # a Harbor task's working folder is its image's WORKDIR
        system = system.replace("/workspace", sb.workdir)
        tools = json.loads(json.dumps(TOOLS).replace("/workspace", sb.workdir))
    res = LoopResult(messages=[{"role": "system", "content": system}])
    if cfg.demonstration and not use_tools:
        res.messages += json.loads((PROMPTS / "demonstration.json").read_text())
    res.messages.append({"role": "user", "content": prompt("instance", instruction=instruction), "pinned": True})
    deadline = time.monotonic() + cfg.wall_time
    tokens = cost = 0.0
    recent: list[str] = []
    for index in range(cfg.max_steps):
        if not fit_context(model, res.messages, cfg.max_reply_tokens):
            res.exit_reason = "context_exceeded"
            return res
        started = time.monotonic()
        try:
            completion = (await asyncio.wait_for(model.complete(
                clean(res.messages),
                tools=tools if use_tools else None, temperature=cfg.temperature,
                max_tokens=cfg.max_reply_tokens, seed=None if cfg.seed is None else cfg.seed + index),
                timeout=max(deadline - started, 1.0)))[0]
        except asyncio.TimeoutError:
            res.exit_reason = "wall_time"
            return res
        except ContextLengthError:  # the server's own count said the prompt no longer fits
            res.exit_reason = "context_exceeded"
            return res
        except ModelError as e:
            res.exit_reason, res.model_error, res.model_error_status = "model_error", str(e), e.status
            return res
        step = Step(index=index, raw_output=completion.content, model_seconds=time.monotonic() - started,
                    tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls],
                    prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
                    cost=completion.cost, prompt_ids=completion.prompt_ids, completion_ids=completion.completion_ids)
        res.steps.append(step)
        tokens += completion.prompt_tokens + completion.completion_tokens
        cost += completion.cost
        assistant: dict[str, Any] = {"role": "assistant", "content": completion.content}
        if use_tools and completion.tool_calls:
            assistant["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": json.dumps(c.arguments)}} for c in completion.tool_calls]
        res.messages.append(assistant)
        step.actions = parse_tool_calls(completion) if use_tools else [parse_text_reply(completion.content)]

        observations = []
        for action in step.actions:
            if action.kind == "submit":
                if use_tools and action.tool_call_id:
                    res.messages.append({"role": "tool", "tool_call_id": action.tool_call_id, "content": "submitted"})
                res.exit_reason = "submitted"
                return res
            try:
                obs, code, timed_out, seconds = await run_action(sb, action, cfg)
            except SandboxDied:
                # The agent used its memory limit up (processes, or files in /tmp or /workspace) and the
                # sandbox died of it: the attempt ends as the agent's result, graded like any other. Any
                # other death stays an infra error, retried by the runner (see SandboxUnresponsive there).
                if await asyncio.to_thread(sb.death_cause) != "oom":
                    raise
                step.observation = "[the sandbox ran out of memory and stopped]"
                res.exit_reason = "sandbox_died"
                return res
            step.tool_seconds += seconds
            step.exit_code, step.timed_out = code, step.timed_out or timed_out
            observations.append((action, obs))
        step.observation = "\n\n".join(obs for _, obs in observations)
        if use_tools and completion.tool_calls:
            res.messages += [{"role": "tool", "tool_call_id": a.tool_call_id, "content": o} for a, o in observations]
        else:
            res.messages.append({"role": "user", "content": step.observation})

        # Guard rails: the same action three times running, budgets, wall time.
        recent.append(json.dumps([a.model_dump(exclude={"tool_call_id"}) for a in step.actions]))
        if len(recent) >= 3 and len(set(recent[-3:])) == 1:
            res.exit_reason = "stuck"
            return res
        if cfg.token_budget is not None and tokens >= cfg.token_budget:
            res.exit_reason = "token_budget"
            return res
        if cfg.cost_limit is not None and cost >= cfg.cost_limit:
            res.exit_reason = "cost_budget"
            return res
        if time.monotonic() >= deadline:
            res.exit_reason = "wall_time"
            return res
    res.exit_reason = "max_steps"
    return res
