"""The export formats: one converter per format, from an Attempt to its training record(s).

The worked example that precedes every text-protocol task (agent/prompts/demonstration.json) is never
a training target: `openai` keeps it as context with "weight": 0 on its assistant turns, the
prompt/completion formats keep it only inside prompts, and `hf-chat`/`sharegpt` (which train on every
turn they hold) leave it out.

- openai:            {"messages": [...], "tools": [...]} for OpenAI chat fine-tuning. Assistant tool_calls
                     and tool messages as they are (arguments a JSON string); "tools" when native tools
                     were used.
- hf-chat:           {"messages", "tools", "task_id", "reward", "split"} as TRL's SFTTrainer reads it:
                     assistant tool_calls stay structured with dict arguments, "tools" is the list of JSON
                     schemas offered (None for text-protocol attempts).
- sharegpt:          {"conversations": [{"from": system|human|gpt|tool, "value"}]}; tool calls written
                     into the text as <tool_call>{"name": ..., "arguments": {...}}</tool_call> (the
                     Hermes/Qwen convention).
- prompt-completion: one record per assistant turn, {"prompt": [messages before it], "completion": [the turn],
                     "tools", "task_id", "reward", "split"} (TRL's conversational prompt-completion type: loss
                     on the completion only).
- kto:               the same records plus "label": whether the attempt solved its task (TRL's unpaired
                     preference type; failed attempts are the undesirable examples).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from results.attempts import is_solved
from results.export.messages import call_arguments, demonstration_turns, openai_messages, tools_from_calls
from results.schema import Attempt

FORMATS = ("openai", "hf-chat", "sharegpt", "prompt-completion", "kto")
SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt", "tool": "tool"}


def _flatten_tool_calls(msg: dict[str, Any]) -> str:
    """Assistant text with its tool calls written inline, for formats with plain string content."""
    text = msg.get("content") or ""
    calls = [
        "<tool_call>\n"
        f"{json.dumps({'name': c['function']['name'], 'arguments': call_arguments(c)})}"
        "\n</tool_call>"
        for c in msg.get("tool_calls", [])
    ]
    return "\n".join(([text] if text else []) + calls)


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
        out["tool_calls"] = [
            {
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": call_arguments(c)
                    if isinstance(call_arguments(c), dict)
                    else {"_raw": c["function"]["arguments"]},
                },
            }
            for c in m["tool_calls"]
        ]
    return out


def _offered(
    messages: list[dict[str, Any]], tools: Optional[list[dict[str, Any]]]
) -> Optional[list[dict[str, Any]]]:
    if not any(m.get("tool_calls") for m in messages):
        return None
    return tools or tools_from_calls(messages)


def to_hf_chat(attempt: Attempt, tools: Any = None) -> Optional[dict[str, Any]]:
    messages = openai_messages(attempt)
    demo = demonstration_turns(messages)
    kept = [m for i, m in enumerate(messages) if i not in demo]  # every turn here may be trained on
    if not any(m["role"] == "assistant" for m in kept):
        return None
    return {
        "messages": [_structured(m) for m in kept],
        "tools": _offered(messages, tools),
        **_columns(attempt),
    }


def to_sharegpt(attempt: Attempt, tools: Any = None) -> Optional[dict[str, Any]]:
    messages = openai_messages(attempt)
    demo = demonstration_turns(messages)
    kept = [m for i, m in enumerate(messages) if i not in demo]
    if not any(m["role"] == "assistant" for m in kept):
        return None
    return {
        "conversations": [
            {
                "from": SHAREGPT_FROM[m["role"]],
                "value": _flatten_tool_calls(m) if m["role"] == "assistant" else m["content"],
            }
            for m in kept
        ]
    }


def to_prompt_completion(attempt: Attempt, tools: Any = None) -> list[dict[str, Any]]:
    """One record per assistant turn after the demonstration: the conversation before it is the prompt."""
    messages = openai_messages(attempt)
    demo = demonstration_turns(messages)
    offered = _offered(messages, tools)
    structured = [_structured(m) for m in messages]
    return [
        {"prompt": structured[:i], "completion": [structured[i]], "tools": offered, **_columns(attempt)}
        for i, m in enumerate(messages)
        if m["role"] == "assistant" and i not in demo and i > 0
    ]


def to_kto(attempt: Attempt, tools: Any = None) -> list[dict[str, Any]]:
    return [dict(r, label=is_solved(attempt)) for r in to_prompt_completion(attempt, tools)]


# A converter returns one record, None, or a list of records (one per assistant turn).
CONVERTERS: dict[str, Callable[..., Any]] = {
    "openai": to_openai,
    "hf-chat": to_hf_chat,
    "sharegpt": to_sharegpt,
    "prompt-completion": to_prompt_completion,
    "kto": to_kto,
}
