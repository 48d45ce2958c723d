"""TRL fine-tunes the embedded model's folder as it is, on our exports: one real SFTTrainer step, full and
LoRA (PEFT), on the CPU and offline, with assistant_only_loss; the loss mask covers every assistant turn,
tool calls included, and nothing else. Also: the folder's chat template renders tool calls and tool
schemas (never an empty assistant turn) and plain conversations exactly as SmolLM2's own template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results import export
from results.run_writer import RunStore
from results.synthetic import make_attempt, make_run

pytestmark = [pytest.mark.model]
DEMO = json.loads(export.DEMONSTRATION.read_text())
CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'


@pytest.fixture(scope="module")
def folder() -> Path:
    """The embedded model's cache folder, as the harness leaves it (made or repaired by load_hf)."""
    from agent.models import local_loading

    local_loading.load_hf("smollm2-135m")
    return local_loading.cache_dir_for("smollm2-135m")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Our hf-chat export (a local `datasets` folder) of a small run: a native-tool attempt whose tool-call
    turns have empty content, and a text-protocol attempt that carries the worked example."""
    from datasets import load_from_disk

    tmp = tmp_path_factory.mktemp("trl")
    run = make_run(tmp / "run", "local:smollm2-135m", [], samples=1)
    with RunStore.open(run) as store:
        native = make_attempt(store.run_id, "fix-add", 0, n_steps=3)
        for m in native.messages:
            if m.get("tool_calls"):
                m["content"] = ""  # a turn that is only a call: what rendered as an empty turn before
        store.append(native)
        text = make_attempt(store.run_id, "sum", 1, native_tools=False, n_steps=2)
        text.messages = text.messages[:1] + DEMO + text.messages[1:]
        store.append(text)
    export.export_run(run, "hf-chat", tmp / "h.jsonl", hf_dataset=tmp / "ds")
    return load_from_disk(str(tmp / "ds")), tmp


def _config(out: Path, **extra):
    import trl

    return trl.SFTConfig(
        output_dir=str(out),
        report_to=[],
        max_steps=1,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        assistant_only_loss=True,
        max_length=2048,
        dataset_num_proc=None,
        save_strategy="no",
        use_cpu=True,
        gradient_checkpointing=False,  # one short step: recomputing activations only costs time
        **extra,
    )


def _masked_spans(row) -> list[list[int]]:
    spans, current = [], []
    for token, label in zip(row["input_ids"], row["labels"]):
        if label != -100:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


def _check_mask(trainer, data) -> None:
    tokenizer = trainer.processing_class
    assert len(trainer.train_dataset) == len(data)  # no record dropped as fully masked
    for row in trainer.train_dataset:
        spans = [tokenizer.decode(s) for s in _masked_spans(row)]
        assistants = [m for m in row["messages"] if m["role"] == "assistant"]
        assert len(spans) == len(assistants)  # one trained span per assistant turn, none empty
        for span, message in zip(spans, assistants):
            assert span.endswith("<|im_end|>")  # the model learns to stop
            body = span.removesuffix("<|im_end|>")
            assert body.strip()  # never an empty turn
            assert message["content"] in body
            for call in message.get("tool_calls") or []:
                fn = call["function"]
                assert json.dumps({"name": fn["name"], "arguments": fn["arguments"]}) in body
        trained = "".join(spans)
        for m in row["messages"]:
            if m["role"] in ("user", "tool", "system") and m["content"]:
                assert m["content"] not in trained
        assert not any(d["content"] in trained for d in DEMO if "submit" not in d["content"])
    native = next(r for r in trainer.train_dataset if r["task_id"] == "fix-add")
    assert CALL in "".join(tokenizer.decode(s) for s in _masked_spans(native))
    system = tokenizer.decode(native["input_ids"]).split("<|im_end|>")[0]
    assert all(json.dumps(t) in system for t in native["tools"])  # the tools offered are in the prompt


@pytest.mark.slow
def test_trl_full_fine_tune_of_the_embedded_model_folder(folder, dataset):
    import torch
    import trl

    data, tmp = dataset
    trainer = trl.SFTTrainer(model=str(folder), args=_config(tmp / "full"), train_dataset=data)
    _check_mask(trainer, data)
    before = trainer.model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    result = trainer.train()
    assert result.global_step == 1 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, trainer.model.model.layers[0].self_attn.q_proj.weight)


@pytest.mark.slow
def test_trl_lora_fine_tune_of_the_embedded_model_folder(folder, dataset):
    import torch
    import trl
    from peft import LoraConfig

    data, tmp = dataset
    trainer = trl.SFTTrainer(
        model=str(folder),
        args=_config(tmp / "lora"),
        train_dataset=data,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    _check_mask(trainer, data)
    trainable = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    result = trainer.train()
    assert result.global_step == 1 and torch.isfinite(torch.tensor(result.training_loss))
    params = dict(trainer.model.named_parameters())
    assert any(not torch.equal(v, params[n]) for n, v in trainable.items() if "lora_B" in n)
    trainer.model.save_pretrained(str(tmp / "adapter"))
    from agent.models.local_loading import check_adapter

    assert check_adapter(str(tmp / "adapter"))  # the folder `--adapter` takes


def test_the_folder_is_a_plain_float_model_with_a_training_template(folder):
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    from transformers import AutoTokenizer
    from trl.chat_template_utils import has_generation_markers, is_chat_template_stop_token_trained

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert has_generation_markers(tokenizer.chat_template)
    assert is_chat_template_stop_token_trained(tokenizer)


def test_tool_calls_and_schemas_are_in_the_rendered_text(folder, dataset):
    """hf-chat and prompt-completion records render their calls and the tools offered, as TRL renders
    them (trl.data_utils.apply_chat_template)."""
    from transformers import AutoTokenizer
    from trl.data_utils import apply_chat_template

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    data, tmp = dataset
    native = next(r for r in data if r["task_id"] == "fix-add")
    text = apply_chat_template({"messages": native["messages"]}, tokenizer, tools=native["tools"])["text"]
    system = text.split("<|im_end|>")[0]
    assert all(json.dumps(t) in system for t in native["tools"])  # the schemas, in the system turn
    assert CALL in text
    assert "<|im_start|>assistant\n<|im_end|>" not in text
    assert "<tool_response>\n$ ls -la" in text
    run = tmp / "run"
    records = [
        json.loads(line)
        for line in export.export_run(run, "prompt-completion", tmp / "pc.jsonl")
        .path.read_text()
        .splitlines()
    ]
    calls = [r for r in records if r["completion"][0].get("tool_calls")]
    assert calls
    for r in calls:
        rendered = apply_chat_template(
            {"prompt": r["prompt"], "completion": r["completion"]}, tokenizer, tools=r["tools"]
        )
        assert '"name": "write"' in rendered["prompt"]
        fn = r["completion"][0]["tool_calls"][0]["function"]
        assert json.dumps({"name": fn["name"], "arguments": fn["arguments"]}) in rendered["completion"]
        assert rendered["completion"].endswith("<|im_end|>\n")


def test_plain_conversations_render_as_smollm2s_own_template(folder):
    """The agent loop's prompts (and so their recorded token ids) are unchanged by the shipped template."""
    from transformers import AutoTokenizer

    from agent.models.local_loading import _offline, embedded_gguf

    _offline()
    gguf = embedded_gguf("smollm2-135m")
    own = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    ours = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert own.chat_template != ours.chat_template
    conversations = [
        [{"role": "user", "content": "hi"}],
        DEMO,
        [{"role": "system", "content": "s"}, *DEMO, {"role": "user", "content": "Observation:\n$ ls\n"}],
        [
            {"role": "system", "content": ""},
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
        ],
    ]
    for messages in conversations:
        for prompt in (False, True):
            assert ours.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=prompt
            ) == own.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)


def test_a_cache_written_before_is_repaired_in_place(tmp_path):
    """A cache folder from an older harness (GGUF quantization_config, no architectures, the GGUF's own
    template) is fixed on its next load without dequantizing again; a fresh cache is written fixed."""
    from tokenizers import Tokenizer, models
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from agent.models import local_loading

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x" * 10)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    )
    tok.chat_template = "{{ messages[0]['content'] }}"
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
        )
    )
    model.config.architectures = None  # as a GGUF-loaded config has it
    folder = tmp_path / "models" / "smollm2-135m"
    local_loading._write_cache(model, tok, gguf, folder)
    shipped = local_loading.TEMPLATES["smollm2-135m"].read_text()
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert (folder / "chat_template.jinja").read_text() == shipped

    # make it an old cache, as the harness wrote it before
    config.pop("architectures")
    config["quantization_config"] = {"quant_method": "gguf", "gguf_file": "m.gguf", "dequantize": False}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    source = json.loads((folder / "source.json").read_text())
    source.pop("format")
    (folder / "source.json").write_text(json.dumps(source))
    assert local_loading._cache_ok(folder, gguf)  # still a valid cache: no second dequantization

    local_loading._repair_cache(folder)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert (folder / "chat_template.jinja").read_text() == shipped
    assert json.loads((folder / "source.json").read_text())["format"] == local_loading.CACHE_FORMAT
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    assert getattr(loaded, "hf_quantizer", None) is None and not getattr(loaded, "is_quantized", False)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp files left
