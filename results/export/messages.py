"""The conversation of an attempt cleaned for export: OpenAI-shaped messages, the worked example's turns,
and tool calls (stored either OpenAI-style or as {id, name, arguments}) in one form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from results.errors import UserError
from results.schema import Attempt

DEMONSTRATION = Path(__file__).resolve().parents[2] / "agent" / "prompts" / "demonstration.json"
ROLES = ("system", "user", "assistant", "tool")


def content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _call_problem(tc: Any) -> str:
    if not isinstance(tc, dict):
        return f" is {type(tc).__name__}, not an object"
    if tc.get("function") is not None and not isinstance(tc["function"], dict):
        return ".function is not an object"
    return ""


def conversation_problem(a: Attempt) -> str:
    """What in the attempt's conversation is not the shape the exporters read ("" when nothing): messages
    and tool calls are free-form in the record (the schema cannot type them), so a record edited outside
    harness can hold anything there."""
    for i, m in enumerate(a.messages):
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            return f"messages[{i}].tool_calls is {type(calls).__name__}, not a list"
        for j, tc in enumerate(calls or []):
            if problem := _call_problem(tc):
                return f"messages[{i}].tool_calls[{j}]{problem}"
    for s in a.steps:
        for j, tc in enumerate(s.tool_calls):
            if problem := _call_problem(tc):
                return f"steps[{s.index}].tool_calls[{j}]{problem}"
    return ""


def checked(attempts: Iterable[Attempt], where: Path) -> Iterator[Attempt]:
    """The attempts, each refused (one line naming the record and the field) if conversation_problem
    finds something: for the exports that write one file of all attempts (ATIF, Inspect)."""
    for a in attempts:
        if problem := conversation_problem(a):
            raise UserError(f"{where}: record {a.key}: {problem}; the record was changed outside harness")
        yield a


def tool_call(tc: dict[str, Any]) -> dict[str, Any]:
    """One tool call in OpenAI form, whether stored that way or as {id, name, arguments}."""
    fn = tc.get("function") or {"name": tc.get("name"), "arguments": tc.get("arguments")}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {})
    return {
        "id": str(tc.get("id") or ""),
        "type": "function",
        "function": {"name": str(fn.get("name") or ""), "arguments": args},
    }


def openai_messages(attempt: Attempt) -> list[dict[str, Any]]:
    """The conversation cleaned to OpenAI's fine-tuning message shape, ending at the last assistant turn
    (what follows it, e.g. the observation of `submit`, teaches nothing)."""
    out: list[dict[str, Any]] = []
    for m in attempt.messages:
        role = m.get("role")
        if role not in ROLES:
            continue
        msg: dict[str, Any] = {"role": role, "content": content_text(m.get("content"))}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = [tool_call(tc) for tc in m["tool_calls"]]
            if not msg["content"]:
                msg["content"] = None
        if role == "tool":
            msg["tool_call_id"] = str(m.get("tool_call_id") or "")
        out.append(msg)
    last = max((i for i, m in enumerate(out) if m["role"] == "assistant"), default=-1)
    return out[: last + 1]


def demonstration_turns(messages: list[dict[str, Any]]) -> set[int]:
    """Indexes of the messages that are the worked-example exchange (same roles and texts, in a row)."""
    demo = [(m["role"], m["content"]) for m in json.loads(DEMONSTRATION.read_text())]
    turns = [(m.get("role"), content_text(m.get("content"))) for m in messages]
    for start in range(len(turns) - len(demo) + 1):
        if turns[start : start + len(demo)] == demo:
            return set(range(start, start + len(demo)))
    return set()


def call_arguments(call: dict[str, Any]) -> Any:
    try:
        return json.loads(call["function"]["arguments"])
    except ValueError:
        return call["function"]["arguments"]


def tools_from_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions rebuilt from the calls made (names and argument keys as strings), used only
    when the run manifest does not record the tools offered (config["tools"])."""
    seen: dict[str, set[str]] = {}
    for m in messages:
        for c in m.get("tool_calls") or []:
            args = call_arguments(c)
            seen.setdefault(c["function"]["name"], set()).update(args if isinstance(args, dict) else {})
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {
                    "type": "object",
                    "properties": {a: {"type": "string"} for a in sorted(keys)},
                    "required": sorted(keys),
                },
            },
        }
        for name, keys in sorted(seen.items())
    ]
