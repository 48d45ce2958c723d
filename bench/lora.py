#!/usr/bin/env python3
"""LoRA SFT throughput: our trainer (lora/sft.py) beside the plain transformers+peft loop a user would
write, on synthetic token data, for models built from configs (nothing is downloaded): SmolLM2-shaped
(Llama), Qwen2.5-0.5B- and 1.5B-shaped (Qwen2).

    python bench/lora.py                 # CUDA: 135M/0.5B/1.5B x 1k/4k; CPU: 135M x 256/512, a few steps
    python bench/lora.py --sizes 135m --seqs 1024 --steps 20 --json out.json
    python bench/lora.py --smoke         # the "tiny" model, 2 steps: seconds (tests/bench/)

Each (size, length, trainer) runs in its own process so peak memory is its own (GPU: max allocated;
CPU: max resident set, which includes ~0.5 GB of Python + torch).

Data: sequences with lengths uniform in [L/2, L]; the last quarter of each is the "assistant reply" that
gets loss (agent trajectories are mostly prompt and observations). Both trainers first run `warmup`
steps on other sequences, then are timed over one epoch of the same steps*batch sequences: the
baseline in random batches of `batch` padded to the longest (as DataCollatorWithPadding does); ours
in micro-batches of similar length up to batch*L padded tokens (so fewer, fuller steps).

Throughput counts real tokens (padding excluded). FLOPs, for LoRA with the base frozen:
  per token, every frozen matmul costs 2N forward + 2N backward (gradient w.r.t. its input only, no
  weight gradient) = 4N, N = the matmul weights of the decoder layers; the output layer (d x vocab) is
  only needed where a target is, so it counts 4*d*vocab per target token; LoRA adds 6*r*(d_in+d_out)
  per adapted layer per token (<1% at r=16); attention (QK^T and AV) for a sequence of length n costs
  4*n^2/2*d_attn per layer forward (causal half), x3 for forward + backward = 6*L*d_attn*n^2.
  Activation checkpointing recomputes the forward (+2N) but that is not counted: MFU counts the
  FLOPs the job needs, not the ones the hardware ran (the baseline's full-vocabulary logits and its
  padding are likewise not credited).
MFU = those FLOPs per second / the measured peak of a large bf16 (GPU) or fp32 (CPU) matmul on this
machine; on a GPU the spec-sheet peak is printed beside it when known.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

# Configs with the real models' shapes (tied input/output embeddings, as they have): SmolLM2 is a Llama,
# Qwen2.5 a Qwen2 (biases on q/k/v). "tiny" is for smoke runs (bench/gpu_check.py --cpu).
QWEN2 = {"0.5b", "1.5b", "tiny"}
SIZES = {
    "135m": dict(
        hidden_size=576,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        intermediate_size=1536,
        vocab_size=49152,
    ),  # SmolLM2-135M
    "0.5b": dict(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
    ),  # Qwen2.5-0.5B
    "1.5b": dict(
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
    ),  # Qwen2.5-1.5B
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=512,
    ),
}
SPEC_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "4090": 165.0}
LORA = dict(rank=16, alpha=32, dropout=0.05)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build_model(size: str, seq: int, device: torch.device):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    config = Qwen2Config if size in QWEN2 else LlamaConfig
    cfg = config(**SIZES[size], max_position_embeddings=max(seq, 2048), tie_word_embeddings=True)
    torch.manual_seed(0)
    with device:  # initialise on the device: a 1.5B init on the CPU alone takes a while
        return AutoModelForCausalLM.from_config(cfg)  # fp32, default attention


def synthetic(n: int, seq: int, vocab: int, seed: int = 0):
    from lora.data import IGNORE, Example

    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(seq // 2, seq)
        ids = [rng.randrange(vocab) for _ in range(length)]
        start = length - length // 4
        out.append(Example(ids, [IGNORE] * start + ids[start:], "bench", str(i)))
    return out


def flops(model, examples, rank: int) -> float:
    """Training FLOPs the examples need (see the module docstring)."""
    c = model.config
    head = model.get_output_embeddings()
    body = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    lora_per_tok = sum(
        6 * rank * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS
    )
    d_attn = c.num_attention_heads * (c.hidden_size // c.num_attention_heads)
    total = 0.0
    for ex in examples:
        n = len(ex.input_ids)
        total += (4 * body + lora_per_tok) * n + 4 * c.hidden_size * c.vocab_size * ex.n_targets
        total += 6 * c.num_hidden_layers * d_attn * n * n
    return total


def measure_peak(device: torch.device) -> float:
    """FLOP/s of a large matmul in the dtype our trainer uses there (bf16 on GPU, fp32 on CPU)."""
    n, dtype, reps = (8192, torch.bfloat16, 20) if device.type == "cuda" else (1024, torch.float32, 5)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t)


# ---------------------------------------------------------------- one measurement (in its own process)


def reset_peak() -> None:
    """Peak memory counts from here: the model as the trainer holds it (not the fp32 copy it was built as)."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def run_ours(model, warm, measured, batch: int, seq: int):
    from lora.sft import SFTConfig, prepare_model, train

    cfg = SFTConfig(**LORA, lr=2e-4, epochs=1, batch_tokens=batch * seq, grad_accum=1, log_every=0)
    peft_model = prepare_model(model, cfg)  # GPU: bf16 base + autocast, checkpointing, fused AdamW, SDPA
    reset_peak()
    if warm:
        train(peft_model, warm, cfg, log=lambda _: None)
    r = train(peft_model, measured, cfg, log=lambda _: None)
    return sum(r.step_seconds), sum(r.step_tokens), sum(r.step_padded_tokens), r.losses


def run_baseline(model, warm, measured, batch: int, seq: int, bf16: bool = False):
    """The loop a user writes first: fp32, no checkpointing, default attention, random padded batches.
    With bf16, the same loop on a model loaded in bf16 (LoRA weights and AdamW then in bf16 too), as a
    user who passes dtype=torch.bfloat16 to from_pretrained gets: the harder baseline on a GPU."""
    from peft import LoraConfig, get_peft_model

    device = next(model.parameters()).device
    if bf16:
        model.to(torch.bfloat16)
    reset_peak()
    model = get_peft_model(
        model,
        LoraConfig(
            r=LORA["rank"],
            lora_alpha=LORA["alpha"],
            lora_dropout=LORA["dropout"],
            target_modules=TARGETS,
            task_type="CAUSAL_LM",
        ),
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    model.train()

    def epoch(examples):
        order = examples[:]
        random.Random(0).shuffle(order)
        seconds, tokens, padded, losses = 0.0, 0, 0, []
        for start in range(0, len(order), batch):
            t0 = time.perf_counter()
            chunk = order[start : start + batch]
            longest = max(len(e.input_ids) for e in chunk)
            ids = torch.zeros((len(chunk), longest), dtype=torch.long)
            labels = torch.full((len(chunk), longest), -100, dtype=torch.long)
            mask = torch.zeros((len(chunk), longest), dtype=torch.long)
            for i, e in enumerate(chunk):
                ids[i, : len(e.input_ids)] = torch.tensor(e.input_ids)
                labels[i, : len(e.labels)] = torch.tensor(e.labels)
                mask[i, : len(e.input_ids)] = 1
            loss = model(
                input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)
            ).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())  # the host sync a user's logging does anyway
            seconds += time.perf_counter() - t0
            tokens += int(mask.sum())
            padded += mask.numel()
        return seconds, tokens, padded, losses

    if warm:
        epoch(warm)
    return epoch(measured)


def one(spec: dict) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(spec["size"], spec["seq"], device)
    vocab, batch, seq = model.config.vocab_size, spec["batch"], spec["seq"]
    warm = synthetic(batch * spec["warmup"], seq, vocab, seed=1)
    measured = synthetic(batch * spec["steps"], seq, vocab, seed=2)  # the same sequences for both trainers
    need = flops(model, measured, LORA["rank"])  # before LoRA wraps the layers
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    if spec["trainer"] == "ours":
        seconds, tokens, padded, losses = run_ours(model, warm, measured, batch, seq)
    else:  # "baseline" (fp32) or "baseline-bf16"
        seconds, tokens, padded, losses = run_baseline(
            model, warm, measured, batch, seq, bf16=spec["trainer"] == "baseline-bf16"
        )
    peak_mem = (
        torch.cuda.max_memory_allocated()
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    return {
        **spec,
        "device": device.type,
        "tokens_per_s": tokens / seconds,
        "flops_per_s": need / seconds,
        "flops_per_token": need / tokens,
        "peak_mem_bytes": peak_mem,
        "padding": 1 - tokens / padded,
        "steps_run": len(losses),
        "losses": losses,
    }


# ---------------------------------------------------------------- the grid


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", help="comma list of " + ",".join(SIZES))
    p.add_argument("--seqs", help="comma list of sequence lengths")
    p.add_argument("--steps", type=int, help="measured steps")
    p.add_argument("--warmup", type=int, help="unmeasured steps first")
    p.add_argument("--batch", type=int, help="sequences per step at the full length")
    p.add_argument("--threads", type=int, help="torch CPU threads (1 can be faster on a busy machine)")
    p.add_argument("--json", help="write all results here")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: one measurement, JSON on stdout
    p.add_argument(
        "--smoke", action="store_true", help="the tiny model for 2 steps: checks the benchmark works"
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.sizes, args.seqs, args.steps, args.warmup, args.batch = "tiny", "64", 2, 0, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(one(json.loads(args.one))))
        return 0

    cuda = torch.cuda.is_available()
    sizes = (args.sizes or ("135m,0.5b,1.5b" if cuda else "135m")).split(",")
    seqs = [int(s) for s in (args.seqs or ("1024,4096" if cuda else "256,512")).split(",")]
    steps, warmup = (
        args.steps or (10 if cuda else 3),
        args.warmup if args.warmup is not None else (3 if cuda else 1),
    )
    device = torch.device("cuda" if cuda else "cpu")
    peak = measure_peak(device)
    name = torch.cuda.get_device_name() if cuda else f"cpu ({torch.get_num_threads()} threads)"
    spec_peak = next((v for k, v in SPEC_BF16_TFLOPS.items() if cuda and k in name), None)
    print(
        f"device: {name}; measured {'bf16' if cuda else 'fp32'} matmul peak {peak / 1e12:.3f} TFLOP/s"
        + (f" (spec {spec_peak:.0f})" if spec_peak else "")
    )
    print(
        f"{'size':>5} {'seq':>5} {'trainer':<9} {'tok/s':>9} {'TFLOP/s':>8} {'MFU':>6} "
        f"{'peak mem':>9} {'pad':>5}"
        f"  loss first->last"
    )
    results, failed = [], 0
    for size in sizes:
        for seq in seqs:
            batch = args.batch or max(1, (8192 if cuda else 1024) // seq)
            row = {}
            for trainer in ("ours", "baseline"):
                spec = {
                    "size": size,
                    "seq": seq,
                    "trainer": trainer,
                    "steps": steps,
                    "warmup": warmup,
                    "batch": batch,
                }
                cmd = [sys.executable, __file__, "--one", json.dumps(spec)]
                cmd += ["--threads", str(args.threads)] if args.threads else []
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
                )
                if proc.returncode != 0:
                    err = (proc.stderr.strip().splitlines() or ["?"])[-1]
                    print(f"{size:>5} {seq:>5} {trainer:<9} failed: {err}")
                    failed += 1
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                r["mfu"] = r["flops_per_s"] / peak
                row[trainer] = r
                results.append(r)
                print(
                    f"{size:>5} {seq:>5} {trainer:<9} {r['tokens_per_s']:>9.0f} "
                    f"{r['flops_per_s'] / 1e12:>8.3f} "
                    f"{r['mfu']:>6.1%} {r['peak_mem_bytes'] / 2**30:>7.2f}Gi {r['padding']:>5.0%}"
                    f"  {r['losses'][0]:.2f}->{r['losses'][-1]:.2f}",
                    flush=True,
                )
            if len(row) == 2:
                o, b = row["ours"], row["baseline"]
                print(
                    f"{'':>5} {'':>5} {'ratio':<9} {o['tokens_per_s'] / b['tokens_per_s']:>8.2f}x "
                    f"{'':>8} {'':>6} "
                    f"{o['peak_mem_bytes'] / b['peak_mem_bytes']:>8.2f}x"
                )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": name, "peak_flops": peak, "results": results}, indent=2)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
