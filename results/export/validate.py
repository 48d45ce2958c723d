"""Each export format's check of one record: a list of problems, empty when the record is valid. export_run
never writes a record that fails its check; the tests use the same checks."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from results.export.formats import SHAREGPT_FROM
from results.export.messages import ROLES


def validate_openai(record: Any) -> list[str]:
    problems: list[str] = []
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list) or not record["messages"]:
        return ["record must be an object with a non-empty 'messages' list"]
    extra = set(record) - {"messages", "tools", "parallel_tool_calls"}
    if extra:
        problems.append(f"unexpected top-level keys {sorted(extra)}")
    tool_names = _openai_tool_names(record, problems)
    call_ids: set[str] = set()  # the calls made so far: a tool message must answer one of them
    for i, m in enumerate(record["messages"]):
        problems += _openai_message(f"messages[{i}]", m, tool_names, call_ids)
    if any(m.get("tool_calls") for m in record["messages"] if isinstance(m, dict)) and "tools" not in record:
        problems.append("tool calls present but no 'tools'")
    if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in record["messages"]):
        problems.append("no assistant message to train on")
    return problems


def _openai_tool_names(record: dict, problems: list[str]) -> Optional[set[str]]:
    """The names 'tools' defines (None without 'tools'); bad definitions go to problems."""
    if "tools" not in record:
        return None
    tools = record["tools"]
    if not isinstance(tools, list) or not tools:
        problems.append("'tools' must be a non-empty list")
        return None
    tool_names: set[str] = set()
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if (
            not isinstance(t, dict)
            or t.get("type") != "function"
            or not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
            or not isinstance(fn.get("parameters", {}), dict)
        ):
            problems.append(f"bad tool definition {str(t)[:80]}")
        else:
            tool_names.add(fn["name"])
    return tool_names


def _openai_message(where: str, m: Any, tool_names: Optional[set[str]], call_ids: set[str]) -> list[str]:
    """One message's problems; the ids of its tool calls join call_ids."""
    allowed = {"role", "content", "name", "weight", "tool_calls", "tool_call_id"}
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        return [f"{where}: role must be one of {ROLES}"]
    problems = []
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
            return problems
        problems += _openai_tool_calls(where, calls, tool_names, call_ids)
    if m["role"] == "tool" and m.get("tool_call_id") not in call_ids:
        problems.append(f"{where}: tool message answers unknown tool_call_id {m.get('tool_call_id')!r}")
    return problems


def _openai_tool_calls(
    where: str, calls: list, tool_names: Optional[set[str]], call_ids: set[str]
) -> list[str]:
    """An assistant message's tool calls: well formed, JSON arguments, a tool that 'tools' defines."""
    problems = []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if (
            not isinstance(fn, dict)
            or c.get("type") != "function"
            or not c.get("id")
            or not isinstance(fn.get("name"), str)
            or not isinstance(fn.get("arguments"), str)
        ):
            problems.append(
                f"{where}: tool call needs id, type 'function', function.name, function.arguments"
            )
            continue
        try:
            json.loads(fn["arguments"])
        except ValueError:
            problems.append(f"{where}: tool call {c['id']} arguments are not JSON")
        if tool_names is not None and fn["name"] not in tool_names:
            problems.append(f"{where}: tool {fn['name']!r} is not in 'tools'")
        call_ids.add(c["id"])
    return problems


def _validate_turns(
    turns: Any, key: str, who: str, text: str, allowed: tuple[str, ...], need: tuple[str, str]
) -> list[str]:
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


COLUMNS = {"task_id", "reward", "split"}


def _validate_structured(messages: Any, key: str) -> list[str]:
    if not isinstance(messages, list) or not messages:
        return [f"'{key}' must be a non-empty list"]
    problems = []
    for i, m in enumerate(messages):
        where = f"{key}[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            problems.append(f"{where}: needs a role in {ROLES} and string content")
            continue
        if set(m) - {"role", "content", "tool_calls"}:
            problems.append(f"{where}: unexpected keys {sorted(set(m) - {'role', 'content', 'tool_calls'})}")
        if "tool_calls" in m and (not isinstance(m["tool_calls"], list) or not m["tool_calls"]):
            problems.append(f"{where}: tool_calls must be a non-empty list")
            continue
        for c in m.get("tool_calls") or []:
            fn = c.get("function") if isinstance(c, dict) else None
            if (
                m["role"] != "assistant"
                or not isinstance(fn, dict)
                or not isinstance(fn.get("name"), str)
                or not isinstance(fn.get("arguments"), dict)
            ):
                problems.append(f"{where}: tool calls need function.name and dict function.arguments")
    return problems


def _validate_columns(record: dict[str, Any], keys: set[str]) -> list[str]:
    problems = [] if set(record) == keys else [f"record keys must be {sorted(keys)}, not {sorted(record)}"]
    tools = record.get("tools")
    if tools is not None and (
        not isinstance(tools, list)
        or not all(isinstance(t, dict) and t.get("type") == "function" for t in tools)
    ):
        problems.append("'tools' must be None or a list of {type: 'function', function: {...}} schemas")
    if (
        not isinstance(record.get("task_id"), str)
        or not isinstance(record.get("reward"), float)
        or not isinstance(record.get("split"), str)
    ):
        problems.append("task_id and split must be strings, reward a float")
    return problems


def validate_hf_chat(record: Any) -> list[str]:
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        return ["record must be an object with 'messages'"]
    problems = _validate_columns(record, {"messages", "tools"} | COLUMNS) + _validate_structured(
        record["messages"], "messages"
    )
    roles = {m.get("role") for m in record["messages"] if isinstance(m, dict)}
    return problems + [f"no {r!r} turn" for r in ("user", "assistant") if r not in roles]


def validate_prompt_completion(record: Any, keys: set[str] = frozenset()) -> list[str]:
    if not isinstance(record, dict) or "prompt" not in record or "completion" not in record:
        return ["record must be an object with 'prompt' and 'completion'"]
    problems = _validate_columns(record, {"prompt", "completion", "tools"} | COLUMNS | set(keys))
    problems += _validate_structured(record["prompt"], "prompt") + _validate_structured(
        record["completion"], "completion"
    )
    if isinstance(record["completion"], list) and [
        m.get("role") for m in record["completion"] if isinstance(m, dict)
    ] != ["assistant"]:
        problems.append("'completion' must be one assistant message")
    return problems


def validate_kto(record: Any) -> list[str]:
    problems = validate_prompt_completion(record, {"label"})
    if isinstance(record, dict) and not isinstance(record.get("label"), bool):
        problems.append("'label' must be true or false")
    return problems


def validate_sharegpt(record: Any) -> list[str]:
    if not isinstance(record, dict) or set(record) != {"conversations"}:
        return ["record must be an object with only 'conversations'"]
    return _validate_turns(
        record["conversations"],
        "conversations",
        "from",
        "value",
        tuple(SHAREGPT_FROM.values()),
        ("human", "gpt"),
    )


VALIDATORS: dict[str, Callable[[Any], list[str]]] = {
    "openai": validate_openai,
    "hf-chat": validate_hf_chat,
    "sharegpt": validate_sharegpt,
    "prompt-completion": validate_prompt_completion,
    "kto": validate_kto,
}
