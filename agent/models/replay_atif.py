"""Replay scripts from ATIF trajectories (Harbor's Agent Trajectory Interchange Format, any revision up to
v1.7): what `harness export --format atif` writes, and what Harbor, mini-swe-agent, OpenHands and others
record, so that their trajectories can be graded again here (`--model replay:FILE.atif.json`).

A file holds one trajectory (an object), a JSON array of them, or one per line. Each agent step that is
a call of the model (not is_copied_context, llm_call_count not 0) becomes one reply: its message, its tool
calls, token counts and ids (metrics.prompt_token_ids / completion_token_ids). The task is the root
extra.task_id (ours) and the sample extra.sample; a trajectory without them plays for every task ("*").
A tool call whose name is not one of ours but whose arguments carry a shell command (command, cmd,
keystrokes, script) is replayed as `bash` with that command, so other harnesses' shell tools run here.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from agent.models.base import Completion, ToolCall
from results.errors import UserError

ANY_SAMPLE = -1  # a replay script's key for a script that plays for every sample (agent/models/replay.py)

OUR_TOOLS = ("bash", "write_file", "submit")
SHELL_ARGUMENTS = ("command", "cmd", "keystrokes", "script")
FIX = "fix the file, or export it again (harness export RUN --format atif)"


def is_atif(data: Any) -> bool:
    first = data[0] if isinstance(data, list) and data else data
    return isinstance(first, dict) and str(first.get("schema_version", "")).startswith("ATIF-")


def parse_atif_text(text: str, path: str) -> list[dict[str, Any]]:
    """The trajectories of a file: a JSON object, a JSON array, or JSON lines; [] when it is none of them."""
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            return []
    if not is_atif(data):
        return []
    return data if isinstance(data, list) else [data]


def _call(raw: Any, where: str) -> ToolCall:
    if not isinstance(raw, dict) or not raw.get("function_name"):
        raise UserError(f"{where}: an ATIF tool call needs function_name and arguments; {FIX}")
    name, args = str(raw["function_name"]), raw.get("arguments")
    args = args if isinstance(args, dict) else {}
    if name not in OUR_TOOLS:
        command = next((args[k] for k in SHELL_ARGUMENTS if isinstance(args.get(k), str)), None)
        if command is not None:
            name, args = "bash", {"command": command}
    return ToolCall(id=str(raw.get("tool_call_id") or ""), name=name, arguments=args)


def _message(value: Any) -> str:
    if isinstance(value, list):  # content parts (v1.6): the text parts
        return "".join(
            str(p.get("text", "")) for p in value if isinstance(p, dict) and p.get("type") == "text"
        )
    return "" if value is None else str(value)


def _table(value: Any, where: str, name: str) -> dict[str, Any]:
    """An optional object field (None/absent: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: {name} must be an object (got {type(value).__name__}); {FIX}")
    return value


def _count(m: dict[str, Any], name: str, where: str) -> int:
    value = m.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1 << 53:
        raise UserError(f"{where}: metrics.{name} must be a count (got {str(value)[:40]!r}); {FIX}")
    return int(value)


def _ids(m: dict[str, Any], name: str, where: str) -> Optional[list[int]]:
    value = m.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(i) is int and 0 <= i < 1 << 31 for i in value):
        raise UserError(f"{where}: metrics.{name} must be a list of token ids (integers); {FIX}")
    return value


def load_atif_scripts(trajectories: list[Any], path: str) -> dict[str, dict[int, list[Completion]]]:
    """The replies of each trajectory, every field checked for its type: a wrong one is one UserError
    naming the file, the trajectory, the step and the field."""
    scripts: dict[str, dict[int, list[Completion]]] = {}
    for n, t in enumerate(trajectories):
        where = f"{path}: trajectory {n}"
        if not isinstance(t, dict):
            raise UserError(f"{where}: must be an object (got {type(t).__name__}); {FIX}")
        steps = t.get("steps")
        if not isinstance(steps, list):
            raise UserError(f"{where}: an ATIF trajectory needs a steps array")
        script = []
        for i, step in enumerate(steps):
            if not isinstance(step, dict) or step.get("source") != "agent":
                continue
            if step.get("is_copied_context") or step.get("llm_call_count") == 0:
                continue
            at = f"{where} step {str(step.get('step_id', i))[:20]}"
            raw_calls = step.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise UserError(f"{at}: tool_calls must be a list (got {type(raw_calls).__name__}); {FIX}")
            calls = [_call(c, at) for c in raw_calls]
            m = _table(step.get("metrics"), at, "metrics")
            script.append(
                Completion(
                    content=_message(step.get("message")),
                    tool_calls=calls,
                    prompt_tokens=_count(m, "prompt_tokens", at),
                    completion_tokens=_count(m, "completion_tokens", at),
                    finish_reason="tool_calls" if calls else "stop",
                    prompt_ids=_ids(m, "prompt_token_ids", at),
                    completion_ids=_ids(m, "completion_token_ids", at),
                )
            )
        extra = _table(t.get("extra"), where, "extra")
        task_id = str(extra.get("task_id") or "*")
        sample = int(extra["sample"]) if type(extra.get("sample")) is int else ANY_SAMPLE
        scripts.setdefault(task_id, {})[sample] = script
    return scripts
