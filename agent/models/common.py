"""Small helpers shared by the backends: reading OpenAI-shaped responses, prices, token estimates, and
importing litellm (its backend and the others' token counts use it)."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from agent.models.base import Completion, ToolCall


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict; {"_raw": text} when the model sent something that is not a JSON
    object."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError, RecursionError):  # a deeply nested string is not arguments either
        return {"_raw": str(raw)}
    return value if isinstance(value, dict) else {"_raw": str(raw)}


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def tool_calls_of(message: Any) -> list[ToolCall]:
    """ToolCalls from an OpenAI-format message (an SDK object or a plain dict)."""
    calls = []
    for i, call in enumerate(_get(message, "tool_calls") or []):
        fn = _get(call, "function") or {}
        calls.append(
            ToolCall(
                id=_get(call, "id") or f"call_{i}",
                name=_get(fn, "name") or "",
                arguments=parse_arguments(_get(fn, "arguments")),
            )
        )
    return calls


def completions_of(response: Any) -> list[Completion]:
    """One Completion per choice of an OpenAI-shaped chat response (openai SDK or litellm ModelResponse).

    The usage block counts the whole request: every choice gets the full prompt_tokens (each is a
    sample that saw the whole prompt) and an even share of completion_tokens.
    """
    choices = list(_get(response, "choices") or [])
    usage = _get(response, "usage")
    prompt = int(_get(usage, "prompt_tokens", 0) or 0)
    total_out = int(_get(usage, "completion_tokens", 0) or 0)
    cached = int(_get(_get(usage, "prompt_tokens_details"), "cached_tokens", 0) or 0)
    out = []
    for i, choice in enumerate(choices):
        message = _get(choice, "message") or {}
        share = total_out // len(choices) + (1 if i < total_out % len(choices) else 0)
        out.append(
            Completion(
                content=_get(message, "content") or "",
                tool_calls=tool_calls_of(message),
                prompt_tokens=prompt,
                completion_tokens=share,
                finish_reason=_get(choice, "finish_reason") or "stop",
                cached_tokens=cached,
            )
        )
    return out


def set_cost(completions: list[Completion], total: float) -> None:
    """Spread one request's cost over its completions so the sum is the request's cost."""
    for c in completions:
        c.cost = total / len(completions) if completions else 0.0


def price(
    prompt_tokens: int, completion_tokens: int, price_in: Optional[float], price_out: Optional[float]
) -> float:
    """USD for a request at per-1M-token prices."""
    return (prompt_tokens * (price_in or 0.0) + completion_tokens * (price_out or 0.0)) / 1_000_000


def apply_prices(
    completions: list[Completion], price_in: Optional[float], price_out: Optional[float]
) -> None:
    """price_in/price_out (USD per 1M tokens) override whatever cost the backend computed.

    The prompt was billed once per request, so each completion pays an equal share of it.
    """
    if price_in is None and price_out is None:
        return
    share = 1 / len(completions) if completions else 0.0
    for c in completions:
        c.cost = price(0, c.completion_tokens, price_in, price_out) + share * price(
            c.prompt_tokens, 0, price_in, price_out
        )


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message; list-of-parts content is joined, None becomes ""."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def import_litellm() -> Any:
    """litellm, imported offline-friendly and quiet (it would otherwise fetch its price map from the web)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def litellm_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Prompt tokens as the provider's tokenizer counts them, via litellm's token_counter (tiktoken for
    OpenAI and unknown models, the bundled Anthropic/DeepSeek tokenizers, ...); approx_tokens when litellm
    cannot count. Offline (HF_HUB_OFFLINE=1) litellm is told not to download Hugging Face tokenizers."""
    litellm = import_litellm()
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        litellm.disable_hf_tokenizer_download = True
    try:
        return int(litellm.token_counter(model=model, messages=messages))
    except Exception:
        return approx_tokens(messages)


def approx_tokens(messages: list[dict[str, Any]]) -> int:
    """About 4 characters a token, plus a few per message for the role markup (remote models: no
    tokenizer here)."""
    chars = 0
    for m in messages:
        chars += len(message_text(m))
        if m.get("tool_calls"):
            chars += len(json.dumps(m["tool_calls"], default=str))
    return chars // 4 + 4 * len(messages) + 2
