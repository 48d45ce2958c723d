"""Exports judged by the tools that consume them: no record trains on the worked example, a local
`datasets` folder loads back, and TRL's own SFT preparation reads our hf-chat records (offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results import export
from results.run_writer import RunStore
from results.synthetic import make_attempt, make_run

DEMO = json.loads(export.DEMONSTRATION.read_text())
DEMO_TEXTS = {m["content"] for m in DEMO}
DEMO_REPLIES = {m["content"] for m in DEMO if m["role"] == "assistant"}
# The example's replies that no agent turn here repeats ("```bash\nsubmit\n```" ends every text attempt)
DEMO_UNIQUE = {r for r in DEMO_REPLIES if "submit" not in r}


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def run(tmp_path) -> Path:
    """Native-tool attempts, and text-protocol attempts that carry the worked example as the loop writes
    it."""
    folder = make_run(
        tmp_path / "run",
        "m",
        [("fix-add", "coding", 1)],
        samples=2,
        outcome=lambda t, s: ["solved", "failed"][s],
    )
    with RunStore.open(folder) as store:
        for sample, solved in ((5, True), (6, False)):
            a = make_attempt(store.run_id, "sum", sample, native_tools=False, n_steps=3, solved=solved)
            a.messages = a.messages[:1] + DEMO + a.messages[1:]  # system, demonstration, task, ...
            a.split, a.reward = "train", 1.0 if solved else 0.0
            store.append(a)
    return folder


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_no_record_trains_on_the_demonstration(run, tmp_path, fmt):
    records = read(export.export_run(run, fmt, tmp_path / "x.jsonl").path)
    assert records
    for r in records:
        if fmt == "openai":  # kept as context, weight 0: never a target
            demo = [m for m in r["messages"] if m["role"] == "assistant" and m["content"] in DEMO_REPLIES]
            assert all(m.get("weight") == 0 for m in demo)
            assert all(
                m.get("weight", 1) == 1 for m in r["messages"] if m["role"] == "assistant" and m not in demo
            )
        elif fmt == "hf-chat":
            assert not DEMO_TEXTS & {m["content"] for m in r["messages"]}
        elif fmt == "sharegpt":
            assert not DEMO_TEXTS & {t["value"] for t in r["conversations"]}
        else:
            assert r["completion"][0]["content"] not in DEMO_REPLIES
    if fmt in ("prompt-completion", "kto"):  # the example is still context where the model saw it
        text = [r for r in records if r["task_id"] == "sum"]
        assert text and all(r["prompt"][1 : 1 + len(DEMO)] == DEMO for r in text)
    if fmt == "kto":
        assert {(r["task_id"], r["label"]) for r in records} == {
            ("fix-add", True),
            ("fix-add", False),
            ("sum", True),
            ("sum", False),
        }
    if fmt == "openai":
        assert any(
            m.get("weight") == 0 for r in records for m in r["messages"]
        )  # the demonstration was there


@pytest.mark.slow
def test_trl_renders_prompt_completion_without_the_demonstration_in_completions(run, tmp_path):
    """TRL renders each record with the embedded model's template: the completion is the one turn, its
    tool calls written out (never an empty turn), and the worked example stays in prompts only."""
    from trl.data_utils import apply_chat_template

    tokenizer = _smol_tokenizer()
    for r in read(export.export_run(run, "prompt-completion", tmp_path / "pc.jsonl").path):
        rendered = apply_chat_template(
            {"prompt": r["prompt"], "completion": r["completion"]}, tokenizer, tools=r["tools"]
        )
        turn = r["completion"][0]
        calls = [
            "<tool_call>\n"
            + json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
            + "\n</tool_call>"
            for c in turn.get("tool_calls") or []
        ]
        expected = "\n".join(([turn["content"]] if turn["content"] else []) + calls)
        assert rendered["completion"] == expected + "<|im_end|>\n"  # the target: one turn, calls included
        assert turn["content"] not in DEMO_REPLIES
        if r["tools"]:
            assert all(json.dumps(t) in rendered["prompt"] for t in r["tools"])  # the schemas offered
        if r["task_id"] == "sum":
            assert all(d in rendered["prompt"] for d in DEMO_REPLIES)


def _smol_tokenizer():
    from transformers import AutoTokenizer

    from agent.models import local_loading

    folder = local_loading.cache_dir_for("smollm2-135m")
    if not (folder / "tokenizer.json").is_file():
        local_loading.load_hf("smollm2-135m")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def test_hf_dataset_folder_loads_back_with_structured_tool_calls(run, tmp_path):
    from datasets import load_from_disk

    result = export.export_run(run, "hf-chat", tmp_path / "h.jsonl", hf_dataset=tmp_path / "ds")
    records = read(result.path)
    ds = load_from_disk(str(tmp_path / "ds"))
    assert len(ds) == len(records) == result.written
    assert set(ds.column_names) == {"messages", "tools", "task_id", "reward", "split"}
    assert [ds[i] for i in range(len(ds))] == records  # exactly the JSONL: no widened keys, no lost types
    calls = [c for m in ds[0]["messages"] for c in m.get("tool_calls", [])]
    assert {tuple(sorted(c["function"]["arguments"])) for c in calls} >= {("command",), ("content", "path")}
    kto = export.export_run(run, "kto", tmp_path / "k.jsonl", hf_dataset=tmp_path / "kto")
    assert sorted(load_from_disk(str(tmp_path / "kto"))["label"]) == sorted(
        r["label"] for r in read(kto.path)
    )


@pytest.mark.slow
def test_trl_sft_trainer_prepares_our_export_offline(run, tmp_path):
    """TRL's SFTTrainer tokenizes the hf-chat folder with a tool-calling template (TRL's own Qwen2.5 training
    template, with generation markers), and its assistant-only loss mask covers our structured tool calls
    and never the demonstration."""
    import trl
    from datasets import load_from_disk
    from transformers import LlamaConfig, LlamaForCausalLM

    export.export_run(run, "hf-chat", tmp_path / "h.jsonl", hf_dataset=tmp_path / "ds")
    tokenizer = _smol_tokenizer()
    tokenizer.chat_template = (
        Path(trl.__file__).parent / "chat_templates" / "qwen2_5_training.jinja"
    ).read_text()
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    config = trl.SFTConfig(
        output_dir=str(tmp_path / "out"),
        report_to=[],
        assistant_only_loss=True,
        max_length=4096,
        dataset_num_proc=None,
        use_cpu=True,
    )
    trainer = trl.SFTTrainer(
        model=model,
        args=config,
        train_dataset=load_from_disk(str(tmp_path / "ds")),
        processing_class=tokenizer,
    )
    data = trainer.train_dataset
    assert len(data) == 4
    trained = []
    for row in data:
        targets = [t for t in row["labels"] if t != -100]  # TRL's labels: -100 outside the assistant mask
        assert targets
        trained.append(tokenizer.decode(targets))
    everything = "\n".join(trained)
    assert (
        '{"name": "bash", "arguments": {"command": "ls -la"}}' in everything
    )  # dict arguments, rendered once
    assert not any(d in everything for d in DEMO_UNIQUE)
    assert "Fix the bug in" not in everything  # user turns are not targets
