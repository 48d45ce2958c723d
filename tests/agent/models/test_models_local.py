"""The in-process backend: SmolLM2 loads offline from the GGUF, caches, generates; LoRA adapters load."""

from __future__ import annotations

import asyncio
import os

import pytest

from agent.models import get_model, local, local_loading
from results.errors import UserError

MESSAGES = [{"role": "user", "content": "Say hello."}]


# --- no real model needed ---


def test_unknown_local_model_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not a known model"):
        local_loading.resolve("local:no-such-model")
    with pytest.raises(UserError, match="config.json"):
        local_loading.resolve(str(tmp_path))  # a folder without config.json


def test_embedded_gguf_is_found_without_the_hub():
    kind, path, name = local_loading.resolve("local:smollm2-135m")
    assert kind == "gguf" and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert name == "smollm2-135m"


def test_cache_dir_follows_harness_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    assert local_loading.cache_dir_for("smollm2-135m") == tmp_path / "models" / "smollm2-135m"


def test_invalid_adapter_path_is_a_user_error_naming_it(tmp_path):
    missing = tmp_path / "no-adapter-here"
    with pytest.raises(UserError, match=str(missing)):
        local_loading.load_adapter(object(), str(missing))
    with pytest.raises(UserError, match=str(missing)):  # checked before the base model is loaded
        get_model("local:smollm2-135m", adapter=str(missing))


@pytest.mark.slow
def test_corrupt_adapter_is_a_user_error(tmp_path):
    import torch

    (tmp_path / "adapter_config.json").write_text(
        '{"peft_type": "LORA", "target_modules": ["nothing"], "r": 2}'
    )
    with pytest.raises(UserError, match=str(tmp_path)):
        local_loading.load_adapter(torch.nn.Linear(2, 2), str(tmp_path))


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


@pytest.mark.slow
def test_a_crash_while_caching_leaves_no_cache_and_no_debris(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x" * 10)
    target = tmp_path / "cache" / "m"

    class CrashingTokenizer:
        def save_pretrained(self, folder):
            raise OSError("disk full")

    with pytest.raises(OSError):
        local_loading._write_cache(_tiny_llama(), CrashingTokenizer(), gguf, target)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_cache_round_trip_on_a_tiny_model(tmp_path):
    import torch
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x" * 10)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    )
    model = _tiny_llama().eval()
    target = tmp_path / "cache" / "m"
    local_loading._write_cache(model, tok, gguf, target)
    assert local_loading._cache_ok(target, gguf)
    again, _ = local_loading._load_folder(target)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again.eval()(ids).logits)


# --- the real SmolLM2 ---


@pytest.fixture(scope="module")
def smol():
    return local.LocalModel("smollm2-135m", seed=0)


def _decode(model, ids):
    return model.tokenizer.decode(ids, skip_special_tokens=False)


@pytest.mark.model
@pytest.mark.slow  # a fresh GGUF dequantization: ~30 s here
def test_cached_weights_give_the_same_logits_as_the_gguf(monkeypatch, tmp_path):
    import torch

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    first, tokenizer = local_loading.load_hf("smollm2-135m")  # dequantized from the GGUF, then cached
    cache = local_loading.cache_dir_for("smollm2-135m")
    assert (cache / "model.safetensors").is_file() and (cache / "config.json").is_file()
    assert not [p for p in cache.parent.iterdir() if p.name.startswith(".")]  # no temp folder left

    def no_gguf(path):
        raise AssertionError("the second load must come from the cache")

    monkeypatch.setattr(local_loading, "_load_gguf", no_gguf)
    second, tokenizer2 = local_loading.load_hf("smollm2-135m")
    ids = tokenizer("The quick brown fox", return_tensors="pt")["input_ids"]
    assert tokenizer2("The quick brown fox")["input_ids"] == ids[0].tolist()
    with torch.no_grad():
        assert torch.equal(first(ids).logits, second(ids).logits)
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


@pytest.mark.model
def test_smollm2_generates_offline_with_exact_ids(smol):
    assert "<|im_start|>" in smol.tokenizer.chat_template  # the GGUF ships SmolLM2's ChatML template
    assert smol.context_window == 8192 and smol.supports_tools is False
    [c] = asyncio.run(smol.complete(MESSAGES, max_tokens=12))
    assert c.content.strip()
    assert c.prompt_ids == smol.encode(MESSAGES)
    assert _decode(smol, c.prompt_ids).endswith("<|im_start|>assistant\n")
    end = "<|im_end|>" if c.finish_reason == "stop" else ""
    assert _decode(smol, c.completion_ids) == c.content + end
    assert c.prompt_tokens == len(c.prompt_ids) and c.completion_tokens == len(c.completion_ids)
    assert c.cost == 0.0
    # greedy is deterministic
    [again] = asyncio.run(smol.complete(MESSAGES, max_tokens=12))
    assert again.completion_ids == c.completion_ids


@pytest.mark.model
def test_batched_sampling_returns_n_completions(smol):
    out = asyncio.run(smol.complete(MESSAGES, n=3, temperature=1.0, max_tokens=10, seed=123))
    assert len(out) == 3
    end_id = smol.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for c in out:
        assert c.prompt_ids == smol.encode(MESSAGES)
        assert 1 <= len(c.completion_ids) <= 10
        if c.finish_reason == "stop":
            assert c.completion_ids[-1] == end_id and end_id not in c.completion_ids[:-1]  # no padding kept
            assert _decode(smol, c.completion_ids) == c.content + "<|im_end|>"
        else:
            assert len(c.completion_ids) == 10 and end_id not in c.completion_ids
            assert _decode(smol, c.completion_ids) == c.content
    # the seed makes sampling reproducible
    again = asyncio.run(smol.complete(MESSAGES, n=3, temperature=1.0, max_tokens=10, seed=123))
    assert [c.completion_ids for c in again] == [c.completion_ids for c in out]


@pytest.mark.model
def test_lora_adapter_loads_and_changes_the_logits(smol, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    base, _ = local_loading.load_hf("smollm2-135m")
    lora = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )  # random B: the adapter changes outputs
    lora.save_pretrained(str(tmp_path / "adapter"))

    adapted = get_model("local:smollm2-135m", adapter=str(tmp_path / "adapter"))
    ids = torch.tensor([smol.encode(MESSAGES)])
    with torch.no_grad():
        base_logits = smol.model(ids).logits
        adapted_logits = adapted.model(ids).logits
    assert adapted_logits.shape == base_logits.shape
    assert not torch.allclose(adapted_logits, base_logits, atol=1e-3)
    [c] = asyncio.run(adapted.complete(MESSAGES, max_tokens=4))
    assert c.completion_ids and len(c.completion_ids) <= 4
