"""The loop's exit reasons that end an attempt early (wall time, context window), the protocol choice, and how
a task's own limits merge with the run's (CLI) limits. Models here are small in-process objects or a real
HTTP server; the sandbox is an in-memory fake (tests/helpers.py FakeSandbox), none of these needs Docker."""

from __future__ import annotations

import asyncio
import re

import pytest

from agent.config import LoopConfig
from agent.loop import run_loop
from agent.models import RetryPolicy
from agent.models.base import Completion
from agent.models.openai_compat import OpenAICompatModel
from agent.prompt_format import TOOLS
from agent.sandbox import ExecResult
from evaluators.run.policies import loop_policy
from tasks.model import AgentLimits
from tests.helpers import FakeSandbox, make_task

NO_BLOCK = "I am thinking about it."  # the text protocol's format error: a step that runs nothing
TWO_BLOCKS = "```bash\nls\n```\n```bash\npwd\n```"  # another format error (so the loop does not see 'stuck')


class Scripted:
    """A model that answers with `reply` (after `delay` seconds), or never answers (reply=None), and records
    the `tools` and message count of every call."""

    name, context_window = "scripted", 100_000

    def __init__(
        self,
        reply: str | None | tuple = (NO_BLOCK, TWO_BLOCKS),
        delay: float = 0.0,
        supports_tools: bool = False,
        tokens_per_message: int = 10,
    ):
        self.replies = reply if isinstance(reply, tuple) else (reply,)  # taken in turn
        self.delay, self.supports_tools = delay, supports_tools
        self.tokens_per_message = tokens_per_message
        self.calls: list[dict] = []

    def count_tokens(self, messages):
        return self.tokens_per_message * len(messages)

    async def complete(self, messages, tools=None, n=1, temperature=0.0, max_tokens=512, seed=None):
        self.calls.append({"tools": tools, "n_messages": len(messages), "system": messages[0]["content"]})
        reply = self.replies[(len(self.calls) - 1) % len(self.replies)]
        if reply is None:
            await asyncio.Event().wait()  # never answers
        await asyncio.sleep(self.delay)
        return [Completion(content=reply, prompt_tokens=5, completion_tokens=5)]


def loop(model, cfg: LoopConfig):
    """Where no action runs a command (format errors, submit, model failures): any exec is a test failure."""
    sb = FakeSandbox()
    res = asyncio.run(run_loop(model, sb, "Do the task.", cfg))
    assert sb.commands == [], "no command should run here"
    return res


# ---- wall_time ------------------------------------------------------------------------------------


def test_a_model_that_never_answers_ends_with_wall_time():
    res = loop(Scripted(reply=None), LoopConfig(wall_time=0.5))  # the model call gets at least 1 s
    assert (res.exit_reason, len(res.steps)) == ("wall_time", 0)


def test_wall_time_checked_after_each_step():
    # A deadline already past when the first step ends: the loop stops after that step, not at max_steps.
    res = loop(Scripted(), LoopConfig(wall_time=0.0, max_steps=5))
    assert (res.exit_reason, len(res.steps)) == ("wall_time", 1)


# ---- context_exceeded -----------------------------------------------------------------------------


def test_prompt_that_cannot_fit_the_window_ends_before_calling_the_model():
    model = Scripted(tokens_per_message=10_000)
    model.context_window = 4_000  # even the system prompt + instruction cannot fit
    res = loop(model, LoopConfig(max_reply_tokens=100))
    assert (res.exit_reason, len(res.steps), model.calls) == ("context_exceeded", 0, [])


def test_window_filling_up_ends_the_attempt_when_nothing_is_left_to_elide():
    model = Scripted(tokens_per_message=100)
    model.context_window = 100 * 6 + 50  # room for 6 messages (eliding keeps their count)
    res = loop(model, LoopConfig(max_reply_tokens=50, max_steps=30, demonstration=False))
    # 2 messages to start, 2 more per step: the 4th prompt (8 x 100 tokens) cannot fit 650 - 50.
    assert (res.exit_reason, len(res.steps)) == ("context_exceeded", 3)


def test_the_providers_context_length_error_ends_the_attempt(flaky):
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    srv = flaky([(400, {}, body)])
    model = OpenAICompatModel("small", srv.base_url, retry=RetryPolicy(timeout=30.0))
    res = loop(model, LoopConfig(protocol="text"))
    assert (res.exit_reason, len(res.steps), srv.calls) == ("context_exceeded", 0, 1)


def test_other_provider_errors_are_model_errors_not_context(flaky):
    srv = flaky([403])
    res = loop(
        OpenAICompatModel("small", srv.base_url, retry=RetryPolicy(timeout=30.0)), LoopConfig(protocol="text")
    )
    assert res.exit_reason == "model_error" and "403" in res.model_error


# ---- --protocol -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "protocol,supports_tools,sends_tools",
    [("auto", True, True), ("auto", False, False), ("tools", False, True), ("text", True, False)],
)
def test_protocol_decides_whether_tools_are_offered(protocol, supports_tools, sends_tools):
    model = Scripted(supports_tools=supports_tools)
    loop(model, LoopConfig(protocol=protocol, max_steps=1))
    [call] = model.calls
    assert call["tools"] == (TOOLS if sends_tools else None)
    assert ("by calling tools" in call["system"]) is sends_tools  # agent/prompts/system_tools.md, not _text
    # The text protocol starts with the worked example exchange; the tools protocol does not.
    assert call["n_messages"] == (2 if sends_tools else 2 + 6)


def test_the_tools_protocol_reads_tool_calls_not_text():
    # A text reply under --protocol tools is not a command: it is a format error, and nothing runs.
    res = loop(Scripted(reply="```bash\nsubmit\n```"), LoopConfig(protocol="tools", max_steps=2))
    assert res.exit_reason == "max_steps"
    assert [a.kind for s in res.steps for a in s.actions] == ["format_error", "format_error"]
    res = loop(Scripted(reply="```bash\nsubmit\n```"), LoopConfig(protocol="text", max_steps=2))
    assert (res.exit_reason, len(res.steps)) == ("submitted", 1)


# ---- task limits merged with the run's limits -----------------------------------------------------


def act(model, cfg: LoopConfig, limits: AgentLimits, sb: FakeSandbox | None = None):
    """The loop as the runner starts it for a task with these limits; without `sb` no command may run."""
    fake = sb or FakeSandbox()
    res = asyncio.run(loop_policy(model, cfg, asyncio.Semaphore(1), 0)(make_task(agent=limits), fake))
    assert sb is not None or fake.commands == [], "no command should run here"
    return res


@pytest.mark.parametrize("cli_steps,task_steps,expected", [(30, 2, 2), (3, 30, 3), (4, 4, 4)])
def test_max_steps_is_the_smaller_of_task_and_run(cli_steps, task_steps, expected):
    res = act(Scripted(), LoopConfig(max_steps=cli_steps), AgentLimits(max_steps=task_steps))
    assert (res.exit_reason, len(res.steps)) == ("max_steps", expected)


@pytest.mark.slow
def test_the_tasks_wall_time_applies_unless_the_run_turns_it_off():
    slow = dict(reply="```bash\nsubmit\n```", delay=2.0)  # answers after 2 s; the task allows 1 s
    limits = AgentLimits(timeout_sec=1.0)
    assert act(Scripted(**slow), LoopConfig(wall_time=600), limits).exit_reason == "wall_time"
    assert (
        act(Scripted(**slow), LoopConfig(wall_time=600, task_wall_time=False), limits).exit_reason
        == "submitted"
    )
    # and the run's wall time applies when it is the smaller one
    assert (
        act(Scripted(**slow), LoopConfig(wall_time=1.0), AgentLimits(timeout_sec=600)).exit_reason
        == "wall_time"
    )


def test_command_timeout_is_the_smaller_of_task_and_run():
    sleeper = "```bash\nsleep 30; echo woke\n```"
    for cfg, limits in (
        (LoopConfig(max_steps=1, command_timeout=60), AgentLimits(command_timeout_sec=1)),
        (LoopConfig(max_steps=1, command_timeout=1), AgentLimits(command_timeout_sec=60)),
    ):
        sb = FakeSandbox(
            {"sleep 30; echo woke": ExecResult(exit_code=0, stdout="woke\n", stderr="", duration=30.0)}
        )
        res = act(Scripted(reply=sleeper), cfg, limits, sb)
        [step] = res.steps
        assert [c["timeout"] for c in sb.calls] == [1]
        assert step.timed_out and "woke" not in step.observation
        assert re.search(r"did not finish within 1(\.0)? seconds", step.observation), step.observation


# ---- time queued for the model is not the attempt's ------------------------------------------------


@pytest.mark.slow
def test_waiting_for_the_shared_model_slots_does_not_use_up_the_wall_time():
    # Three attempts share one model slot; each reply takes 0.8 s of the model's own time, well inside
    # the 1.5 s limit, but the last attempt waits 1.6 s for the slot first: only the waiting exceeds it.
    model = Scripted(reply="```bash\nsubmit\n```", delay=0.8)
    slots = asyncio.Semaphore(1)
    cfg = LoopConfig(wall_time=1.5)

    async def three():
        return await asyncio.gather(
            *(loop_policy(model, cfg, slots, s)(make_task(), FakeSandbox()) for s in range(3))
        )

    results = asyncio.run(three())
    assert [r.exit_reason for r in results] == ["submitted"] * 3
    waits = sorted(r.steps[0].wait_seconds for r in results)
    assert waits[0] < 0.5 and waits[-1] > 1.5  # the record says how much went to waiting
    assert all(r.steps[0].model_seconds >= r.steps[0].wait_seconds for r in results)


def test_a_model_that_works_past_the_limit_still_times_out_while_others_wait():
    # the exclusion covers waiting only: a call that is itself slow ends at the limit as before
    model = Scripted(reply="```bash\nsubmit\n```", delay=3.0)
    res = act(model, LoopConfig(wall_time=1.0), AgentLimits())
    assert (res.exit_reason, len(res.steps)) == ("wall_time", 0)


def test_a_providers_rate_limit_backoff_counts_as_waiting():
    from agent.models.base import WAITING, Waiting
    from agent.models.retry import call_with_retries

    clock, tries = Waiting(), []

    async def request():
        tries.append(1)
        if len(tries) == 1:
            raise _RateLimited()
        return "ok"

    async def backoff(seconds):  # the policy's own wait, made a fixed 0.2 s here
        await asyncio.sleep(0.2)

    async def main():
        WAITING.set(clock)
        policy = RetryPolicy(max_attempts=2, sleep=backoff)
        return await call_with_retries(request, what="model 'x'", policy=policy)

    assert asyncio.run(main()) == "ok" and len(tries) == 2
    assert clock.seconds() >= 0.2


class _RateLimited(Exception):
    status_code = 429


@pytest.mark.model
@pytest.mark.slow
def test_an_attempt_queued_behind_the_local_decoder_is_not_timed_out_by_the_queue():
    """The real scheduler of agent/models/local.py: the decoding thread is held (inside a blocker request's
    join) for longer than the attempt's whole wall time while the attempt's request waits in the queue.
    The limit is 30 s so that the reply's own decoding fits it on a loaded 2-core machine (load 20: ~12 s)."""
    import threading
    import time

    from agent.models import get_model

    model = get_model("local:smollm2-135m")
    entered, gate = threading.Event(), threading.Event()

    def hold():
        entered.set()
        gate.wait(120)

    try:
        blocker = model.submit(model.encode([{"role": "user", "content": "hi"}]), max_tokens=1, on_join=hold)
        assert entered.wait(30)

        async def main():
            async def release():
                await asyncio.sleep(35.0)  # past the attempt's 30 s limit
                gate.set()

            opened = asyncio.ensure_future(release())
            started = time.monotonic()
            res = await run_loop(
                model,
                FakeSandbox(),
                "Do the task.",
                LoopConfig(wall_time=30.0, max_steps=1, max_reply_tokens=2),
            )
            await opened
            return res, time.monotonic() - started

        res, took = asyncio.run(main())
        blocker.future.result(timeout=60)
        assert res.exit_reason == "max_steps", res.exit_reason  # it got its reply: not "wall_time"
        assert took > 30.0 and res.steps[0].wait_seconds >= 34.0
    finally:
        gate.set()
        model.close()


@pytest.mark.model
def test_the_local_decoder_counts_the_other_requests_share_of_a_shared_step_as_waiting():
    from agent.models import get_model
    from agent.models.base import Waiting

    model = get_model("local:smollm2-135m")
    try:
        prompt = model.encode([{"role": "user", "content": "Count to ten."}])
        alone = Waiting()
        model.submit(prompt, max_tokens=8, clock=alone).future.result(timeout=120)
        assert alone.seconds() == 0.0  # every step was its own: nothing to leave out of its limit
        together = [Waiting(), Waiting()]
        requests = [model.submit(prompt, max_tokens=8, seed=s, temperature=1.0, clock=c) for s, c in
                    zip((1, 2), together)]  # fmt: skip
        for r in requests:
            r.future.result(timeout=120)
        assert all(c.seconds() > 0 for c in together)  # half of each shared step was the other's
    finally:
        model.close()
