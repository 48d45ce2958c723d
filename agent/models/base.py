"""The model interface every backend implements. One call = one chat completion request."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol


class ModelError(Exception):
    """A model call failed for good (after retries, or not retryable). The message names model and cause;
    `status` is the provider's HTTP status when there was one."""

    status: Optional[int] = None


class Waiting:
    """The seconds one attempt's model calls spent waiting, not working for it: in the queue of a shared
    local decoder and, once decoding, the other requests' share of each batch step it shares with them;
    for the run's model-concurrency slots; in a provider's rate-limit backoff. The loop
    (agent/loop.py) sets one per attempt (WAITING) and leaves this time out of its wall-time limit, so the
    limit measures the agent, not the machine's load. begin/end may be called from other threads (the
    local decoder's)."""

    def __init__(self) -> None:
        self.total = 0.0  # finished waits
        self._open: dict[int, float] = {}  # waits under way: token -> start
        self._lock = threading.Lock()
        self._next = 0

    def begin(self) -> int:
        with self._lock:
            self._next += 1
            self._open[self._next] = time.monotonic()
            return self._next

    def end(self, token: int) -> None:
        with self._lock:
            started = self._open.pop(token, None)
            if started is not None:
                self.total += time.monotonic() - started

    def add(self, seconds: float) -> None:
        """A wait measured elsewhere (a shared decoder's step: the other requests' share of it)."""
        with self._lock:
            self.total += seconds

    def seconds(self) -> float:
        """Waited so far, waits under way included."""
        now = time.monotonic()
        with self._lock:
            return self.total + sum(now - s for s in self._open.values())


# The current attempt's Waiting (None outside the loop: nothing is counted).
WAITING: contextvars.ContextVar[Optional[Waiting]] = contextvars.ContextVar("harness_waiting", default=None)


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """Counts the time inside as the current attempt's waiting (a no-op outside an attempt)."""
    clock = WAITING.get()
    token = clock.begin() if clock is not None else 0
    try:
        yield
    finally:
        if clock is not None:
            clock.end(token)


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


class GrammarError(ValueError):
    """A JSON schema the constrained decoder cannot enforce (the local model's submit json_schema). Here, not
    in local.py, so that `serve`'s handler names it without importing torch."""
