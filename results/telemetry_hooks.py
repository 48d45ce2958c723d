"""The telemetry subscriber: hears what the agent loop and the runner announce (results/hooks.py) and makes
of it an attempt's spans, span events, Prometheus metrics and JSON events (docs/observability.md lists them).
results/telemetry.py subscribes TELEMETRY while tracing or metrics are on.

One trace per attempt: `invoke_agent harness` (root, its retries as `retry` events) over `sandbox acquire`,
one `chat {model}` per model call, one `execute_tool {tool}` per action, `capture changes` and `grade`.
Span attributes are built only while tracing is on; content only with the conventions' capture switch.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from results import hooks, telemetry
from results.schema import Action, Attempt

AGENT_NAME = "harness"


def provider_name(model: str) -> str:
    """gen_ai.provider.name for a model string: litellm's provider prefix (openai, anthropic, ...), the
    OpenAI API for openai-compat servers, and our own backends by name."""
    if model.startswith("openai-compat:"):
        return "openai"
    if model.startswith(("local:", "replay:")):
        return "harness." + model.split(":", 1)[0]
    prefix = model.split("/", 1)[0] if "/" in model else "openai"
    return {"gemini": "gcp.gemini", "vertex_ai": "gcp.vertex_ai", "bedrock": "aws.bedrock"}.get(
        prefix, prefix
    )


def messages_attr(messages: list[dict[str, Any]]) -> str:
    """Chat messages in the conventions' shape (role + parts), as the JSON text of gen_ai.input.messages."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        if m.get("content"):
            parts.append({"type": "text", "content": m["content"]})
        for c in m.get("tool_calls") or []:
            fn = c.get("function", {})
            parts.append(
                {
                    "type": "tool_call",
                    "id": c.get("id"),
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                }
            )
        if m.get("role") == "tool":
            parts = [
                {"type": "tool_call_response", "id": m.get("tool_call_id"), "response": m.get("content")}
            ]
        out.append({"role": m.get("role"), "parts": parts})
    return json.dumps(out)


class Telemetry(hooks.Observer):
    def attempt(self, key: str, task_id: str, run_id: str, sample: int, model: str) -> hooks.AttemptWatch:
        return _Attempt(key, task_id, run_id, sample, model)

    def acquire(self, image: str) -> hooks.AcquireWatch:
        return _Acquire(image)

    def capture(self) -> hooks.CaptureWatch:
        return _Capture()

    def grading(self, about: dict[str, Any]) -> hooks.GradingWatch:
        return _Grading(about)

    def model_call(
        self, model: str, step: int, temperature: float, max_tokens: Optional[int], messages: list[dict]
    ) -> hooks.ModelCallWatch:
        return _ModelCall(model, step, temperature, max_tokens, messages)

    def tool_call(self, action: Action) -> hooks.ToolCallWatch:
        return _ToolCall(action)

    def run_pool(self, pool: Any) -> None:
        m = telemetry.metrics()
        if m:
            m.pools[:] = [pool]  # one run's pool at a time (train runs several)

    def recorded(self, rec: Attempt) -> None:
        """After an attempt's record is durable: its log event and its metrics."""
        d = rec.durations
        telemetry.event(
            "attempt_finished",
            key=rec.key,
            task_id=rec.task_id,
            sample=rec.sample,
            status=rec.status,
            reason=rec.reason,
            exit_reason=rec.exit_reason,
            reward=rec.reward,
            steps=rec.n_steps,
            error=(rec.error or "")[:300] or None,
            durations=d.model_dump(),
            trace_id=rec.trace_id or None,
        )
        m = telemetry.metrics()
        if m:
            m.attempts.labels(rec.status, rec.reason).inc()
            m.attempt_duration.labels(rec.status).observe(d.total)
            m.cost.inc(rec.cost)


TELEMETRY = Telemetry()


class _Spanned:
    """A watch whose work is one span (telemetry.NO_SPAN while tracing is off): the span is the current
    one while the work runs, and an exception that ends the work marks it an error."""

    span: Any

    def __enter__(self) -> Any:
        self.span.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        return self.span.__exit__(*exc)


class _Attempt(_Spanned, hooks.AttemptWatch):
    def __init__(self, key: str, task_id: str, run_id: str, sample: int, model: str):
        self.key, self.task_id, self.sample = key, task_id, sample
        attrs = None
        if telemetry.tracing():
            attrs = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.conversation.id": key,
                "gen_ai.provider.name": provider_name(model),
                "gen_ai.request.model": model,
                "harness.run.id": run_id,
                "harness.task.id": task_id,
                "harness.sample": sample,
                "openinference.span.kind": "AGENT",
            }
        self.span = telemetry.span(f"invoke_agent {AGENT_NAME}", attrs, root=True)

    def __enter__(self) -> Any:
        super().__enter__()
        telemetry.event("attempt_started", key=self.key, task_id=self.task_id, sample=self.sample)
        if m := telemetry.metrics():
            m.in_flight.inc()
        return self

    def __exit__(self, *exc: Any) -> None:
        if m := telemetry.metrics():
            m.in_flight.dec()
        return super().__exit__(*exc)

    @property
    def trace_id(self) -> str:
        return self.span.trace_id

    def retrying(self, attempt_try: int, error: BaseException, again: bool) -> None:
        cause = type(error).__name__
        message = f"{cause}: {error}"[:500]
        self.span.event("retry", {"harness.try": attempt_try, "error.type": cause, "message": message})
        telemetry.event(
            "infra_error", key=self.key, attempt_try=attempt_try, cause=cause, error=message, retry=again
        )
        if m := telemetry.metrics():
            m.retries.labels(cause).inc()

    def finished(self, rec: Attempt) -> None:
        self.span.set(
            {
                "harness.status": rec.status,
                "harness.reason": rec.reason,
                "harness.reward": rec.reward,
                "harness.exit_reason": rec.exit_reason,
                "gen_ai.usage.input_tokens": rec.prompt_tokens,
                "gen_ai.usage.output_tokens": rec.completion_tokens,
            }
        )
        if rec.status == "error":
            self.span.set({"error.type": rec.reason})


class _Acquire(_Spanned, hooks.AcquireWatch):
    def __init__(self, image: str):
        self.span = telemetry.span("sandbox acquire", {"harness.sandbox.image": image})

    def acquired(self, warm: Optional[bool], seconds: float) -> None:
        self.span.set({"harness.sandbox.warm": warm})
        m = telemetry.metrics()
        if m and warm is not None:
            m.acquired(seconds, warm)


class _Capture(_Spanned, hooks.CaptureWatch):
    def __init__(self) -> None:
        self.span = telemetry.span("capture changes")

    def captured(self, files: int, rejected: int) -> None:
        self.span.set({"harness.changes.files": files, "harness.changes.rejected": rejected})


class _Grading(_Spanned, hooks.GradingWatch):
    def __init__(self, about: dict[str, Any]):
        self.span = telemetry.span("grade", about)

    def graded(self, verdict: Optional[hooks.Outcome]) -> None:
        if verdict is not None:
            self.span.set(
                {
                    "harness.reward": verdict.reward,
                    "harness.reason": verdict.reason,
                    "harness.solved": verdict.solved,
                }
            )


class _ModelCall(_Spanned, hooks.ModelCallWatch):
    def __init__(
        self, model: str, step: int, temperature: float, max_tokens: Optional[int], messages: list[dict]
    ):
        self.model = model
        attrs = None
        if telemetry.tracing():
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider_name(model),
                "gen_ai.request.model": model,
                "gen_ai.request.temperature": temperature,
                "gen_ai.request.max_tokens": max_tokens,
                "harness.step": step,
                "openinference.span.kind": "LLM",  # Phoenix's own span kind, beside the conventions'
            }
            if telemetry.capture_content():
                attrs["gen_ai.input.messages"] = messages_attr(messages)
        self.span = telemetry.span(f"chat {model}", attrs, kind="CLIENT")

    def answered(self, reply: hooks.Reply, seconds: float) -> None:
        if telemetry.tracing():
            self.span.set(
                {
                    "gen_ai.response.model": self.model,
                    "gen_ai.response.finish_reasons": [reply.finish_reason],
                    "gen_ai.usage.input_tokens": reply.prompt_tokens,
                    "gen_ai.usage.output_tokens": reply.completion_tokens,
                    "gen_ai.usage.cache_read.input_tokens": reply.cached_tokens,
                    "harness.cost_usd": reply.cost,
                }
            )
            if telemetry.capture_content():
                self.span.set({"gen_ai.output.messages": _output_messages(reply)})
        _record_chat(self.model, seconds, reply.prompt_tokens, reply.completion_tokens)

    def failed(self, error: str, seconds: float) -> None:
        self.span.set({"error.type": error})
        _record_chat(self.model, seconds, 0, 0, error)


class _ToolCall(_Spanned, hooks.ToolCallWatch):
    def __init__(self, action: Action):
        self.tool = action.kind  # bash, write or format_error
        attrs = None
        if telemetry.tracing():
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": self.tool,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": action.tool_call_id,
                "openinference.span.kind": "TOOL",
            }
            if telemetry.capture_content():
                attrs["gen_ai.tool.call.arguments"] = action.command if action.kind == "bash" else action.path
        self.span = telemetry.span(f"execute_tool {self.tool}", attrs)

    def ran(self, observation: str, exit_code: Optional[int], timed_out: bool, seconds: float) -> None:
        if telemetry.tracing():
            self.span.set(
                {
                    "process.exit.code": exit_code,
                    "harness.tool.duration_s": seconds,
                    "harness.tool.timed_out": timed_out,
                    "harness.tool.output_truncated": "characters cut here ...]" in observation,
                }
            )
            if telemetry.capture_content():
                self.span.set({"gen_ai.tool.call.result": observation})
        if m := telemetry.metrics():
            m.tool_duration.labels(self.tool).observe(seconds)


def _output_messages(reply: hooks.Reply) -> str:
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in reply.tool_calls
    ]
    return messages_attr([{"role": "assistant", "content": reply.content, "tool_calls": calls}])


def _record_chat(
    model: str, seconds: float, input_tokens: int, output_tokens: int, error: Optional[str] = None
) -> None:
    m = telemetry.metrics()
    if m is None:
        return
    labels = ("chat", provider_name(model), model)
    m.op_duration.labels(*labels, error or "").observe(seconds)
    if error is None:
        m.tokens.labels(*labels, "input").observe(input_tokens)
        m.tokens.labels(*labels, "output").observe(output_tokens)
