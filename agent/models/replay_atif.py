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
from typing import Any

from agent.models.base import Completion, ToolCall
from agent.models.replay import ANY_SAMPLE
from results.errors import UserError

OUR_TOOLS = ("bash", "write_file", "submit")
SHELL_ARGUMENTS = ("command", "cmd", "keystrokes", "script")


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
        raise UserError(f"{where}: an ATIF tool call needs function_name and arguments")
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


def load_atif_scripts(
    trajectories: list[dict[str, Any]], path: str
) -> dict[str, dict[int, list[Completion]]]:
    scripts: dict[str, dict[int, list[Completion]]] = {}
    for n, t in enumerate(trajectories):
        where = f"{path}: trajectory {n}"
        steps = t.get("steps")
        if not isinstance(steps, list):
            raise UserError(f"{where}: an ATIF trajectory needs a steps array")
        script = []
        for step in steps:
            if not isinstance(step, dict) or step.get("source") != "agent":
                continue
            if step.get("is_copied_context") or step.get("llm_call_count") == 0:
                continue
            calls = [_call(c, f"{where} step {step.get('step_id')}") for c in step.get("tool_calls") or []]
            m = step.get("metrics") or {}
            script.append(
                Completion(
                    content=_message(step.get("message")),
                    tool_calls=calls,
                    prompt_tokens=int(m.get("prompt_tokens") or 0),
                    completion_tokens=int(m.get("completion_tokens") or 0),
                    finish_reason="tool_calls" if calls else "stop",
                    prompt_ids=m.get("prompt_token_ids"),
                    completion_ids=m.get("completion_token_ids"),
                )
            )
        extra = t.get("extra") or {}
        task_id = str(extra.get("task_id") or "*")
        sample = int(extra["sample"]) if isinstance(extra.get("sample"), int) else ANY_SAMPLE
        scripts.setdefault(task_id, {})[sample] = script
    return scripts
