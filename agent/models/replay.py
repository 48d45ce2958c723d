"""Deterministic scripted replies: tests, demos, and re-running a recorded trajectory exactly.

Two file formats, told apart by content:

(a) a JSON object of scripts, one list of replies per task id, "*" being the default for other tasks:
        {"fizzbuzz": ["reply 1 text", "reply 2 text"], "*": ["I give up."]}
    A reply is the raw assistant text, or {"content": "...", "tool_calls": [{"name": "bash",
    "arguments": {"command": "ls"}}]} to script a native tool call.
(b) a recorded attempts.jsonl (results/schema.py Attempt records): each attempt's steps' raw_output and
    tool_calls (with their token counts and token ids) are replayed in order, for that task and sample.
(c) ATIF trajectories (Harbor's interchange format; agent/models/replay_atif.py): ours from
    `harness export --format atif`, or another harness's.

Replies are per attempt: the agent loop calls `model_for_attempt(model, task_id, sample)` (agent.models)
once per attempt, which gives `model.for_task(task_id, sample)`: a fresh instance whose k-th complete()
call returns the task's k-th reply. With n > 1 a call returns the same next reply n times. A call past
the end of the script raises ModelError. Token counts the file lacks are estimated (~4 characters a
token) so budgets and prices apply. An unbound ReplayModel (served over HTTP, say) plays the "*" script
-- or the only script in the file -- with one counter for all callers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

from agent.models.base import Completion, ModelError, ToolCall
from agent.models.common import apply_prices, approx_tokens, parse_arguments
from agent.models.options import ModelOptions
from agent.models.replay_atif import ANY_SAMPLE, load_atif_scripts, parse_atif_text
from results.errors import UserError
from results.jsonl import bounded_json_text, read_bounded

DEFAULT_TASK = "*"

Script = list[Completion]
MAX_REPLAY_BYTES = 1 << 30  # recorded trajectories with token ids run to hundreds of MB
FORMATS_HINT = "a replay file is a JSON object of scripts, an attempts.jsonl or ATIF trajectories"


def _tool_call(raw: Any, i: int, where: str) -> ToolCall:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a tool call must be an object with name and arguments")
    fn = raw.get("function") if isinstance(raw.get("function"), dict) else raw  # OpenAI shape or flat
    if not fn.get("name"):
        raise UserError(f"{where}: tool call {i} has no name")
    return ToolCall(
        id=str(raw.get("id") or f"call_{i}"),
        name=str(fn["name"]),
        arguments=parse_arguments(fn.get("arguments")),
    )


def _list(value: Any, where: str) -> list:
    if value is None or value == "":
        return []
    if not isinstance(value, list):
        raise UserError(f"{where}: tool_calls must be a list of calls (got {type(value).__name__})")
    return value


def _reply(raw: Any, where: str) -> Completion:
    if isinstance(raw, str):
        return Completion(content=raw)
    if isinstance(raw, dict) and ("content" in raw or "tool_calls" in raw):
        calls = [_tool_call(c, i, where) for i, c in enumerate(_list(raw.get("tool_calls"), where))]
        return Completion(
            content=str(raw.get("content") or ""),
            tool_calls=calls,
            finish_reason=str(raw.get("finish_reason") or ("tool_calls" if calls else "stop")),
        )
    raise UserError(f"{where}: a reply must be a string or an object with content/tool_calls")


def _load_scripts_json(data: dict[str, Any], path: str) -> dict[str, dict[int, Script]]:
    scripts: dict[str, dict[int, Script]] = {}
    for task_id, replies in data.items():
        if not isinstance(replies, list):
            raise UserError(
                f'{path}: {task_id!r} must map to a list of replies, e.g. {{"{task_id}": ["reply 1"]}}'
            )
        scripts[str(task_id)] = {
            ANY_SAMPLE: [_reply(r, f"{path}: {task_id}[{i}]") for i, r in enumerate(replies)]
        }
    return scripts


def _load_attempts(lines: list[str], path: str) -> dict[str, dict[int, Script]]:
    from results.schema import Attempt

    scripts: dict[str, dict[int, Script]] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            attempt = Attempt.model_validate_json(line)
        except ValueError as e:
            first = str(e).splitlines()[0]
            raise UserError(f"{path}:{lineno}: not an attempt record ({first}); {FORMATS_HINT}") from None
        script = []
        for step in attempt.steps:
            calls = [
                _tool_call(c, i, f"{path}:{lineno} step {step.index}") for i, c in enumerate(step.tool_calls)
            ]
            script.append(
                Completion(
                    content=step.raw_output,
                    tool_calls=calls,
                    prompt_tokens=step.prompt_tokens,
                    completion_tokens=step.completion_tokens,
                    finish_reason="tool_calls" if calls else "stop",
                    prompt_ids=step.prompt_ids,
                    completion_ids=step.completion_ids,
                )
            )
        scripts.setdefault(attempt.task_id, {})[attempt.sample] = (
            script  # a later record of the same key wins
        )
    return scripts


def load_scripts(path: str) -> dict[str, dict[int, Script]]:
    """{task_id: {sample (or ANY_SAMPLE): [replies]}} from a replay file of either format."""
    where = f"replay:{path}"
    raw = read_bounded(Path(path).expanduser(), MAX_REPLAY_BYTES, where)
    text = bounded_json_text(raw, where, MAX_REPLAY_BYTES, FORMATS_HINT)  # nothing below can recurse deep
    trajectories = parse_atif_text(text, path)
    if trajectories:
        return load_atif_scripts(trajectories, path)
    try:
        data = json.loads(text)
    except ValueError:
        data = None  # several lines: attempts.jsonl
    if isinstance(data, dict) and not ("task_id" in data and "steps" in data):
        return _load_scripts_json(data, path)
    return _load_attempts(text.splitlines(), path)


def _reply_tokens(c: Completion) -> int:
    calls = json.dumps([[t.name, t.arguments] for t in c.tool_calls]) if c.tool_calls else ""
    return max(1, (len(c.content) + len(calls)) // 4)


class ReplayModel:
    def __init__(
        self,
        scripts: dict[str, dict[int, Script]],
        *,
        name: str = "replay",
        task_id: Optional[str] = None,
        sample: int = 0,
        price_in: Optional[float] = None,
        price_out: Optional[float] = None,
    ) -> None:
        self.name = name
        self.price_in, self.price_out = price_in, price_out  # replayed replies are free unless priced
        self.scripts = scripts
        self.task_id = task_id
        self.sample = sample
        self.supports_tools = any(
            c.tool_calls for by_sample in scripts.values() for s in by_sample.values() for c in s
        )
        self.context_window = 131072
        self.calls = 0  # complete() calls so far on this instance
        self._script = self._pick(task_id, sample)

    @classmethod
    def from_file(
        cls,
        path: str,
        *,
        name: Optional[str] = None,
        price_in: Optional[float] = None,
        price_out: Optional[float] = None,
    ) -> "ReplayModel":
        return cls(load_scripts(path), name=name or f"replay:{path}", price_in=price_in, price_out=price_out)

    def _pick(self, task_id: Optional[str], sample: int) -> Optional[Script]:
        if task_id is None:  # unbound: the default script, or the file's only one
            by_sample = self.scripts.get(DEFAULT_TASK) or (
                next(iter(self.scripts.values())) if len(self.scripts) == 1 else None
            )
        else:
            by_sample = self.scripts.get(task_id) or self.scripts.get(DEFAULT_TASK)
        if not by_sample:
            return None
        for key in (sample, ANY_SAMPLE):
            if key in by_sample:
                return by_sample[key]
        return by_sample[min(by_sample)]  # recorded under another sample number: the first one

    def for_task(self, task_id: str, sample: int = 0) -> "ReplayModel":
        """A fresh instance that replays task_id's script from its first reply (one per attempt)."""
        return ReplayModel(
            self.scripts,
            name=self.name,
            task_id=task_id,
            sample=sample,
            price_in=self.price_in,
            price_out=self.price_out,
        )

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]] = None,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: Optional[int] = None,
    ) -> list[Completion]:
        if self._script is None:
            what = (
                f"task {self.task_id!r}"
                if self.task_id is not None
                else 'this unbound model (several tasks, no "*")'
            )
            raise ModelError(
                f'{self.name}: no scripted replies for {what}; add it or a "*" default to the file'
            )
        if self.calls >= len(self._script):
            raise ModelError(
                f"{self.name}: the script for task {self.task_id or DEFAULT_TASK!r} has "
                f"{len(self._script)} replies, and call {self.calls + 1} asked for another"
            )
        reply = self._script[self.calls]
        self.calls += 1
        out = [copy.deepcopy(reply) for _ in range(n)]
        for c in out:
            c.cost = 0.0
            # Scripts carry no token counts: estimate them, so token budgets and prices still apply.
            c.prompt_tokens = c.prompt_tokens or approx_tokens(messages)
            c.completion_tokens = c.completion_tokens or _reply_tokens(c)
        apply_prices(out, self.price_in, self.price_out)
        return out

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return approx_tokens(messages)


def from_spec(target: str, spec: str, o: ModelOptions) -> ReplayModel:
    """replay:FILE (registered in agent/models/__init__.py)."""
    if not target:
        raise UserError(
            "replay: name the file, e.g. replay:replies.json or replay:results/run/attempts.jsonl"
        )
    return ReplayModel.from_file(target, name=spec, **o.prices())
