"""lora/sft.py on a tiny randomly initialised Llama (CPU, fast)."""

from __future__ import annotations

import json
import random

import pytest
import torch
from lora_fakes import tiny_llama

from lora.data import IGNORE, Example
from lora.sft import (
    SFTConfig,
    accumulate_gradients,
    collate,
    length_grouped_batches,
    linear_targets,
    loss_sum,
    lr_at,
    prepare_model,
    save_adapter,
    train,
)

VOCAB = 128


def make_examples(n: int, seed: int = 0, lo: int = 12, hi: int = 40) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(lo, hi)
        ids = [rng.randrange(VOCAB) for _ in range(length)]
        start = rng.randint(2, length - 2)  # a "prompt", then a "reply" that is trained
        out.append(Example(ids, [IGNORE] * start + ids[start:], "t", f"run/t/{i}"))
    return out


def cfg(**kw) -> SFTConfig:
    base = dict(
        rank=4,
        alpha=8,
        dropout=0.0,
        lr=1e-3,
        warmup_ratio=0.0,
        grad_accum=1,
        batch_tokens=256,
        log_every=0,
        device="cpu",
    )
    base.update(kw)
    return SFTConfig(**base)


def mean_loss(model, examples) -> float:
    with torch.no_grad():
        b = collate(examples, torch.device("cpu"))
        return float(loss_sum(model, b) / b.n_targets)


def test_linear_targets_are_the_llama_projections_not_the_head():
    assert linear_targets(tiny_llama()) == [
        "down_proj",
        "gate_proj",
        "k_proj",
        "o_proj",
        "q_proj",
        "up_proj",
        "v_proj",
    ]


def test_one_step_lowers_the_loss_on_its_batch():
    examples = make_examples(4)
    c = cfg(max_steps=1, batch_tokens=10_000)  # the whole set in one micro-batch
    model = prepare_model(tiny_llama(VOCAB), c)
    before = mean_loss(model, examples)
    result = train(model, examples, c, log=lambda _: None)
    after = mean_loss(model, examples)
    assert result.steps == 1 and result.losses[0] == pytest.approx(before, rel=1e-5)
    assert after < before


def test_only_lora_weights_train():
    model = prepare_model(tiny_llama(VOCAB), cfg())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert not any("lm_head" in n or "embed" in n for n in trainable)


@pytest.mark.slow
def test_adapter_saves_loads_and_changes_outputs(tmp_path):
    from peft import PeftModel

    examples = make_examples(6)
    c = cfg(lr=1e-2, max_steps=5)
    model = prepare_model(tiny_llama(VOCAB, seed=1), c)
    train(model, examples, c, log=lambda _: None)
    out = save_adapter(model, tmp_path / "adapter")
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8 and "lm_head" not in config["target_modules"]

    x = torch.tensor([examples[0].input_ids])
    with torch.no_grad():
        trained = model(input_ids=x).logits
        base = tiny_llama(VOCAB, seed=1)(input_ids=x).logits
        loaded = PeftModel.from_pretrained(tiny_llama(VOCAB, seed=1), str(out)).eval()(input_ids=x).logits
    assert torch.allclose(loaded, trained, atol=1e-5)
    assert not torch.allclose(loaded, base, atol=1e-3)


def test_gradient_accumulation_weighs_every_target_token_equally():
    model = prepare_model(tiny_llama(VOCAB, seed=2), cfg())
    with torch.no_grad():  # LoRA B starts at zero; give it values so every LoRA weight has a gradient
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    short = make_examples(1, seed=3, lo=10, hi=10)[0]  # few target tokens
    long_ = make_examples(1, seed=4, lo=40, hi=40)[0]  # many more
    assert short.n_targets != long_.n_targets
    cpu = torch.device("cpu")

    def grads(batches):
        model.zero_grad(set_to_none=True)
        loss = accumulate_gradients(model, batches, autocast=False)
        return loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    loss_split, g_split = grads([collate([short], cpu), collate([long_], cpu)])
    loss_joint, g_joint = grads([collate([short, long_], cpu)])
    assert loss_split == pytest.approx(loss_joint, rel=1e-5)
    for n in g_joint:
        assert torch.allclose(g_split[n], g_joint[n], rtol=1e-4, atol=1e-7), n
    # A mean of per-micro-batch means would weigh the short reply's tokens more: not what we compute.
    with torch.no_grad():
        a, b = collate([short], cpu), collate([long_], cpu)
        mean_of_means = float((loss_sum(model, a) / a.n_targets + loss_sum(model, b) / b.n_targets) / 2)
    assert abs(mean_of_means - loss_joint) > 1e-4


def test_length_grouped_batches_cover_everything_once_within_budget_and_are_seeded():
    lengths = [random.Random(i).randint(5, 200) for i in range(100)]
    batches = length_grouped_batches(lengths, 400, random.Random(7))
    assert sorted(i for b in batches for i in b) == list(range(100))
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 400
    # grouped by length: the spread inside a batch is small compared with the whole range
    assert max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) < 60
    assert batches == length_grouped_batches(lengths, 400, random.Random(7))
    assert batches != length_grouped_batches(lengths, 400, random.Random(8))


def test_collate_pads_right_and_masks_pads():
    a, b = Example([5, 6, 7], [IGNORE, 6, 7], "t", "k"), Example([1, 2], [IGNORE, 2], "t", "k2")
    batch = collate([a, b], torch.device("cpu"))
    assert batch.input_ids.tolist() == [[5, 6, 7], [1, 2, 0]]
    assert batch.labels.tolist() == [[IGNORE, 6, 7], [IGNORE, 2, IGNORE]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert (batch.n_targets, batch.n_tokens, batch.n_padded) == (3, 5, 6)
    assert collate([a], torch.device("cpu")).attention_mask is None  # nothing padded


def test_lr_warms_up_then_decays_by_cosine():
    c = SFTConfig(lr=1.0, warmup_ratio=0.1, min_lr_ratio=0.1)
    lrs = [lr_at(s, 100, c) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0) and lrs[10] == pytest.approx(1.0)
    assert all(x >= y for x, y in zip(lrs[10:], lrs[11:]))
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)


def test_too_long_examples_are_dropped_not_truncated():
    examples = make_examples(3, lo=20, hi=20) + make_examples(1, seed=9, lo=60, hi=60)
    c = cfg(max_seq_len=30, max_steps=1)
    result = train(prepare_model(tiny_llama(VOCAB), c), examples, c, log=lambda _: None)
    assert result.examples == 3 and result.dropped_too_long == 1
    assert result.tokens == 60
