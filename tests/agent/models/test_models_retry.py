"""The retry layer against a real local HTTP server that misbehaves on cue, then succeeds."""

from __future__ import annotations

import asyncio
import email.utils

import pytest

from agent.models import ContextLengthError, ModelError, RetryPolicy
from agent.models.openai_compat import OpenAICompatModel
from agent.models.retry import call_with_retries, is_retryable, retry_after
from tests.helpers import FlakyServer


class Sleeps:
    """Records the waits the retry layer asks for, instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def make_model(server: FlakyServer, sleeps: Sleeps, **policy) -> OpenAICompatModel:
    policy.setdefault("timeout", 10.0)
    return OpenAICompatModel("flaky", server.base_url, retry=RetryPolicy(sleep=sleeps, **policy))


def ask(model) -> list:
    return asyncio.run(model.complete([{"role": "user", "content": "hi"}]))


def test_recovers_from_500_503_429_and_a_dropped_connection(flaky):
    server = flaky([500, 503, "drop", 429, "ok"])
    sleeps = Sleeps()
    out = ask(make_model(server, sleeps, max_attempts=6, initial_wait=1.0, max_wait=8.0))
    assert out[0].content == "fine" and out[0].prompt_tokens == 5
    assert server.calls == 5
    assert len(sleeps.waits) == 4
    # full jitter: each wait in [0, min(cap, initial * 2^k)]
    for k, wait in enumerate(sleeps.waits):
        assert 0 <= wait <= min(8.0, 1.0 * 2**k)


def test_retry_after_seconds_and_http_date_are_honoured(flaky):
    now = 1_700_000_000.0  # an injected clock: the wait is the date less "now", whatever the machine's speed
    date = email.utils.formatdate(now + 30, usegmt=True)
    server = flaky([(429, {"Retry-After": "7"}), (503, {"Retry-After": date}), "ok"])
    sleeps = Sleeps()
    ask(make_model(server, sleeps, initial_wait=0.01, max_wait=0.02, clock=lambda: now))
    assert server.calls == 3
    assert sleeps.waits == [7.0, 30.0]


def test_retry_after_is_capped(flaky):
    server = flaky([(429, {"Retry-After": "3600"}), "ok"])
    sleeps = Sleeps()
    ask(make_model(server, sleeps, max_retry_after=45.0))
    assert sleeps.waits == [45.0]


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_not_retried(flaky, status):
    server = flaky([status, "ok"])
    sleeps = Sleeps()
    with pytest.raises(ModelError) as err:
        ask(make_model(server, sleeps))
    assert server.calls == 1 and sleeps.waits == []
    message = str(err.value)
    assert "'flaky'" in message and server.base_url in message and f"scripted {status}" in message


def test_unauthorized_names_the_key_to_check(flaky):
    server = flaky([401])
    with pytest.raises(ModelError, match="OPENAI_COMPAT_API_KEY"):
        ask(make_model(server, Sleeps()))


def test_context_length_error_is_final_and_typed(flaky):
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    server = flaky([(400, {}, body), "ok"])
    with pytest.raises(ContextLengthError):
        ask(make_model(server, Sleeps()))
    assert server.calls == 1


def test_attempts_are_bounded_and_the_error_says_what_failed(flaky):
    server = flaky([503])
    sleeps = Sleeps()
    with pytest.raises(ModelError) as err:
        ask(make_model(server, sleeps, max_attempts=4))
    assert server.calls == 4 and len(sleeps.waits) == 3
    message = str(err.value)
    assert (
        "'flaky'" in message and server.base_url in message and "503" in message and "4 attempts" in message
    )


@pytest.mark.slow
def test_a_hung_request_hits_its_timeout_then_is_retried(flaky):
    # The hang never ends by itself, so only the timeout can end it; the timeout is generous so that the
    # answered retry fits in it on any machine (the test spends it once).
    server = flaky(["hang", "ok"])
    sleeps = Sleeps()
    out = ask(make_model(server, sleeps, timeout=5.0))
    assert out[0].content == "fine"
    assert server.calls == 2 and len(sleeps.waits) == 1


@pytest.mark.slow
def test_a_request_that_always_hangs_fails_with_timeout(flaky):
    server = flaky(["hang"])
    with pytest.raises(ModelError, match=r"timed out after 1s \(gave up after 2 attempts\)"):
        ask(make_model(server, Sleeps(), timeout=1.0, max_attempts=2))
    assert server.calls == 2


@pytest.mark.slow
def test_litellm_backend_uses_the_same_retry_layer(flaky):
    from agent.models.litellm_model import LiteLLMModel

    server = flaky([(429, {"Retry-After": "3"}), 500, "ok"])
    sleeps = Sleeps()
    model = LiteLLMModel(
        "openai/flaky",
        api_base=server.base_url,
        api_key="k",
        retry=RetryPolicy(sleep=sleeps, timeout=10.0, initial_wait=0.5, max_wait=1.0),
    )
    out = ask(model)
    assert out[0].content == "fine"
    assert server.calls == 3
    assert sleeps.waits[0] == 3.0 and 0 <= sleeps.waits[1] <= 1.0


@pytest.mark.slow
def test_litellm_backend_does_not_retry_401(flaky):
    from agent.models.litellm_model import LiteLLMModel

    server = flaky([401])
    model = LiteLLMModel(
        "openai/flaky", api_base=server.base_url, api_key="bad", retry=RetryPolicy(sleep=Sleeps())
    )
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        ask(model)
    assert server.calls == 1


# --- the classification itself, without a server ---


class FakeStatusError(Exception):
    def __init__(self, status: int, headers: dict | None = None) -> None:
        super().__init__(f"status {status}")
        self.status_code = status
        self.response = type("R", (), {"headers": headers or {}, "status_code": status})()


@pytest.mark.parametrize(
    "status,expected",
    [
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
    ],
)
def test_retryable_statuses(status, expected):
    assert is_retryable(FakeStatusError(status)) is expected


def test_transport_errors_are_retryable():
    assert is_retryable(ConnectionResetError())
    assert is_retryable(asyncio.TimeoutError())
    assert not is_retryable(ValueError("a bug, not a network problem"))


def test_retry_after_forms():
    assert retry_after(FakeStatusError(429, {"Retry-After": "12"})) == 12.0
    assert retry_after(FakeStatusError(429, {"retry-after-ms": "1500"})) == 1.5
    assert (
        retry_after(FakeStatusError(429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), now=1445412470.0)
        == 10.0
    )
    assert retry_after(FakeStatusError(429, {"Retry-After": "soon"})) is None
    assert retry_after(FakeStatusError(429)) is None


def test_call_with_retries_counts_attempts_without_http():
    calls = []

    async def request():
        calls.append(1)
        if len(calls) < 3:
            raise FakeStatusError(502)
        return "done"

    sleeps = Sleeps()
    assert (
        asyncio.run(call_with_retries(request, what="model 'm' at x", policy=RetryPolicy(sleep=sleeps)))
        == "done"
    )
    assert len(calls) == 3 and len(sleeps.waits) == 2
