"""What the agent loop and the runner announce, and who hears it: the seam that keeps tracing beside them.

The loop and the runner tell observer() what happens (an attempt and its retries, the sandbox it gets, each
model call and tool call, the capture of changes, a grading, the record once durable) and nothing more; by
default nobody listens and every announcement does nothing. results/telemetry_hooks.py subscribes while
tracing or metrics are on and turns them into spans, metrics and JSON events.

Work that takes time is announced as a context manager around it (so a subscriber's span is the current one
while the work runs, and sees the exception that ends it), told its outcome before it ends; the rest are
plain calls. One observer at a time: telemetry is the only subscriber there is.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Self

from results.schema import Action, Attempt


class Reply(Protocol):
    """A model's reply as observers read it (agent/models/base.Completion, a layer above this one)."""

    content: str
    tool_calls: list[Any]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost: float
    finish_reason: str


class Outcome(Protocol):
    """A verdict as observers read it (evaluators/grading/verdict.Verdict, a layer above this one)."""

    reward: float
    reason: str
    solved: bool


class Around:
    """A context manager around one piece of work; the subclasses below are told its outcome."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class AttemptWatch(Around):
    trace_id = ""  # the trace the attempt's record names ("" when nobody traces)

    def retrying(self, attempt_try: int, error: BaseException, again: bool) -> None:
        """An infrastructure error ended try `attempt_try`; `again`: another try follows."""

    def finished(self, rec: Attempt) -> None:
        """The attempt's record, every try done (not yet durable: see Observer.recorded)."""


class AcquireWatch(Around):
    def acquired(self, warm: Optional[bool], seconds: float) -> None:
        """`warm`: from the warm pool (None: the pool does not say)."""


class CaptureWatch(Around):
    def captured(self, files: int, rejected: int) -> None:
        pass


class GradingWatch(Around):
    def graded(self, verdict: Optional[Outcome]) -> None:
        """None: this grading left the verdict to a fresh grading."""


class ModelCallWatch(Around):
    def answered(self, reply: Reply, seconds: float) -> None:
        pass

    def failed(self, error: str, seconds: float) -> None:
        """No reply: `error` is "timeout" (the wall-time limit) or the error's class name."""


class ToolCallWatch(Around):
    def ran(self, observation: str, exit_code: Optional[int], timed_out: bool, seconds: float) -> None:
        pass


# one of each, shared: announcing to nobody builds nothing
_ATTEMPT, _ACQUIRE, _CAPTURE = AttemptWatch(), AcquireWatch(), CaptureWatch()
_GRADING, _MODEL_CALL, _TOOL_CALL = GradingWatch(), ModelCallWatch(), ToolCallWatch()


class Observer:
    """Whoever hears the loop and the runner. Every hook does nothing here; a subscriber overrides them."""

    def attempt(self, key: str, task_id: str, run_id: str, sample: int, model: str) -> AttemptWatch:
        """One attempt, all its tries."""
        return _ATTEMPT

    def acquire(self, image: str) -> AcquireWatch:
        """Getting the attempt's sandbox."""
        return _ACQUIRE

    def capture(self) -> CaptureWatch:
        """Reading the agent's changes from its sandbox."""
        return _CAPTURE

    def grading(self, about: dict[str, Any]) -> GradingWatch:
        """A grading; `about`: what its evaluator kind says of it (Kind.span)."""
        return _GRADING

    def model_call(
        self, model: str, step: int, temperature: float, max_tokens: Optional[int], messages: list[dict]
    ) -> ModelCallWatch:
        """One model call of the loop's step `step`, given `messages`."""
        return _MODEL_CALL

    def tool_call(self, action: Action) -> ToolCallWatch:
        """One action run in the sandbox."""
        return _TOOL_CALL

    def run_pool(self, pool: Any) -> None:
        """The run's sandbox pool, open (one run's at a time)."""

    def recorded(self, rec: Attempt) -> None:
        """An attempt's record is durable in the run folder."""


_NOBODY = Observer()
_observer: Observer = _NOBODY


def observer() -> Observer:
    """The observer the loop and the runner tell (one that does nothing unless one subscribed)."""
    return _observer


def subscribe(obs: Observer) -> None:
    global _observer
    _observer = obs


def unsubscribe(obs: Observer) -> None:
    """Back to nobody, if `obs` is the one subscribed."""
    global _observer
    if _observer is obs:
        _observer = _NOBODY
