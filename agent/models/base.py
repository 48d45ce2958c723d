"""The model interface every backend implements. One call = one chat completion request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol


class ModelError(Exception):
    """A model call failed for good (after retries, or not retryable). The message names model and cause;
    `status` is the provider's HTTP status when there was one."""

    status: Optional[int] = None


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]  # parsed JSON; {"_raw": text} when the model sent invalid JSON


@dataclass
class Completion:
    content: str  # text reply ("" when only tool calls)
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0  # USD; 0.0 when unknown or free (never raises for unknown models)
    finish_reason: str = "stop"
    cached_tokens: int = 0  # prompt tokens the provider (or the local prefix cache) did not recompute
    # Local backend: exact token ids of the rendered prompt and of the generated reply
    # (reply ids include the end-of-turn token when the model produced it).
    prompt_ids: Optional[list[int]] = None
    completion_ids: Optional[list[int]] = None
    # Local backend, when asked: (token id, logprob, [(alternative id, logprob), ...]) per reply token
    token_logprobs: Optional[list[tuple[int, float, list[tuple[int, float]]]]] = None


class Model(Protocol):
    name: str  # the model string it was made from
    supports_tools: bool  # native tool calling; False -> the loop uses the text protocol
    context_window: int  # tokens

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]] = None,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: Optional[int] = None,
    ) -> list[Completion]:
        """n completions of one conversation (OpenAI chat message dicts, tools in OpenAI format)."""
        ...

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        """Approximate prompt size, used to keep the conversation within context_window."""
        ...
