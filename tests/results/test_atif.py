"""ATIF (Harbor's Agent Trajectory Interchange Format): export validates against a JSON schema rebuilt from
Harbor's reference models (v1.7), export then replay gives the same verdicts, and a trajectory written from
the RFC's published example loads as a replay script."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from agent.models.replay import load_scripts
from agent.models.replay_atif import ANY_SAMPLE
from evaluators.run.config import EvalConfig
from evaluators.run.runner import run_eval
from results.export.atif import export_atif, to_atif
from results.store import open_run
from results.synthetic import make_attempt
from tests.conftest import run
from tests.helpers import SUBMIT, WRITE_CORRECT, WRITE_WRONG, harness, make_task


def _obj(properties: dict, required: tuple = ()) -> dict:
    # Harbor's models forbid unknown keys (model_config extra="forbid")
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_EXTRA = {"type": ["object", "null"]}
_INT = {"type": ["integer", "null"]}
_NUM = {"type": ["number", "null"]}
_STR = {"type": ["string", "null"]}
_INTS = {"type": ["array", "null"], "items": {"type": "integer"}}
_PART = _obj({"type": {"enum": ["text", "image", "audio"]}, "text": _STR, "source": _EXTRA}, ("type",))
_CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "items": _PART}, {"type": "null"}]}
_REF = _obj({"session_id": _STR, "trajectory_id": _STR, "trajectory_path": _STR, "extra": _EXTRA})
STEP = _obj(
    {
        "step_id": {"type": "integer", "minimum": 1},
        "timestamp": _STR,
        "source": {"enum": ["system", "user", "agent"]},
        "model_name": _STR,
        "reasoning_effort": {"type": ["string", "number", "null"]},
        "message": {"anyOf": [{"type": "string"}, {"type": "array", "items": _PART}]},
        "reasoning_content": _STR,
        "tool_calls": {
            "type": ["array", "null"],
            "items": _obj(
                {
                    "tool_call_id": {"type": "string"},
                    "function_name": {"type": "string"},
                    "arguments": {"type": "object"},
                    "extra": _EXTRA,
                },
                ("tool_call_id", "function_name", "arguments"),
            ),
        },
        "observation": {
            "anyOf": [
                {"type": "null"},
                _obj(
                    {
                        "results": {
                            "type": "array",
                            "items": _obj(
                                {
                                    "source_call_id": _STR,
                                    "content": _CONTENT,
                                    "subagent_trajectory_ref": {"type": ["array", "null"], "items": _REF},
                                    "extra": _EXTRA,
                                }
                            ),
                        }
                    },
                    ("results",),
                ),
            ]
        },
        "metrics": {
            "anyOf": [
                {"type": "null"},
                _obj(
                    {
                        "prompt_tokens": _INT,
                        "completion_tokens": _INT,
                        "cached_tokens": _INT,
                        "cost_usd": _NUM,
                        "prompt_token_ids": _INTS,
                        "completion_token_ids": _INTS,
                        "logprobs": {"type": ["array", "null"]},
                        "extra": _EXTRA,
                    }
                ),
            ]
        },
        "is_copied_context": {"type": ["boolean", "null"]},
        "llm_call_count": {"type": ["integer", "null"], "minimum": 0},
        "extra": _EXTRA,
    },
    ("step_id", "source", "message"),
)
TRAJECTORY = _obj(
    {
        "schema_version": {"enum": [f"ATIF-v1.{i}" for i in range(8)]},
        "session_id": _STR,
        "trajectory_id": _STR,
        "agent": _obj(
            {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "model_name": _STR,
                "tool_definitions": {"type": ["array", "null"]},
                "extra": _EXTRA,
            },
            ("name", "version"),
        ),
        "steps": {"type": "array", "minItems": 1, "items": STEP},
        "notes": _STR,
        "final_metrics": {
            "anyOf": [
                {"type": "null"},
                _obj(
                    {
                        "total_prompt_tokens": _INT,
                        "total_completion_tokens": _INT,
                        "total_cached_tokens": _INT,
                        "total_cost_usd": _NUM,
                        "total_steps": _INT,
                        "extra": _EXTRA,
                    }
                ),
            ]
        },
        "continued_trajectory_ref": _STR,
        "extra": _EXTRA,
        "subagent_trajectories": {"type": ["array", "null"]},
    },
    ("schema_version", "agent", "steps"),
)
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


def check_atif(t: dict) -> None:
    """The JSON schema plus the reference models' validators: sequential step ids, agent-only fields,
    observation results naming a tool call of their step, no metrics on a step that called no model."""
    jsonschema.validate(t, TRAJECTORY)
    for i, step in enumerate(t["steps"]):
        assert step["step_id"] == i + 1
        if step["source"] != "agent":
            assert not [f for f in AGENT_ONLY if step.get(f) is not None], step
        if step.get("llm_call_count") == 0 and step["source"] == "agent":
            assert step.get("metrics") is None and step.get("reasoning_content") is None
        ids = {c["tool_call_id"] for c in step.get("tool_calls") or []}
        for r in (step.get("observation") or {}).get("results", []):
            assert r.get("source_call_id") is None or r["source_call_id"] in ids


# The RFC's published example (rfcs/0001-trajectory-format.md, section IV), as another tool writes it.
RFC_EXAMPLE = {
    "schema_version": "ATIF-v1.4",
    "session_id": "025B810F-B3A2-4C67-93C0-FE7A142A947A",
    "agent": {"name": "harbor-agent", "version": "1.0.0", "model_name": "gemini-2.5-flash", "extra": {}},
    "notes": "Initial test trajectory for financial data retrieval.",
    "extra": {},
    "final_metrics": {
        "total_prompt_tokens": 1120,
        "total_completion_tokens": 124,
        "total_cached_tokens": 200,
        "total_cost_usd": 0.00078,
        "total_steps": 3,
        "extra": {},
    },
    "steps": [
        {
            "step_id": 1,
            "timestamp": "2025-10-11T10:30:00Z",
            "source": "user",
            "message": "What is the current trading price of Alphabet (GOOGL)?",
            "extra": {},
        },
        {
            "step_id": 2,
            "timestamp": "2025-10-11T10:30:02Z",
            "source": "agent",
            "model_name": "gemini-2.5-flash",
            "reasoning_effort": "medium",
            "message": "I will search for the current trading price and volume for GOOGL.",
            "reasoning_content": "The request requires two data points.",
            "tool_calls": [
                {
                    "tool_call_id": "call_price_1",
                    "function_name": "financial_search",
                    "arguments": {"ticker": "GOOGL", "metric": "price"},
                },
                {
                    "tool_call_id": "call_volume_2",
                    "function_name": "financial_search",
                    "arguments": {"ticker": "GOOGL", "metric": "volume"},
                },
            ],
            "observation": {
                "results": [
                    {"source_call_id": "call_price_1", "content": "GOOGL is currently trading at $185.35"},
                    {"source_call_id": "call_volume_2", "content": "GOOGL volume: 1.5M shares traded."},
                ]
            },
            "metrics": {
                "prompt_tokens": 520,
                "completion_tokens": 80,
                "cached_tokens": 200,
                "cost_usd": 0.00045,
            },
        },
        {
            "step_id": 3,
            "timestamp": "2025-10-11T10:30:05Z",
            "source": "agent",
            "model_name": "gemini-2.5-flash",
            "reasoning_effort": "low",
            "message": "Alphabet (GOOGL) is trading at $185.35 with a volume of 1.5M shares traded.",
            "metrics": {
                "prompt_tokens": 600,
                "completion_tokens": 44,
                "completion_token_ids": [1722, 310, 5533],
                "logprobs": [-0.1, -0.05, -0.02],
                "cost_usd": 0.00033,
                "extra": {"reasoning_tokens": 12},
            },
        },
    ],
}


def test_the_schema_check_can_fail():
    check_atif(RFC_EXAMPLE)
    bad = json.loads(json.dumps(RFC_EXAMPLE))
    bad["steps"][0]["metrics"] = {"prompt_tokens": 1}  # agent-only field on a user step
    try:
        check_atif(bad)
    except AssertionError:
        pass
    else:
        raise AssertionError("a user step with metrics passed the check")
    bad = json.loads(json.dumps(RFC_EXAMPLE))
    bad["steps"][1]["tool_calls"][0]["name"] = "x"  # unknown key
    try:
        check_atif(bad)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("an unknown key passed the schema")


def test_an_exported_attempt_is_valid_atif_and_keeps_token_ids():
    a = make_attempt("run", "t1", n_steps=3)
    a.steps[0].prompt_ids, a.steps[0].completion_ids = [1, 2, 3], [4, 5]
    t = to_atif(a)
    check_atif(t)
    agent = [s for s in t["steps"] if s["source"] == "agent" and not s.get("is_copied_context")]
    assert len(agent) == 3 and agent[0]["metrics"]["prompt_token_ids"] == [1, 2, 3]
    assert agent[0]["metrics"]["completion_token_ids"] == [4, 5]
    assert [s["message"] for s in agent] == [s.raw_output for s in a.steps]
    assert t["extra"]["task_id"] == "t1" and t["trajectory_id"] == a.key


def test_the_rfc_example_loads_as_a_replay_script(tmp_path):
    path = tmp_path / "harbor.atif.json"
    path.write_text(json.dumps(RFC_EXAMPLE))
    script = load_scripts(str(path))["*"][ANY_SAMPLE]
    assert [c.content for c in script] == [
        RFC_EXAMPLE["steps"][1]["message"],
        RFC_EXAMPLE["steps"][2]["message"],
    ]
    assert [t.name for t in script[0].tool_calls] == ["financial_search", "financial_search"]
    assert script[1].completion_ids == [1722, 310, 5533] and script[0].prompt_tokens == 520


def test_another_harness_shell_tool_replays_as_bash(tmp_path):
    t = {
        "schema_version": "ATIF-v1.6",
        "session_id": "s",
        "agent": {"name": "terminus-2", "version": "2"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "do it"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {
                        "tool_call_id": "c1",
                        "function_name": "bash_command",
                        "arguments": {"keystrokes": "ls\n"},
                    }
                ],
            },
        ],
    }
    check_atif(t)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t))
    call = load_scripts(str(path))["*"][ANY_SAMPLE][0].tool_calls[0]
    assert (call.name, call.arguments) == ("bash", {"command": "ls\n"})


@pytest.mark.slow
def test_export_then_replay_gives_the_same_verdicts(image, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"add": [WRITE_CORRECT, SUBMIT], "sub": [WRITE_WRONG, SUBMIT]}))
    tasks = [make_task(), dataclasses.replace(make_task(), id="sub")]
    first = tmp_path / "first"
    run(run_eval(EvalConfig(model=f"replay:{script}", samples=2, out=first), tasks, progress=False))
    p = harness("export", str(first), "--format", "atif", "--out", str(tmp_path / "x.atif.json"))
    assert p.returncode == 0, p.stderr
    trajectories = json.loads((tmp_path / "x.atif.json").read_text())
    assert len(trajectories) == 4
    for t in trajectories:
        check_atif(t)
    second = tmp_path / "second"
    run(
        run_eval(
            EvalConfig(model=f"replay:{tmp_path / 'x.atif.json'}", samples=2, out=second),
            tasks,
            progress=False,
        )
    )

    def verdicts(d):
        return {(a.task_id, a.sample): (a.status, a.reason, a.n_steps) for a in open_run(d).iter_attempts()}

    assert verdicts(first) == verdicts(second)
    assert {v[0] for v in verdicts(first).values()} == {"solved", "failed"}
    assert export_atif(first)[1] == 4
