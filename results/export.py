"""`harness export RUN --format FORMAT`: trajectories as fine-tuning data (JSONL, and optionally a local
Hugging Face `datasets` folder written with save_to_disk).

The source is Attempt.messages, the final conversation as OpenAI chat message dicts. Infra errors
(status == "error") are never exported: they are the harness failing, not the model acting.

The worked example that precedes every text-protocol task (agent/prompts/demonstration.json) is never
a training target: `openai` keeps it as context with "weight": 0 on its assistant turns, the
prompt/completion formats keep it only inside prompts, and `hf-chat`/`sharegpt` (which train on every
turn they hold) leave it out.

- openai:            {"messages": [...], "tools": [...]} for OpenAI chat fine-tuning. Assistant tool_calls
                     and tool messages as they are (arguments a JSON string); "tools" when native tools were used.
- hf-chat:           {"messages", "tools", "task_id", "reward", "split"} as TRL's SFTTrainer reads it:
                     assistant tool_calls stay structured with dict arguments, "tools" is the list of JSON
                     schemas offered (None for text-protocol attempts).
- sharegpt:          {"conversations": [{"from": system|human|gpt|tool, "value"}]}; tool calls written into the
                     text as <tool_call>{"name": ..., "arguments": {...}}</tool_call> (the Hermes/Qwen convention).
- prompt-completion: one record per assistant turn, {"prompt": [messages before it], "completion": [the turn],
                     "tools", "task_id", "reward", "split"} (TRL's conversational prompt-completion type: loss
                     on the completion only).
- kto:               the same records plus "label": whether the attempt solved its task (TRL's unpaired
                     preference type; failed attempts are the undesirable examples).

Each written record passes the format's validate_* check; the tests use the same checks.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from results.attempts import action_signature, is_solved
from results.errors import UserError
from results.schema import Attempt
from results.store import open_run

FORMATS = ("openai", "hf-chat", "sharegpt", "prompt-completion", "kto")
DEMONSTRATION = Path(__file__).resolve().parent.parent / "agent" / "prompts" / "demonstration.json"
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


def demonstration_turns(messages: list[dict[str, Any]]) -> set[int]:
    """Indexes of the messages that are the worked-example exchange (same roles and texts, in a row)."""
    demo = [(m["role"], m["content"]) for m in json.loads(DEMONSTRATION.read_text())]
    turns = [(m.get("role"), _text(m.get("content"))) for m in messages]
    for start in range(len(turns) - len(demo) + 1):
        if turns[start:start + len(demo)] == demo:
            return set(range(start, start + len(demo)))
    return set()


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
    demo = demonstration_turns(messages)
    if not any(m["role"] == "assistant" for i, m in enumerate(messages) if i not in demo):
        return None
    for i in demo:
        if messages[i]["role"] == "assistant":
            messages[i]["weight"] = 0  # context the model saw, never a target
    record: dict[str, Any] = {"messages": messages}
    if any(m.get("tool_calls") for m in messages):
        record["tools"] = tools or tools_from_calls(messages)
    return record


def _columns(attempt: Attempt) -> dict[str, Any]:
    return {"task_id": attempt.task_id, "reward": float(attempt.reward), "split": attempt.split or ""}


def _structured(m: dict[str, Any]) -> dict[str, Any]:
    """A message as chat templates take it: tool-call arguments as dicts, content a string."""
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [{"type": "function", "function": {
            "name": c["function"]["name"], "arguments": _arguments(c) if isinstance(_arguments(c), dict)
            else {"_raw": c["function"]["arguments"]}}} for c in m["tool_calls"]]
    return out


def _offered(messages: list[dict[str, Any]], tools: Optional[list[dict[str, Any]]]) -> Optional[list[dict[str, Any]]]:
    if not any(m.get("tool_calls") for m in messages):
        return None
    return tools or tools_from_calls(messages)


def to_hf_chat(attempt: Attempt, tools: Any = None) -> Optional[dict[str, Any]]:
    messages = openai_messages(attempt)
    demo = demonstration_turns(messages)
    kept = [m for i, m in enumerate(messages) if i not in demo]  # every turn here may be trained on
    if not any(m["role"] == "assistant" for m in kept):
        return None
    return {"messages": [_structured(m) for m in kept], "tools": _offered(messages, tools), **_columns(attempt)}


def to_sharegpt(attempt: Attempt, tools: Any = None) -> Optional[dict[str, Any]]:
    messages = openai_messages(attempt)
    demo = demonstration_turns(messages)
    kept = [m for i, m in enumerate(messages) if i not in demo]
    if not any(m["role"] == "assistant" for m in kept):
        return None
    return {"conversations": [{"from": SHAREGPT_FROM[m["role"]], "value": _flatten_tool_calls(m)
                               if m["role"] == "assistant" else m["content"]} for m in kept]}


def to_prompt_completion(attempt: Attempt, tools: Any = None) -> list[dict[str, Any]]:
    """One record per assistant turn after the demonstration: the conversation before it is the prompt."""
    messages = openai_messages(attempt)
    demo = demonstration_turns(messages)
    offered = _offered(messages, tools)
    structured = [_structured(m) for m in messages]
    return [{"prompt": structured[:i], "completion": [structured[i]], "tools": offered, **_columns(attempt)}
            for i, m in enumerate(messages) if m["role"] == "assistant" and i not in demo and i > 0]


def to_kto(attempt: Attempt, tools: Any = None) -> list[dict[str, Any]]:
    return [dict(r, label=is_solved(attempt)) for r in to_prompt_completion(attempt, tools)]


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
            if m["role"] != "assistant" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
                    or not isinstance(fn.get("arguments"), dict):
                problems.append(f"{where}: tool calls need function.name and dict function.arguments")
    return problems


def _validate_columns(record: dict[str, Any], keys: set[str]) -> list[str]:
    problems = [] if set(record) == keys else [f"record keys must be {sorted(keys)}, not {sorted(record)}"]
    tools = record.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function"
                                                                     for t in tools)):
        problems.append("'tools' must be None or a list of {type: 'function', function: {...}} schemas")
    if not isinstance(record.get("task_id"), str) or not isinstance(record.get("reward"), float) \
            or not isinstance(record.get("split"), str):
        problems.append("task_id and split must be strings, reward a float")
    return problems


def validate_hf_chat(record: Any) -> list[str]:
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        return ["record must be an object with 'messages'"]
    problems = _validate_columns(record, {"messages", "tools"} | COLUMNS) + _validate_structured(record["messages"],
                                                                                                 "messages")
    roles = {m.get("role") for m in record["messages"] if isinstance(m, dict)}
    return problems + [f"no {r!r} turn" for r in ("user", "assistant") if r not in roles]


def validate_prompt_completion(record: Any, keys: set[str] = frozenset()) -> list[str]:
    if not isinstance(record, dict) or "prompt" not in record or "completion" not in record:
        return ["record must be an object with 'prompt' and 'completion'"]
    problems = _validate_columns(record, {"prompt", "completion", "tools"} | COLUMNS | set(keys))
    problems += _validate_structured(record["prompt"], "prompt") + _validate_structured(record["completion"],
                                                                                        "completion")
    if isinstance(record["completion"], list) and [m.get("role") for m in record["completion"]
                                                   if isinstance(m, dict)] != ["assistant"]:
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
    return _validate_turns(record["conversations"], "conversations", "from", "value",
                           tuple(SHAREGPT_FROM.values()), ("human", "gpt"))


# A converter returns one record, None, or a list of records (one per assistant turn).
CONVERTERS: dict[str, Callable[..., Any]] = {
    "openai": to_openai, "hf-chat": to_hf_chat, "sharegpt": to_sharegpt, "prompt-completion": to_prompt_completion,
    "kto": to_kto}
VALIDATORS: dict[str, Callable[[Any], list[str]]] = {
    "openai": validate_openai, "hf-chat": validate_hf_chat, "sharegpt": validate_sharegpt,
    "prompt-completion": validate_prompt_completion, "kto": validate_kto}


def save_hf_dataset(records: list[dict[str, Any]], folder: str | Path) -> Path:
    """The records as a local Hugging Face `datasets` folder (Dataset.save_to_disk; load_from_disk reads it).
    Columns holding lists or objects (messages, tools...) use the datasets Json type, so tool-call arguments
    keep each call's own keys instead of being widened to one Arrow struct with nulls."""
    try:
        from datasets import Dataset, Features, Json, Value
    except ImportError:
        raise UserError("--hf-dataset needs the `datasets` package: pip install 'harness[data]'") from None
    if not records:
        raise UserError("no records to write as a datasets folder (everything was skipped)")
    scalar = {"task_id": Value("string"), "split": Value("string"), "reward": Value("float64"), "label": Value("bool")}
    features = Features({key: scalar.get(key, Json()) for key in records[0]})
    columns = {key: [r.get(key) for r in records] for key in records[0]}
    Dataset.from_dict(columns, features=features).save_to_disk(str(folder))
    return Path(folder)


# ---------------------------------------------------------------- export

@dataclass
class ExportResult:
    path: Path
    written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    first_invalid: str = ""  # the first record that failed its format check, and why


def export_run(run_dir: str | Path, fmt: str, out: Optional[str | Path] = None, only_solved: bool = False,
               dedupe: bool = False, hf_dataset: Optional[str | Path] = None) -> ExportResult:
    """Write the exported records as JSONL (the file appears whole: temp file + rename), and as a local
    `datasets` folder when hf_dataset is given."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    run = open_run(run_dir)
    path = Path(out) if out else run.dir / f"export-{fmt}{'-solved' if only_solved else ''}.jsonl"
    tools = run.manifest.config.get("tools") or None  # the tools offered, if the eval loop recorded them
    convert, validate = CONVERTERS[fmt], VALIDATORS[fmt]
    result = ExportResult(path)
    seen: set[str] = set()
    kept: list[dict[str, Any]] = []

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
                if only_solved and not is_solved(attempt):
                    skip("not solved")
                    continue
                if dedupe:
                    sig = action_signature(attempt)
                    if sig in seen:
                        skip("duplicate actions")
                        continue
                    seen.add(sig)
                records = convert(attempt, tools)
                records = records if isinstance(records, list) else [] if records is None else [records]
                if not records:
                    skip("no assistant message")
                    continue
                problems = [p for r in records for p in validate(r)]
                if problems:  # a malformed conversation: never write bad training data
                    skip("invalid record")
                    result.first_invalid = result.first_invalid or f"{attempt.key}: {problems[0]}"
                    continue
                for record in records:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    result.written += 1
                    if hf_dataset is not None:
                        kept.append(record)
        if hf_dataset is not None:
            save_hf_dataset(kept, hf_dataset)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result
