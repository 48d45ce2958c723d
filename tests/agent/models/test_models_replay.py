"""ReplayModel: scripted per-task replies and exact replays of recorded attempts."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.models import ModelError, get_model, model_for_attempt
from results.errors import UserError
from results.schema import Attempt, Step

MSGS = [{"role": "user", "content": "go"}]


def ask(model, **kw):
    return asyncio.run(model.complete(MSGS, **kw))


def script_file(tmp_path, data) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_each_attempt_replays_its_task_script_from_the_start(tmp_path):
    model = get_model("replay:" + script_file(tmp_path, {"a": ["a1", "a2"], "b": ["b1"], "*": ["default"]}))
    assert model.supports_tools is False
    first = model_for_attempt(model, "a", 0)
    assert [ask(first)[0].content, ask(first)[0].content] == ["a1", "a2"]
    second = model_for_attempt(model, "a", 1)  # a new attempt starts over
    assert ask(second)[0].content == "a1"
    assert ask(model_for_attempt(model, "b"))[0].content == "b1"
    assert ask(model_for_attempt(model, "other"))[0].content == "default"


def test_running_past_the_script_is_a_model_error(tmp_path):
    model = get_model("replay:" + script_file(tmp_path, {"a": ["only"]}))
    bound = model_for_attempt(model, "a")
    ask(bound)
    with pytest.raises(ModelError, match="1 replies"):
        ask(bound)
    with pytest.raises(ModelError, match="'zzz'"):
        ask(model_for_attempt(model, "zzz"))  # no script and no "*" default


def test_n_copies_and_unbound_model_plays_the_default(tmp_path):
    model = get_model("replay:" + script_file(tmp_path, {"x": ["nope"], "*": ["d1", "d2"]}))
    out = ask(model, n=3)
    assert [c.content for c in out] == ["d1"] * 3
    assert out[0].prompt_tokens > 0 and out[0].completion_tokens > 0  # estimated: budgets still apply
    out[0].content = "mutated"
    assert ask(model)[0].content == "d2"


def test_scripted_tool_calls_turn_on_supports_tools(tmp_path):
    reply = {
        "content": "",
        "tool_calls": [
            {"name": "bash", "arguments": {"command": "ls"}},
            {"id": "c9", "type": "function", "function": {"name": "write", "arguments": '{"path": "a"}'}},
        ],
    }
    model = get_model("replay:" + script_file(tmp_path, {"t": [reply]}))
    assert model.supports_tools is True
    [c] = ask(model_for_attempt(model, "t"))
    assert [(t.name, t.arguments) for t in c.tool_calls] == [
        ("bash", {"command": "ls"}),
        ("write", {"path": "a"}),
    ]
    assert c.tool_calls[1].id == "c9" and c.finish_reason == "tool_calls"


def test_prices_apply_to_replies(tmp_path):
    path = tmp_path / "a.jsonl"
    step = Step(index=0, raw_output="hi", prompt_tokens=1000, completion_tokens=500)
    path.write_text(
        Attempt(key="r/t/0", run_id="r", task_id="t", model="m", steps=[step]).model_dump_json() + "\n"
    )
    model = get_model(f"replay:{path}", price_in="2", price_out=10)
    [c] = ask(model_for_attempt(model, "t"))
    assert c.cost == pytest.approx((1000 * 2 + 500 * 10) / 1e6)


def _attempt(task, sample, steps):
    return Attempt(key=f"r/{task}/{sample}", run_id="r", task_id=task, sample=sample, model="m", steps=steps)


def test_recorded_attempts_replay_exactly(tmp_path):
    steps0 = [
        Step(
            index=0,
            raw_output="```bash\nls\n```",
            prompt_tokens=10,
            completion_tokens=3,
            prompt_ids=[1, 2, 3],
            completion_ids=[7, 8, 2],
        ),
        Step(
            index=1,
            raw_output="",
            tool_calls=[{"id": "call_1", "name": "bash", "arguments": {"command": "pwd"}}],
        ),
    ]
    steps1 = [Step(index=0, raw_output="sample one")]
    path = tmp_path / "attempts.jsonl"
    path.write_text(
        "\n".join(a.model_dump_json() for a in [_attempt("t", 0, steps0), _attempt("t", 1, steps1)]) + "\n"
    )
    model = get_model(f"replay:{path}")
    assert model.supports_tools is True

    s0 = model_for_attempt(model, "t", 0)
    [c1] = ask(s0)
    assert (c1.content, c1.prompt_ids, c1.completion_ids, c1.prompt_tokens, c1.completion_tokens) == (
        "```bash\nls\n```",
        [1, 2, 3],
        [7, 8, 2],
        10,
        3,
    )
    [c2] = ask(s0)
    assert c2.tool_calls[0].name == "bash" and c2.tool_calls[0].arguments == {"command": "pwd"}
    assert c2.tool_calls[0].id == "call_1"
    assert ask(model_for_attempt(model, "t", 1))[0].content == "sample one"


def test_single_recorded_attempt_on_one_line(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(_attempt("t", 0, [Step(index=0, raw_output="only")]).model_dump_json())
    assert ask(model_for_attempt(get_model(f"replay:{path}"), "t"))[0].content == "only"


def test_bad_replay_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        get_model(f"replay:{tmp_path / 'missing.json'}")
    with pytest.raises(UserError, match="list of replies"):
        get_model("replay:" + script_file(tmp_path, {"t": "not a list"}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{"b": 2}\n')
    with pytest.raises(UserError, match="bad.jsonl:1"):
        get_model(f"replay:{bad}")


def test_model_for_attempt_leaves_other_models_alone():
    class Plain:
        name = "x"

    plain = Plain()
    assert model_for_attempt(plain, "t", 3) is plain
