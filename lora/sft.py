"""LoRA supervised fine-tuning on token-level examples (lora/data.py): a plain training loop.

    model = prepare_model(base, cfg)             # freeze the base, add LoRA (or load one to continue)
    result = train(model, examples, cfg)         # AdamW + warmup/cosine, grad accumulation
    save_adapter(model, out_dir)                 # PEFT format: adapter_config.json
                                                 #   + adapter_model.safetensors

On a GPU the frozen base runs in bf16 (LoRA weights stay fp32, under bf16 autocast) with activation
checkpointing and fused AdamW; on the CPU everything is fp32. Loss is summed over target tokens and
divided by the number of target tokens of the whole optimizer step, so each target token weighs the
same whatever micro-batch it falls in (a mean of per-batch means would over-weight short replies).
The output layer is applied only where there is a target, which saves most of its compute and the
memory of full-vocabulary logits.
"""

from __future__ import annotations

import gc
import math
import os
import random
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from agent.models.local_loading import pick_device
from lora.config import SFTConfig
from lora.data import IGNORE, Example

__all__ = ["SFTConfig"]  # defined with the other train settings (lora/config.py)


@dataclass
class TrainResult:
    examples: int = 0
    dropped_too_long: int = 0
    steps: int = 0
    target_tokens: int = 0  # per epoch
    tokens: int = 0  # per epoch, without padding
    losses: list[float] = field(default_factory=list)  # mean loss per target token, per step
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)  # real (unpadded) tokens per step
    step_padded_tokens: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict:
        return {
            "examples": self.examples,
            "dropped_too_long": self.dropped_too_long,
            "steps": self.steps,
            "target_tokens": self.target_tokens,
            "tokens": self.tokens,
            "first_loss": self.losses[0] if self.losses else None,
            "final_loss": self.losses[-1] if self.losses else None,
            "seconds": round(self.seconds, 2),
        }


# ---------------------------------------------------------------- model


def linear_targets(model: nn.Module) -> list[str]:
    """Names (last component) of every linear layer except the output layer: q,k,v,o,gate,up,down on Llama."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = {
        name.rsplit(".", 1)[-1]
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and m is not head and not name.endswith("lm_head")
    }
    return sorted(names)


def prepare_model(base: nn.Module, cfg: SFTConfig, continue_from: Optional[Path] = None) -> nn.Module:
    """Freeze `base`, move it to the device and add a LoRA adapter: a fresh one, or the one in
    `continue_from` (trainable) to train on top of it. Returns the PEFT model."""
    from peft import LoraConfig, PeftModel, get_peft_model

    device = pick_device(cfg.device)
    bf16 = cfg.bf16 if cfg.bf16 is not None else (device.type == "cuda" and torch.cuda.is_bf16_supported())
    checkpointing = cfg.checkpointing if cfg.checkpointing is not None else device.type == "cuda"
    base.to(device=device, dtype=torch.bfloat16 if bf16 else torch.float32)
    base.config.use_cache = False
    if hasattr(base, "set_attn_implementation") and base.config._attn_implementation != "sdpa":
        try:
            base.set_attn_implementation("sdpa")
        except (ValueError, ImportError):  # an architecture without SDPA support keeps its own
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' checkpointing renames
        if checkpointing:
            # Non-reentrant checkpointing needs no requires_grad on the (frozen) embedding output.
            if hasattr(base, "activation_checkpointing_enable"):
                base.activation_checkpointing_enable({"use_reentrant": False})
            else:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        torch.manual_seed(cfg.seed)  # LoRA A init
        if continue_from:
            model = PeftModel.from_pretrained(base, str(continue_from), is_trainable=True)
        else:
            lcfg = LoraConfig(
                r=cfg.rank,
                lora_alpha=cfg.alpha,
                lora_dropout=cfg.dropout,
                bias="none",
                target_modules=cfg.target_modules or linear_targets(base),
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(base, lcfg)
    for p in model.parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()  # adapter weights and their optimizer state stay fp32
    model.to(device)
    return model


def save_adapter(model: nn.Module, out_dir: Path) -> Path:
    """PEFT format (adapter_config.json + adapter_model.safetensors), replaced atomically."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def free_memory() -> None:
    """Call after `del model` between phases (sampling and training each load their own copy)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- batches


def length_grouped_batches(lengths: list[int], batch_tokens: int, rng: random.Random) -> list[list[int]]:
    """Indices grouped into micro-batches of similar length (padded size <= batch_tokens, at least one
    sequence each), in shuffled order. Sorting keeps padding small; shuffling the groups keeps the
    step order random."""
    order = list(range(len(lengths)))
    rng.shuffle(order)  # random order among equal lengths
    order.sort(key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        if cur and max(longest, lengths[i]) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, lengths[i])
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


@dataclass
class Batch:
    input_ids: torch.Tensor
    attention_mask: Optional[torch.Tensor]  # None when nothing is padded (lets SDPA use its causal kernels)
    labels: torch.Tensor
    n_targets: int  # positions that get loss (after the shift)
    n_tokens: int  # real tokens
    n_padded: int  # tokens including padding
    # Flat indices into [rows * (T - 1)] of the positions with a target, built on the host: selecting with
    # them needs no device->host sync (a boolean mask would wait for the forward pass to finish).
    target_index: Optional[torch.Tensor] = None


def collate(examples: list[Example], device: torch.device, pad_id: int = 0) -> Batch:
    longest = max(len(ex.input_ids) for ex in examples)
    ids = torch.full((len(examples), longest), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), longest), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), longest), dtype=torch.long)
    for row, ex in enumerate(examples):  # right padding: real positions never see a pad (causal)
        n = len(ex.input_ids)
        ids[row, :n] = torch.tensor(ex.input_ids)
        labels[row, :n] = torch.tensor(ex.labels)
        mask[row, :n] = 1
    n_tokens = int(mask.sum())
    padded = n_tokens != mask.numel()
    target_index = (labels[:, 1:] != IGNORE).flatten().nonzero().squeeze(1)

    def put(t: torch.Tensor) -> torch.Tensor:  # pinned + non_blocking: the copy overlaps queued GPU work
        return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)

    return Batch(
        put(ids),
        put(mask) if padded else None,
        put(labels),
        len(target_index),
        n_tokens,
        mask.numel(),
        put(target_index),
    )


# ---------------------------------------------------------------- loss and step


def loss_sum(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Sum of next-token cross-entropy over the target positions of `batch`."""
    logits, targets = target_logits(model, batch)
    return F.cross_entropy(logits, targets, reduction="sum")


def target_logits(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 logits [targets, vocab] predicting each target token, the target ids [targets]), in the
    order of batch.target_index (row by row, left to right). Also the policy gradient's (lora/grpo.py)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    index = batch.target_index
    if index is None:
        index = (batch.labels[:, 1:] != IGNORE).flatten().nonzero().squeeze(1)
    row, col = index // (batch.labels.shape[1] - 1), index % (batch.labels.shape[1] - 1)
    targets = batch.labels[row, col + 1]

    def at_targets(t: torch.Tensor) -> torch.Tensor:  # [rows, T, ...] -> [targets, ...], no copy of the rest
        return t[row, col]

    cfg = base.config
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        # The head does more than a matmul on these architectures: use the model's own logits.
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
        return at_targets(logits).float(), targets
    hidden = base.get_decoder()(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
    ).last_hidden_state
    logits = base.get_output_embeddings()(at_targets(hidden))  # only where there is a target
    return logits.float(), targets


def accumulate_gradients(model: nn.Module, micro_batches: list[Batch], autocast: bool) -> float:
    """Forward/backward over the micro-batches of one optimizer step. Each micro-batch's summed loss is
    divided by the target count of the whole step, so the accumulated gradient equals that of one batch
    holding all of them. Returns the step's mean loss per target token."""
    n_targets = sum(b.n_targets for b in micro_batches)
    device_type = micro_batches[0].input_ids.device.type
    total = torch.zeros((), device=micro_batches[0].input_ids.device)
    for b in micro_batches:
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=autocast):
            loss = loss_sum(model, b) / max(n_targets, 1)
        loss.backward()
        total += loss.detach()
    return float(total)  # one host sync per step


def lr_at(step: int, total: int, cfg: SFTConfig) -> float:
    """Linear warmup, then cosine decay to lr * min_lr_ratio."""
    warmup = int(round(cfg.warmup_ratio * total))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    ratio = cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.lr * ratio


def train(
    model: nn.Module, examples: list[Example], cfg: SFTConfig, log: Callable[[str], None] = print
) -> TrainResult:
    """Train the LoRA weights of `model` (from prepare_model) on `examples`. Returns losses and timings."""
    device = next(p for p in model.parameters() if p.requires_grad).device
    autocast = device.type == "cuda" and any(p.dtype == torch.bfloat16 for p in model.parameters())
    result = TrainResult()
    usable = [ex for ex in examples if len(ex.input_ids) <= cfg.max_seq_len and ex.n_targets > 0]
    result.dropped_too_long = sum(1 for ex in examples if len(ex.input_ids) > cfg.max_seq_len)
    result.examples = len(usable)
    if not usable:
        log("sft: no usable examples; nothing to train")
        return result
    if result.dropped_too_long:
        log(f"sft: dropped {result.dropped_too_long} examples longer than max_seq_len={cfg.max_seq_len}")
    result.target_tokens = sum(ex.n_targets for ex in usable)
    result.tokens = sum(len(ex.input_ids) for ex in usable)

    schedule = _schedule([len(ex.input_ids) for ex in usable], cfg)
    total_steps = math.ceil(len(schedule) / cfg.grad_accum)

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=device.type == "cuda"
    )
    model.train()
    log(
        f"sft: {len(usable)} examples, {result.tokens} tokens ({result.target_tokens} trained) per epoch, "
        f"{total_steps} steps on {device.type}{' bf16' if autocast else ' fp32'}"
    )
    started = time.perf_counter()
    for step in range(total_steps):
        t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total_steps, cfg)
        chunk = schedule[step * cfg.grad_accum : (step + 1) * cfg.grad_accum]
        micro = [collate([usable[i] for i in idx], device) for idx in chunk]
        loss = accumulate_gradients(model, micro, autocast)
        if cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        result.losses.append(loss)
        result.step_seconds.append(time.perf_counter() - t0)
        result.step_tokens.append(sum(b.n_tokens for b in micro))
        result.step_padded_tokens.append(sum(b.n_padded for b in micro))
        if cfg.log_every and (step % cfg.log_every == 0 or step == total_steps - 1):
            log(
                f"sft: step {step + 1}/{total_steps} loss {loss:.4f} lr {optimizer.param_groups[0]['lr']:.2e}"
            )
    result.steps = total_steps
    result.seconds = time.perf_counter() - started
    model.eval()
    del optimizer
    return result


def _schedule(lengths: list[int], cfg: SFTConfig) -> list[list[int]]:
    """The micro-batches (indices into the examples) of the whole run: epoch after epoch, regrouped with a
    new shuffle each time; max_steps * grad_accum of them when max_steps is set."""
    rng = random.Random(cfg.seed)
    schedule = length_grouped_batches(lengths, cfg.batch_tokens, rng)
    n_micro = cfg.max_steps * cfg.grad_accum if cfg.max_steps else len(schedule) * cfg.epochs
    while len(schedule) < n_micro:
        schedule += length_grouped_batches(lengths, cfg.batch_tokens, rng)
    return schedule[:n_micro]
