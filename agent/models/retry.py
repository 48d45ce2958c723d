"""The one retry layer for every HTTP model backend (OpenAI-compatible and LiteLLM).

Clients are built with their own retries off (openai max_retries=0, litellm num_retries=0), so
this is the only place that decides what is retried and how long to wait:

- retried: HTTP 408, 409, 429 and 5xx, timeouts, dropped/refused connections;
- never retried: 400, 401, 403, 404 (and any other 4xx) and context-length errors;
- the wait is exponential backoff with full jitter (uniform in [0, min(max_wait, initial * 2^k)]),
  unless the server sent Retry-After (or retry-after-ms): then exactly that, capped;
- each request has its own timeout; attempts are bounded;
- what finally fails becomes a ModelError naming the model, where it was sent and the provider's error.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional, TypeVar

import tenacity

from agent.models.base import ModelError, waiting

T = TypeVar("T")

RETRY_STATUS = {408, 409, 429}  # plus every 5xx; any other 4xx is final


class ContextLengthError(ModelError):
    """The conversation does not fit the model's context window. Never retried; the loop ends the attempt."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # requests in all, the first included
    initial_wait: float = 1.0  # seconds: the first backoff window; doubles each retry
    max_wait: float = 30.0  # cap on one backoff wait
    max_retry_after: float = 120.0  # cap on a wait the server asked for
    timeout: float = 300.0  # seconds for one request
    # Injectable so tests can record the waits instead of sleeping, and fix "now" for Retry-After dates.
    sleep: Callable[[float], Awaitable[Any]] = field(default=asyncio.sleep, compare=False, repr=False)
    clock: Callable[[], float] = field(default=time.time, compare=False, repr=False)


def status_of(exc: BaseException) -> Optional[int]:
    """The HTTP status of a provider error (openai and litellm errors carry status_code)."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _headers(exc: BaseException) -> dict[str, str]:
    found: dict[str, str] = {}
    # openai: exc.response.headers; litellm: litellm_response_headers or headers as well.
    for source in (
        getattr(getattr(exc, "response", None), "headers", None),
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
    ):
        try:
            for k, v in dict(source or {}).items():
                found.setdefault(str(k).lower(), str(v))
        except Exception:  # a header object we cannot read: ignore it, backoff still applies
            continue
    return found


def retry_after(exc: BaseException, now: Optional[float] = None) -> Optional[float]:
    """Seconds the server asked us to wait (Retry-After: seconds or HTTP date; retry-after-ms), or None."""
    headers = _headers(exc)
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


_CONTEXT_PHRASES = (
    "context length",
    "context_length",
    "maximum context",
    "context window",
    "prompt is too long",
    "too many tokens",
)


def is_context_length_error(exc: BaseException) -> bool:
    if isinstance(exc, ContextLengthError) or type(exc).__name__ == "ContextWindowExceededError":
        return True
    if status_of(exc) not in (None, 400, 413, 422):
        return False
    text = f"{getattr(exc, 'code', '')} {exc}".lower()
    return any(p in text for p in _CONTEXT_PHRASES)


# Transport failures by class name, so this module needs neither openai nor httpx imported.
_TRANSIENT_NAMES = {
    "APIConnectionError",
    "APITimeoutError",
    "Timeout",
    "TimeoutException",
    "TransportError",
    "NetworkError",
    "RemoteProtocolError",
    "ServiceUnavailableError",
}


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, ModelError) or is_context_length_error(exc):
        return False
    status = status_of(exc)
    if status is not None and (status in RETRY_STATUS or status >= 500):
        return True
    if status is not None and 400 <= status < 500:
        return False  # 400/401/403/404 and the like: the request itself is wrong
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    return any(c.__name__ in _TRANSIENT_NAMES for c in type(exc).__mro__)


def describe(exc: BaseException) -> str:
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) and not str(exc):
        return "request timed out"
    text = " ".join(str(exc).split()) or type(exc).__name__
    status = status_of(exc)
    prefix = f"HTTP {status}: " if status and str(status) not in text else ""
    return f"{type(exc).__name__}: {prefix}{text[:800]}"


def _wait(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], float]:
    backoff = tenacity.wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait)

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after(exc, now=policy.clock()) if exc is not None else None
        if asked is not None:
            return min(asked, policy.max_retry_after)
        return backoff(state)

    return wait


async def call_with_retries(
    request: Callable[[], Awaitable[T]],
    *,
    what: str,
    policy: RetryPolicy = RetryPolicy(),
    auth_hint: str = "",
) -> T:
    """Run request() (one HTTP call) until it succeeds or retrying is pointless/exhausted.

    what: names the model and where it is served, e.g. "model 'x' at http://host/v1" (goes in errors).
    auth_hint: appended to 401/403 errors, e.g. "check OPENAI_API_KEY".
    """
    attempts = 0

    async def once() -> T:
        nonlocal attempts
        attempts += 1
        async with asyncio.timeout(policy.timeout):  # not wait_for: see agent/sandbox/transport.py
            return await request()

    async def backoff(seconds: float) -> None:  # the provider's rate limit or outage: not the agent's time
        with waiting():
            await policy.sleep(seconds)

    try:
        async for attempt in tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(max(1, policy.max_attempts)),
            wait=_wait(policy),
            retry=tenacity.retry_if_exception(is_retryable),
            sleep=backoff,
            reraise=True,
        ):
            with attempt:
                return await once()
    except ModelError:
        raise
    except Exception as exc:
        cause = describe(exc)
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            cause = f"request timed out after {policy.timeout:g}s"
        if status_of(exc) in (401, 403) and auth_hint:
            cause += f" ({auth_hint})"
        tries = f" (gave up after {attempts} attempts)" if attempts > 1 else ""
        cls = ContextLengthError if is_context_length_error(exc) else ModelError
        err = cls(f"{what}: {cause}{tries}")
        err.status = status_of(exc)  # the runner tells a rejected conversation (4xx) from an outage
        raise err from exc
    raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover
