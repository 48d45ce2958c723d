"""The seam tracing sits behind (results/hooks.py): what the loop announces, with which outcome, around which
work; and that the telemetry subscriber listens exactly while tracing or metrics are on. The spans and metrics
made of it are tests/results/test_telemetry.py's."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from agent.config import LoopConfig
from agent.loop import run_loop
from agent.models import get_model
from results import hooks, telemetry, telemetry_hooks
from tests.conftest import run
from tests.helpers import SUBMIT, FakeSandbox

CHECK = "```bash\necho checked\n```"


class Recorder(hooks.Observer):
    """Writes down each announcement, its outcome and the exception that ended its work."""

    def __init__(self) -> None:
        self.heard: list[tuple] = []

    def watch(self, base: type, what: tuple) -> hooks.Around:
        heard = self.heard

        class Watch(base):
            def __enter__(self):
                heard.append(("start", *what))
                return self

            def __exit__(self, kind, exc, tb):
                heard.append(("end", what[0], kind.__name__ if kind else None))

            def answered(self, reply, seconds):
                heard.append(("answered", reply.finish_reason, reply.completion_tokens > 0, seconds >= 0))

            def failed(self, error, seconds):
                heard.append(("failed", error, seconds >= 0.9))

            def ran(self, observation, exit_code, timed_out, seconds):
                heard.append(("ran", "checked" in observation, exit_code, timed_out))

        return Watch()

    def model_call(self, model, step, temperature, max_tokens, messages):
        return self.watch(hooks.ModelCallWatch, ("model_call", step, messages[-1]["role"]))

    def tool_call(self, action):
        return self.watch(hooks.ToolCallWatch, ("tool_call", action.kind, action.command))


@pytest.fixture
def recorder():
    rec = Recorder()
    hooks.subscribe(rec)
    yield rec
    hooks.unsubscribe(rec)
    assert hooks.observer() is not rec


def test_the_loop_announces_each_model_call_and_action_around_its_work(recorder, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [CHECK, SUBMIT]}))
    model = get_model(f"replay:{script}").for_task("add", 0)
    res = run(run_loop(model, FakeSandbox({"echo checked": "checked\n"}), "do it", LoopConfig()))
    assert res.exit_reason == "submitted"
    assert recorder.heard == [
        ("start", "model_call", 0, "user"),
        ("answered", "stop", True, True),
        ("end", "model_call", None),
        ("start", "tool_call", "bash", "echo checked"),
        ("ran", True, 0, False),  # the observation has the command's output
        ("end", "tool_call", None),
        ("start", "model_call", 1, "user"),  # the observation went back as the user's message
        ("answered", "stop", True, True),
        ("end", "model_call", None),  # submit: no action runs
    ]


class _Silent:
    name, supports_tools, context_window = "openai/slow", False, 8192

    async def complete(self, *args, **kwargs):
        await asyncio.sleep(30)

    def count_tokens(self, messages):
        return 10


def test_a_model_call_the_limit_cuts_fails_and_its_work_ends_with_the_exit(recorder):
    res = run(run_loop(_Silent(), FakeSandbox(), "x", LoopConfig(wall_time=1)))
    assert res.exit_reason == "wall_time"
    assert recorder.heard == [
        ("start", "model_call", 0, "user"),
        ("failed", "timeout", True),
        ("end", "model_call", "WallTime"),
    ]


def test_nobody_listens_by_default_and_nothing_is_built():
    assert type(hooks.observer()) is hooks.Observer
    obs = hooks.observer()
    assert obs.model_call("m", 0, 0.0, 1, []) is obs.model_call("x", 1, 1.0, None, [{}])  # one shared


def test_telemetry_listens_while_tracing_or_metrics_are_on(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        assert telemetry.configure_tracing(str(tmp_path / "t.jsonl"))
        assert hooks.observer() is telemetry_hooks.TELEMETRY
        telemetry.start_metrics(port)
        telemetry.shutdown_tracing()
        assert hooks.observer() is telemetry_hooks.TELEMETRY  # metrics still on
        telemetry.stop_metrics()
        assert type(hooks.observer()) is hooks.Observer
    finally:
        telemetry.shutdown_tracing()
        telemetry.stop_metrics()
