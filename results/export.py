"""`harness export RUN --format openai|hf-chat|sharegpt`: trajectories as fine-tuning data (JSONL).

The source is Attempt.messages, the final conversation as OpenAI chat message dicts. Infra errors
(status == "error") are never exported: they are the harness failing, not the model acting.

- openai:   {"messages": [...], "tools": [...]} for OpenAI chat fine-tuning. Assistant tool_calls and
            tool messages are kept as they are; "tools" is present when the attempt used native tools.
- hf-chat:  {"messages": [{"role", "content"}]}; tool calls are written into the assistant text as
            <tool_call>{"name": ..., "arguments": {...}}</tool_call> (the Hermes/Qwen convention).
- sharegpt: {"conversations": [{"from": system|human|gpt|tool, "value"}]}, tool calls as in hf-chat.

Each written record passes the format's validate_* check; the tests use the same checks.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from agent.errors import UserError
from results.schema import Attempt
from results.store import open_run

FORMATS = ("openai", "hf-chat", "sharegpt")
ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt", "tool": "tool"}


# ---------------------------------------------------------------- message normalisation

def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _tool_call(tc: dict[str, Any]) -> dict[str, Any]:
    """One tool call in OpenAI form, whether stored that way or as {id, name, arguments}."""
    fn = tc.get("function") or {"name": tc.get("name"), "arguments": tc.get("arguments")}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {})
    return {"id": str(tc.get("id") or ""), "type": "function", "function": {"name": str(fn.get("name") or ""),
                                                                            "arguments": args}}


def openai_messages(attempt: Attempt) -> list[dict[str, Any]]:
    """The conversation cleaned to OpenAI's fine-tuning message shape, ending at the last assistant turn
    (what follows it, e.g. the observation of `submit`, teaches nothing)."""
    out: list[dict[str, Any]] = []
    for m in attempt.messages:
        role = m.get("role")
        if role not in ROLES:
            continue
        msg: dict[str, Any] = {"role": role, "content": _text(m.get("content"))}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = [_tool_call(tc) for tc in m["tool_calls"]]
            if not msg["content"]:
                msg["content"] = None
        if role == "tool":
            msg["tool_call_id"] = str(m.get("tool_call_id") or "")
        out.append(msg)
    last = max((i for i, m in enumerate(out) if m["role"] == "assistant"), default=-1)
    return out[:last + 1]


def _arguments(call: dict[str, Any]) -> Any:
    try:
        return json.loads(call["function"]["arguments"])
    except ValueError:
        return call["function"]["arguments"]


def _flatten_tool_calls(msg: dict[str, Any]) -> str:
    """Assistant text with its tool calls written inline, for formats with plain string content."""
    text = msg.get("content") or ""
    calls = [f"<tool_call>\n{json.dumps({'name': c['function']['name'], 'arguments': _arguments(c)})}\n</tool_call>"
             for c in msg.get("tool_calls", [])]
    return "\n".join(([text] if text else []) + calls)


def tools_from_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions rebuilt from the calls made (names and argument keys as strings), used only
    when the run manifest does not record the tools offered (config["tools"])."""
    seen: dict[str, set[str]] = {}
    for m in messages:
        for c in m.get("tool_calls") or []:
            args = _arguments(c)
            seen.setdefault(c["function"]["name"], set()).update(args if isinstance(args, dict) else {})
    return [{"type": "function", "function": {
        "name": name, "parameters": {"type": "object", "properties": {a: {"type": "string"} for a in sorted(keys)},
                                     "required": sorted(keys)}}} for name, keys in sorted(seen.items())]


# ---------------------------------------------------------------- converters

def to_openai(attempt: Attempt, tools: Optional[list[dict[str, Any]]] = None) -> Optional[dict[str, Any]]:
    messages = openai_messages(attempt)
    if not any(m["role"] == "assistant" for m in messages):
        return None
    record: dict[str, Any] = {"messages": messages}
    if any(m.get("tool_calls") for m in messages):
        record["tools"] = tools or tools_from_calls(messages)
    return record


def to_hf_chat(attempt: Attempt, tools: Any = None) -> Optional[dict[str, Any]]:
    messages = openai_messages(attempt)
    if not any(m["role"] == "assistant" for m in messages):
        return None
    return {"messages": [{"role": m["role"], "content": _flatten_tool_calls(m) if m["role"] == "assistant"
                          else m["content"]} for m in messages]}


def to_sharegpt(attempt: Attempt, tools: Any = None) -> Optional[dict[str, Any]]:
    chat = to_hf_chat(attempt)
    if chat is None:
        return None
    return {"conversations": [{"from": SHAREGPT_FROM[m["role"]], "value": m["content"]} for m in chat["messages"]]}


# ---------------------------------------------------------------- validators (problems; empty = valid)

def validate_openai(record: Any) -> list[str]:
    problems: list[str] = []
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list) or not record["messages"]:
        return ["record must be an object with a non-empty 'messages' list"]
    extra = set(record) - {"messages", "tools", "parallel_tool_calls"}
    if extra:
        problems.append(f"unexpected top-level keys {sorted(extra)}")
    tool_names: Optional[set[str]] = None
    if "tools" in record:
        tools = record["tools"]
        if not isinstance(tools, list) or not tools:
            problems.append("'tools' must be a non-empty list")
        else:
            tool_names = set()
            for t in tools:
                fn = t.get("function") if isinstance(t, dict) else None
                if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                        or not isinstance(fn.get("name"), str) or not isinstance(fn.get("parameters", {}), dict):
                    problems.append(f"bad tool definition {str(t)[:80]}")
                else:
                    tool_names.add(fn["name"])
    call_ids: set[str] = set()
    allowed = {"role", "content", "name", "weight", "tool_calls", "tool_call_id"}
    for i, m in enumerate(record["messages"]):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            problems.append(f"{where}: role must be one of {ROLES}")
            continue
        if set(m) - allowed:
            problems.append(f"{where}: unexpected keys {sorted(set(m) - allowed)}")
        content, calls = m.get("content"), m.get("tool_calls")
        if not (isinstance(content, str) or (content is None and m["role"] == "assistant" and calls)):
            problems.append(f"{where}: content must be a string")
        if "weight" in m and m["weight"] not in (0, 1):
            problems.append(f"{where}: weight must be 0 or 1")
        if calls is not None:
            if m["role"] != "assistant" or not isinstance(calls, list) or not calls:
                problems.append(f"{where}: tool_calls must be a non-empty list on an assistant message")
                continue
            for c in calls:
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or c.get("type") != "function" or not c.get("id") \
                        or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
                    problems.append(f"{where}: tool call needs id, type 'function', function.name, function.arguments")
                    continue
                try:
                    json.loads(fn["arguments"])
                except ValueError:
                    problems.append(f"{where}: tool call {c['id']} arguments are not JSON")
                if tool_names is not None and fn["name"] not in tool_names:
                    problems.append(f"{where}: tool {fn['name']!r} is not in 'tools'")
                call_ids.add(c["id"])
        if m["role"] == "tool" and m.get("tool_call_id") not in call_ids:
            problems.append(f"{where}: tool message answers unknown tool_call_id {m.get('tool_call_id')!r}")
    if any(m.get("tool_calls") for m in record["messages"] if isinstance(m, dict)) and "tools" not in record:
        problems.append("tool calls present but no 'tools'")
    if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in record["messages"]):
        problems.append("no assistant message to train on")
    return problems


def _validate_turns(turns: Any, key: str, who: str, text: str, allowed: tuple[str, ...],
                    need: tuple[str, str]) -> list[str]:
    if not isinstance(turns, list) or not turns:
        return [f"record must be an object with a non-empty '{key}' list"]
    problems = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or set(t) != {who, text}:
            problems.append(f"{key}[{i}]: must have exactly the keys {who!r} and {text!r}")
        elif t[who] not in allowed:
            problems.append(f"{key}[{i}]: {who} must be one of {allowed}")
        elif not isinstance(t[text], str):
            problems.append(f"{key}[{i}]: {text} must be a string")
    roles = {t.get(who) for t in turns if isinstance(t, dict)}
    problems += [f"no {r!r} turn" for r in need if r not in roles]
    return problems


def validate_hf_chat(record: Any) -> list[str]:
    if not isinstance(record, dict) or set(record) != {"messages"}:
        return ["record must be an object with only 'messages'"]
    return _validate_turns(record["messages"], "messages", "role", "content", ROLES, ("user", "assistant"))


def validate_sharegpt(record: Any) -> list[str]:
    if not isinstance(record, dict) or set(record) != {"conversations"}:
        return ["record must be an object with only 'conversations'"]
    return _validate_turns(record["conversations"], "conversations", "from", "value",
                           tuple(SHAREGPT_FROM.values()), ("human", "gpt"))


CONVERTERS: dict[str, Callable[..., Optional[dict[str, Any]]]] = {
    "openai": to_openai, "hf-chat": to_hf_chat, "sharegpt": to_sharegpt}
VALIDATORS: dict[str, Callable[[Any], list[str]]] = {
    "openai": validate_openai, "hf-chat": validate_hf_chat, "sharegpt": validate_sharegpt}


# ---------------------------------------------------------------- export

def action_signature(attempt: Attempt) -> str:
    """Hash of the attempt's sequence of actions: same task + same signature = a duplicate trajectory."""
    actions = [[a.kind, a.command, a.path, a.content] for s in attempt.steps for a in s.actions]
    return hashlib.sha256(json.dumps([attempt.task_id, actions]).encode()).hexdigest()


@dataclass
class ExportResult:
    path: Path
    written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    first_invalid: str = ""  # the first record that failed its format check, and why


def export_run(run_dir: str | Path, fmt: str, out: Optional[str | Path] = None, only_solved: bool = False,
               dedupe: bool = False) -> ExportResult:
    """Write one JSONL record per exported attempt; the file appears whole (temp file + rename)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    run = open_run(run_dir)
    path = Path(out) if out else run.dir / f"export-{fmt}{'-solved' if only_solved else ''}.jsonl"
    tools = run.manifest.config.get("tools") or None  # the tools offered, if the eval loop recorded them
    convert, validate = CONVERTERS[fmt], VALIDATORS[fmt]
    result = ExportResult(path)
    seen: set[str] = set()

    def skip(reason: str) -> None:
        result.skipped[reason] = result.skipped.get(reason, 0) + 1

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for attempt in run.iter_attempts():
                if attempt.status == "error":
                    skip("infra error")
                    continue
                if only_solved and not attempt.solved:
                    skip("not solved")
                    continue
                if dedupe:
                    sig = action_signature(attempt)
                    if sig in seen:
                        skip("duplicate actions")
                        continue
                    seen.add(sig)
                record = convert(attempt, tools)
                if record is None:
                    skip("no assistant message")
                    continue
                problems = validate(record)
                if problems:  # a malformed conversation: never write bad training data
                    skip("invalid record")
                    result.first_invalid = result.first_invalid or f"{attempt.key}: {problems[0]}"
                    continue
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                result.written += 1
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result
