"""Export: each fine-tuning format passes its schema check; only-solved, dedupe, tools, infra errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results import export
from results.errors import UserError
from results.manifest import Manifest
from results.run_writer import RunStore
from results.synthetic import make_attempt, make_run

TASKS = [("fix-add", "coding", 1), ("fix-sort", "coding", 2), ("sum", "math", 1)]


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def mixed_run(tmp_path) -> Path:
    """Native-tool and text-protocol attempts; solved, failed and infra errors."""
    run = make_run(
        tmp_path / "run", "m", TASKS, samples=3, outcome=lambda t, s: ["solved", "failed", "error"][s]
    )
    with RunStore.open(run) as store:
        store.append(make_attempt(store.run_id, "sum", 3, native_tools=False, n_steps=4))
    return run


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_every_exported_record_passes_its_format_check(mixed_run, tmp_path, fmt):
    result = export.export_run(mixed_run, fmt, tmp_path / f"{fmt}.jsonl")
    records = read(result.path)
    conversations = read(export.export_run(mixed_run, "openai", tmp_path / "o.jsonl").path)
    if fmt in ("prompt-completion", "kto"):  # one record per assistant turn that is a training target
        assert (
            result.written
            == len(records)
            == sum(
                m["role"] == "assistant" and m.get("weight", 1) == 1
                for c in conversations
                for m in c["messages"]
            )
        )
    else:
        assert result.written == len(records) == 7  # 3 tasks x (solved, failed) + the text-protocol one
    assert result.skipped == {"infra error": 3}
    for record in records:
        assert export.VALIDATORS[fmt](record) == []
    for other in export.FORMATS:  # and the checks tell the formats apart
        if other != fmt:
            assert export.VALIDATORS[other](records[0]) != []


def test_openai_records_keep_native_tool_calls_and_end_on_the_assistant(mixed_run, tmp_path):
    records = read(export.export_run(mixed_run, "openai", tmp_path / "o.jsonl").path)
    native, text = records[0], records[-1]
    assert native["messages"][0]["role"] == "system" and native["messages"][-1]["role"] == "assistant"
    calls = [c for m in native["messages"] for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in native["messages"] if m["role"] == "tool"]
    assert calls and {c["id"] for c in calls} >= set(answered) and len(answered) == len(calls) - 1
    assert calls[-1]["function"]["name"] == "submit"  # the submit call is kept; its observation is not
    assert {t["function"]["name"] for t in native["tools"]} == {c["function"]["name"] for c in calls}
    assert json.loads(calls[0]["function"]["arguments"]) == {"command": "ls -la"}
    assert "tools" not in text and all("tool_calls" not in m for m in text["messages"])
    assert text["messages"][-1]["content"].endswith("```bash\nsubmit\n```")


def test_tools_recorded_in_the_manifest_are_used(tmp_path):
    offered = [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": f"{n} tool",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for n in ("bash", "write", "submit", "read")
    ]
    manifest = Manifest(model="m", config={"model": "m", "tools": offered})
    with RunStore.create(tmp_path / "run", manifest) as store:
        store.append(make_attempt(store.run_id, "t", 0, n_steps=4))
    (record,) = read(export.export_run(tmp_path / "run", "openai").path)
    assert record["tools"] == offered
    assert (tmp_path / "run" / "export-openai.jsonl").exists()  # default output path


def test_hf_chat_keeps_tool_calls_structured_and_sharegpt_writes_them_into_the_text(mixed_run, tmp_path):
    (chat, *_) = read(export.export_run(mixed_run, "hf-chat", tmp_path / "h.jsonl").path)
    first_reply = chat["messages"][2]
    assert first_reply["role"] == "assistant" and first_reply["content"] == "Step 1: I will bash next."
    assert first_reply["tool_calls"] == [
        {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls -la"}}}
    ]
    assert chat["messages"][3]["role"] == "tool"
    assert {t["function"]["name"] for t in chat["tools"]} == {"bash", "write", "submit"}
    assert (chat["task_id"], chat["reward"], chat["split"]) == ("fix-add", 1.0, "")
    (share, *_) = read(export.export_run(mixed_run, "sharegpt", tmp_path / "s.jsonl").path)
    assert [t["from"] for t in share["conversations"][:4]] == ["system", "human", "gpt", "tool"]
    call = json.loads(share["conversations"][2]["value"].split("<tool_call>\n")[1].split("\n</tool_call>")[0])
    assert call == {"name": "bash", "arguments": {"command": "ls -la"}}


def test_only_solved_and_dedupe(tmp_path):
    run = make_run(
        tmp_path / "run", "m", TASKS, samples=2, outcome=lambda t, s: "solved" if t != "sum" else "failed"
    )
    with RunStore.open(run) as store:  # two attempts of one task with the same actions: one is a duplicate
        for sample in (5, 6):
            dup = make_attempt(store.run_id, "fix-add", sample, n_steps=1)
            store.append(dup)
        store.append(make_attempt(store.run_id, "fix-sort", 7, n_steps=1))  # same actions, other task: kept
    solved = export.export_run(run, "openai", tmp_path / "a.jsonl", only_solved=True)
    assert solved.written == 7 and solved.skipped == {"not solved": 2}
    deduped = export.export_run(run, "sharegpt", tmp_path / "b.jsonl", only_solved=True, dedupe=True)
    assert deduped.skipped == {"not solved": 2, "duplicate actions": 1}
    assert deduped.written == 6


def test_validators_reject_malformed_records():
    good = {
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    }
    assert export.validate_openai(good) == []
    bad_id = json.loads(json.dumps(good))
    bad_id["messages"][2]["tool_call_id"] = "c9"
    assert any("unknown tool_call_id" in p for p in export.validate_openai(bad_id))
    no_tools = {k: v for k, v in good.items() if k != "tools"}
    assert "tool calls present but no 'tools'" in export.validate_openai(no_tools)
    bad_args = json.loads(json.dumps(good))
    bad_args["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{not json"
    assert any("not JSON" in p for p in export.validate_openai(bad_args))
    assert export.validate_openai({"messages": [{"role": "user", "content": "hi"}]}) == [
        "no assistant message to train on"
    ]
    cols = {"tools": None, "task_id": "t", "reward": 0.0, "split": ""}
    assert (
        export.validate_hf_chat(
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], **cols}
        )
        == []
    )
    assert export.validate_hf_chat(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "tool_calls": []},
            ],
            **cols,
        }
    )
    assert export.validate_hf_chat(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            ],
            **cols,
        }
    )
    assert export.validate_hf_chat({"messages": [{"role": "robot", "content": "a"}], **cols})
    assert export.validate_hf_chat(
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    )  # columns missing
    pc = {
        "prompt": [{"role": "user", "content": "q"}],
        "completion": [{"role": "assistant", "content": "a"}],
        **cols,
    }
    assert export.validate_prompt_completion(pc) == [] and export.validate_kto(dict(pc, label=False)) == []
    assert export.validate_kto(pc) and export.validate_kto(dict(pc, label="no"))
    assert export.validate_prompt_completion(dict(pc, completion=[{"role": "user", "content": "a"}]))
    assert (
        export.validate_sharegpt(
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
        )
        == []
    )
    assert export.validate_sharegpt({"conversations": [{"from": "user", "value": "q"}]})
    assert export.validate_sharegpt(
        {"conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "a"}]}
    )


def test_unknown_format_and_bad_folder_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="unknown export format 'csv'"):
        export.export_run(tmp_path, "csv")
    with pytest.raises(UserError, match="no manifest.json"):
        export.export_run(tmp_path, "openai")


# ---- judged by real consumers of each format, not by export.VALIDATORS --------------------------------


def test_openai_records_validate_against_the_openai_sdks_own_types(mixed_run, tmp_path):
    """The OpenAI SDK's request types (TypedDicts), validated strictly by pydantic: what the chat and
    fine-tuning APIs accept as `messages` and `tools`."""
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
    from pydantic import ConfigDict, TypeAdapter

    strict = ConfigDict(extra="forbid")
    messages = TypeAdapter(list[ChatCompletionMessageParam], config=strict)
    tools = TypeAdapter(list[ChatCompletionToolParam], config=strict)
    records = read(export.export_run(mixed_run, "openai", tmp_path / "o.jsonl").path)
    assert len(records) == 7
    for record in records:
        assert set(record) <= {"messages", "tools"}
        messages.validate_python(record["messages"])
        if "tools" in record:
            tools.validate_python(record["tools"])
        assert record["messages"][-1]["role"] == "assistant"  # fine-tuning trains on a final assistant turn
    bad = json.loads(json.dumps(records[0]))
    bad["messages"][1]["role"] = "robot"
    with pytest.raises(ValueError):
        messages.validate_python(bad["messages"])


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """SmolLM2's own tokenizer (from the embedded GGUF; no model weights are loaded into a model)."""
    from transformers import AutoTokenizer

    from agent.models.local_loading import _offline, embedded_gguf

    _offline()
    path = embedded_gguf("smollm2-135m")
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)


@pytest.mark.slow
def test_hf_chat_records_render_with_a_real_chat_template(mixed_run, tmp_path, smollm2_tokenizer):
    records = read(export.export_run(mixed_run, "hf-chat", tmp_path / "h.jsonl").path)
    assert len(records) == 7
    for record in records:
        text = smollm2_tokenizer.apply_chat_template(record["messages"], tokenize=False)
        # Every message is rendered, in order, under its own role header.
        position = 0
        for message in record["messages"]:
            assert message["role"] in ("system", "user", "assistant", "tool") and isinstance(
                message["content"], str
            )
            block = f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>"
            found = text.find(block, position)
            assert found >= 0, (message["role"], message["content"][:80])
            position = found + len(block)
        assert text.count("<|im_start|>") == len(record["messages"])


SHAREGPT_SCHEMA = {  # the ShareGPT layout as trainers read it (e.g. axolotl / LLaMA-Factory), written here
    "type": "object",
    "required": ["conversations"],
    "properties": {
        "conversations": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "required": ["from", "value"],
                "additionalProperties": False,
                "properties": {
                    "from": {"enum": ["system", "human", "gpt", "tool"]},
                    "value": {"type": "string"},
                },
            },
        }
    },
}


def test_sharegpt_records_match_a_schema_written_here(mixed_run, tmp_path):
    import jsonschema

    records = read(export.export_run(mixed_run, "sharegpt", tmp_path / "s.jsonl").path)
    assert len(records) == 7
    for record in records:
        jsonschema.validate(record, SHAREGPT_SCHEMA)
        turns = [t["from"] for t in record["conversations"]]
        assert turns[0] in ("system", "human") and turns[-1] == "gpt"
        assert "human" in turns
