#!/usr/bin/env python3
"""One prepared check of the training and local-model paths on one GPU (at most 8 minutes), or, with
--cpu, the same code at tiny sizes on the CPU (under a minute; tests/bench/test_bench_gpu_check.py runs it).

    python bench/gpu_check.py --out gpu.json          # on a machine with one CUDA GPU
    python bench/gpu_check.py --cpu --out smoke.json  # tiny sizes, CPU only (CUDA hidden)

Prints a table per section and writes every figure to --out (rewritten after each section, so a run
stopped by its budget still leaves what it measured):

1. sft: LoRA SFT throughput, MFU and peak memory of our trainer (lora/sft.py) beside the plain
   transformers+peft loop, both driven by bench/lora.py (its synthetic data, FLOP count and loops), on
   randomly initialised Qwen2 models shaped like Qwen2.5-0.5B and -1.5B at 1k and 4k tokens. On a GPU the
   plain loop runs twice: as bench/lora.py defines it (fp32) and on a bf16 model (the harder baseline).
   Targets printed beside the figures: >= 1.5x the plain loop; >= 35% MFU at 1.5B/4k in bf16.
2. decode: the local backend's continuous-batching decoder (agent/models/local.py) at 1, 16 and 64
   concurrent greedy requests beside one padded `model.generate` of the same prompts: generated tokens
   per second and time to first token. First a parity check in fp32: the decoder's greedy tokens must
   equal generate's on the same prompts (the throughput rows then run in the backend's own dtype).
3. e2e: one `harness train` round (lora/train.py) with a tiny random-init model: round 0's train samples
   are replayed oracle trajectories (a replay model whose replies are recorded in the student's token
   ids, as the local backend records its own), then data -> SFT on the device -> adapter -> eval with
   the adapter loaded, on the device. With a Docker engine the evals are real `harness eval` runs
   (sandboxes, hidden tests); without one (a bare GPU machine) each eval is the model's first reply to
   each task, scored against the oracle's reply, and the JSON says so ("sandbox": "none").
4. pg: the policy-gradient update of `harness train --method grpo` (lora/grpo.update: clipped ratio,
   KL to the base with the adapter disabled, loss on the sampled tokens only) for a few steps on randomly
   initialised Qwen2 models shaped like Qwen2.5-1.5B and -0.5B, on synthetic groups (K attempts per
   task, one rewarded, prompts and observations masked): steps, tokens per second, peak memory, the
   clipped share and KL per step, and whether the rewarded attempts' log-probability rose and the others'
   fell. The rollouts themselves come from the same local backend sections 2 and 3 prove.

The models are built from configs with a byte-level tokenizer made here: nothing is downloaded.
A wall-clock budget (--budget, default 450 s on a GPU) guards the run: each section gets a share of
what is left, a measurement that would not fit is skipped and named, and at the budget an alarm stops
the running one; the JSON then records "skipped" with the reason.

On a GPU machine without this project's pins (transformers 5.24 renamed the cache arguments the decoder
uses; lora/train.py needs pydantic), bring them as wheels: bench/gpu_wheels.sh says how. On this
workplace's lent H200: run bench/gpu_wheels.sh here, then one device call carrying .whl with a timeout of
about 560 s (the 450 s budget, installs and imports), the command in bench/gpu_wheels.sh; the table is
the end of the output and the JSON comes back from $OUT.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SECTIONS = ("sft", "decode", "e2e", "pg")
SHARES = {"sft": 0.45, "decode": 0.2, "e2e": 0.2, "pg": 0.15}  # of the budget left when a section starts
SPECIALS = ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]  # ChatML, as local_loading.CHATML_TEMPLATE renders

# Sizes per mode. GPU: what the issue asks for, the target (1.5B at 4k) first in case the budget runs short.
# CPU: the same code paths, tiny.
PLAN = {
    "gpu": {
        "sft_sizes": ["1.5b", "0.5b"],
        "sft_seqs": [4096, 1024],
        "sft_steps": 8,
        "sft_warmup": 2,
        "sft_trainers": ["ours", "baseline", "baseline-bf16"],
        "sft_tokens": 8192,
        "decode_shape": "0.5b",
        "concurrency": [1, 16, 64],
        "decode_tokens": 128,
        "prompt_len": (256, 1024),
        "parity_rows": 4,
        "e2e_reply_tokens": 48,
        "e2e_sft_steps": 30,
        "pg_sizes": ["1.5b", "0.5b"],
        "pg_seq": 2048,  # tokens per attempt
        "pg_groups": 2,  # tasks, K = 4 attempts each
        "pg_steps": 4,
        "budget": 450,
    },
    "cpu": {
        "sft_sizes": ["tiny"],
        "sft_seqs": [64, 128],
        "sft_steps": 2,
        "sft_warmup": 1,
        "sft_trainers": ["ours", "baseline"],
        "sft_tokens": 512,
        "decode_shape": "tiny",
        "concurrency": [1, 4, 8],
        "decode_tokens": 16,
        "prompt_len": (16, 64),
        "parity_rows": 4,
        "e2e_reply_tokens": 8,
        "e2e_sft_steps": 2,
        "pg_sizes": ["tiny"],
        "pg_seq": 64,
        "pg_groups": 2,
        "pg_steps": 3,
        "budget": 170,
    },
}
TARGET_SPEEDUP, TARGET_MFU = 1.5, 0.35


# ---------------------------------------------------------------- budget


class OutOfBudget(Exception):
    pass


class Budget:
    """Wall-clock guard. Sections get a share of what is left; an alarm (SIGALRM, main thread) stops the
    measurement running at the hard end, and every later one is skipped."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.deadline = self.start + seconds
        self.section_deadline = self.deadline
        self.spent = False
        self.armed = False  # raise at the alarm only inside a section, never while the report is saved
        if hasattr(signal, "SIGALRM"):
            signal.signal(signal.SIGALRM, self._ring)
            signal.setitimer(signal.ITIMER_REAL, seconds)

    def _ring(self, *_: Any) -> None:
        self.spent = True
        if self.armed:
            raise OutOfBudget(f"the {self.seconds:.0f} s budget ran out")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def enter(self, section: str, remaining: list[str]) -> None:
        share = SHARES[section] / sum(SHARES[s] for s in remaining)
        self.section_deadline = time.monotonic() + max(0.0, self.left()) * share

    def refuse(self, estimate: float) -> Optional[str]:
        """Why a measurement expected to take `estimate` seconds must be skipped now (None: run it)."""
        if self.spent or self.left() <= 0:
            return f"the {self.seconds:.0f} s budget ran out"
        if time.monotonic() + estimate > self.section_deadline:
            left = self.section_deadline - time.monotonic()
            return f"budget: about {estimate:.0f} s needed, {left:.0f} s left to this section"
        return None

    def stop(self) -> None:
        if hasattr(signal, "SIGALRM"):
            signal.setitimer(signal.ITIMER_REAL, 0)


# ---------------------------------------------------------------- shared helpers


def bench_module(name: str):
    """bench/<name>.py as a module (bench/ is not a package, and bench/lora.py would shadow lora/)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_gpu() -> bool:
    from agent.models.local_loading import (
        pick_device,
    )  # the project's one device rule (cuda when there is one)

    return pick_device().type == "cuda"


def sync() -> None:
    import torch

    if on_gpu():
        torch.cuda.synchronize()


def free() -> None:
    from lora.sft import free_memory

    free_memory()


def device_name() -> str:
    import torch

    if on_gpu():
        return torch.cuda.get_device_name()
    return f"cpu ({torch.get_num_threads()} threads)"


def byte_tokenizer(vocab_size: int):
    """A byte-level tokenizer (any text, no merges) with ChatML's special tokens, padded with unused
    filler tokens to `vocab_size` so that every id a random model emits decodes to something."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from agent.models.local_loading import CHATML_TEMPLATE

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    for i in range(vocab_size - len(alphabet) - len(SPECIALS)):
        vocab[f"<x{i}>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=SPECIALS[0],
        pad_token=SPECIALS[1],
        additional_special_tokens=SPECIALS[2:],
    )
    fast.chat_template = CHATML_TEMPLATE
    assert len(fast) == vocab_size, (len(fast), vocab_size)
    return fast


def random_model_folder(folder: Path, shape: str, max_positions: int = 8192) -> Path:
    """A Hugging Face model folder (config, random weights, tokenizer) that `local:<folder>` loads."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    sizes = bench_module("lora").SIZES
    tok = byte_tokenizer(sizes[shape]["vocab_size"])
    cfg = Qwen2Config(
        **sizes[shape],
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    from agent.models.local_loading import pick_device

    with pick_device():  # a 0.5B init on the CPU is slow
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    del model
    free()
    return folder


# ---------------------------------------------------------------- 1. LoRA SFT throughput


def section_sft(plan: dict, budget: Budget, log: Callable[[str], None]) -> dict:
    bl = bench_module("lora")  # reuse: the synthetic data, FLOP count, both training loops, peak matmul
    from agent.models.local_loading import pick_device

    device = pick_device()
    cuda = device.type == "cuda"
    peak = bl.measure_peak(device)
    name = device_name()
    spec_peak = next((v for k, v in bl.SPEC_BF16_TFLOPS.items() if cuda and k in name), None)
    out: dict[str, Any] = {
        "device": name,
        "peak_flops": peak,
        "spec_peak_tflops": spec_peak,
        "peak_kind": "bf16 matmul" if cuda else "fp32 matmul",
        "memory": "max allocated on the GPU" if cuda else "process max RSS (cumulative in-process)",
        "rows": [],
        "ratios": [],
    }
    log(
        f"[sft] {name}: measured {out['peak_kind']} peak {peak / 1e12:.1f} TFLOP/s"
        + (f" (spec {spec_peak:.0f})" if spec_peak else "")
    )
    log(
        f"{'size':>5} {'seq':>5} {'trainer':<14} {'tok/s':>9} {'TFLOP/s':>8} {'MFU':>6} "
        f"{'peak mem':>9} {'pad':>5}"
    )
    last = 0.0
    for size in plan["sft_sizes"]:
        for seq in plan["sft_seqs"]:
            batch = max(1, plan["sft_tokens"] // seq)
            row: dict[str, dict] = {}
            for trainer in plan["sft_trainers"]:
                spec = {
                    "size": size,
                    "seq": seq,
                    "trainer": trainer,
                    "steps": plan["sft_steps"],
                    "warmup": plan["sft_warmup"],
                    "batch": batch,
                }
                why = budget.refuse(last)
                if why:
                    out["rows"].append({**spec, "skipped": why})
                    log(f"{size:>5} {seq:>5} {trainer:<14} skipped: {why}")
                    continue
                t0 = time.monotonic()
                try:
                    r = bl.one(spec)  # in-process: peak memory is reset per run on the GPU
                except OutOfBudget:
                    raise
                except Exception as e:
                    r = {
                        **spec,
                        "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
                    }
                    log(f"{size:>5} {seq:>5} {trainer:<14} failed: {r['error']}")
                finally:
                    free()
                last = time.monotonic() - t0
                r["seconds"] = round(last, 1)
                out["rows"].append(r)
                if "error" in r:
                    continue
                r["mfu"] = r["flops_per_s"] / peak
                r["loss_first"], r["loss_last"] = r["losses"][0], r["losses"][-1]
                row[trainer] = r
                log(
                    f"{size:>5} {seq:>5} {trainer:<14} {r['tokens_per_s']:>9.0f} "
                    f"{r['flops_per_s'] / 1e12:>8.2f} "
                    f"{r['mfu']:>6.1%} {r['peak_mem_bytes'] / 2**30:>7.2f}Gi {r['padding']:>5.0%}"
                )
            if "ours" in row:
                ratio = {"size": size, "seq": seq}
                for base in ("baseline", "baseline-bf16"):
                    if base in row:
                        ratio[f"speedup_vs_{base}"] = row["ours"]["tokens_per_s"] / row[base]["tokens_per_s"]
                        ratio[f"memory_vs_{base}"] = (
                            row["ours"]["peak_mem_bytes"] / row[base]["peak_mem_bytes"]
                        )
                if len(ratio) > 2:
                    out["ratios"].append(ratio)
                    log(
                        f"{size:>5} {seq:>5} {'ours/plain':<14} "
                        + ", ".join(
                            f"{k.removeprefix('speedup_vs_')} {v:.2f}x"
                            for k, v in ratio.items()
                            if k.startswith("speedup")
                        )
                        + f"  (target >= {TARGET_SPEEDUP}x)"
                    )
    big = next(
        (
            r
            for r in out["rows"]
            if r.get("trainer") == "ours" and r.get("size") == "1.5b" and r.get("seq") == 4096 and "mfu" in r
        ),
        None,
    )
    out["targets"] = {
        "speedup": TARGET_SPEEDUP,
        "mfu_1.5b_4k": TARGET_MFU,
        "mfu_1.5b_4k_measured": big["mfu"] if big else None,
        "mfu_1.5b_4k_met": (big["mfu"] >= TARGET_MFU) if big else None,
        "speedup_met": {
            f"{r['size']}/{r['seq']}": {
                k.removeprefix("speedup_vs_"): v >= TARGET_SPEEDUP
                for k, v in r.items()
                if k.startswith("speedup")
            }
            for r in out["ratios"]
        },
    }
    if big:
        log(f"[sft] 1.5B/4k MFU {big['mfu']:.1%} (target >= {TARGET_MFU:.0%})")
    return out


# ---------------------------------------------------------------- 2. local decoding


def timed_local_model():
    from agent.models.local import LocalModel

    class Timed(LocalModel):
        """LocalModel that notes when each request was made and when its first token was sampled."""

        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.made: dict[int, float] = {}
            self.first: dict[int, float] = {}

        def _request(self, *a: Any, **kw: Any):
            req = super()._request(*a, **kw)
            self.made.setdefault(id(req), time.perf_counter())  # just after it was queued
            return req

        def _advance(self, rows, logits):  # sample() has synchronised with the device by now
            super()._advance(rows, logits)
            now = time.perf_counter()
            for row in rows:
                self.first.setdefault(id(row.owner), now)

    return Timed


def prompts_for(n: int, lo_hi: tuple[int, int], seed: int) -> list[list[dict]]:
    """n one-turn conversations with printable user texts of random lengths (bytes = tokens here)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz      .,\n"
    return [
        [{"role": "user", "content": "".join(rng.choice(letters) for _ in range(rng.randint(*lo_hi)))}]
        for _ in range(n)
    ]


def run_decoder(lm, convs: list[list[dict]], max_tokens: int, temperature: float = 0.0) -> dict:
    lm.prefix.clear()  # every row prefills its whole prompt, as generate does
    lm.made.clear()
    lm.first.clear()
    lm.max_batch = max(16, len(convs))  # all requests decode together (the backend's default is 16 rows)

    async def go():
        return await asyncio.gather(
            *(
                lm.complete(c, temperature=temperature, max_tokens=max_tokens, seed=i)
                for i, c in enumerate(convs)
            )
        )

    sync()
    t0 = time.perf_counter()
    outs = asyncio.run(go())
    seconds = time.perf_counter() - t0
    ttft = [lm.first[k] - lm.made[k] for k in lm.made if k in lm.first]
    tokens = [o[0].completion_ids for o in outs]
    return {
        "seconds": seconds,
        "tokens": sum(map(len, tokens)),
        "tokens_per_s": sum(map(len, tokens)) / seconds,
        "ttft_mean_s": sum(ttft) / len(ttft),
        "ttft_max_s": max(ttft),
        "ids": tokens,
        "steps_per_s": max(map(len, tokens)) / seconds,
    }  # the longest row ran every step


def run_generate(lm, convs: list[list[dict]], max_tokens: int) -> dict:
    """The same prompts in one left-padded greedy `model.generate`; time to first token via a streamer."""
    import torch
    from transformers.generation.streamers import BaseStreamer

    prompts = [lm.encode(c) for c in convs]
    width = max(map(len, prompts))
    ids = torch.tensor([[lm.pad_id] * (width - len(p)) + p for p in prompts], device=lm.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=lm.device)

    class FirstToken(BaseStreamer):
        def __init__(self) -> None:
            self.puts: list[float] = []

        def put(self, value):  # first call: the prompt; second: the first generated tokens (on the host)
            self.puts.append(time.perf_counter())

        def end(self):
            pass

    streamer = FirstToken()
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_tokens,
            eos_token_id=lm.end_ids,
            pad_token_id=lm.pad_id,
            streamer=streamer,
        )
    sync()
    seconds = time.perf_counter() - t0
    rows = []
    for row in out[:, width:].tolist():  # up to and including the first end token, as the decoder returns
        end = next((i for i, t in enumerate(row) if t in lm.end_ids), None)
        rows.append(row if end is None else row[: end + 1])
    ttft = streamer.puts[1] - t0 if len(streamer.puts) > 1 else seconds
    return {
        "seconds": seconds,
        "tokens": sum(map(len, rows)),
        "tokens_per_s": sum(map(len, rows)) / seconds,
        "ttft_mean_s": ttft,
        "ttft_max_s": ttft,
        "ids": rows,
        "steps_per_s": max(map(len, rows)) / seconds,
    }


def copy_bandwidth() -> float:
    """Device memory bandwidth of a large device-to-device copy (bytes read + written per second)."""
    import torch

    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    end.synchronize()
    return 2 * a.numel() * 10 / (start.elapsed_time(end) / 1e3)


def section_decode(plan: dict, budget: Budget, log: Callable[[str], None], work: Path) -> dict:
    import torch

    shape = plan["decode_shape"]
    folder = random_model_folder(work / f"decode-{shape}", shape)
    lm = timed_local_model()(str(folder), stop_after_block=False)
    out: dict[str, Any] = {
        "model": f"random-init Qwen2, {shape}-shaped",
        "device": device_name(),
        "dtype": str(next(lm.model.parameters()).dtype).removeprefix("torch."),
        "max_tokens": plan["decode_tokens"],
        "rows": [],
    }
    try:
        # Parity, in fp32: bf16 rounding differs between batch shapes, which flips argmaxes of a random model.
        convs = prompts_for(plan["parity_rows"], plan["prompt_len"], seed=1)
        dtype = next(lm.model.parameters()).dtype
        lm.model.float()
        mine = run_decoder(lm, convs, plan["decode_tokens"])["ids"]
        theirs = run_generate(lm, convs, plan["decode_tokens"])["ids"]
        lm.model.to(dtype)
        lm.prefix.clear()  # it holds fp32 keys/values now
        equal = sum(a == b for a, b in zip(mine, theirs))
        out["parity"] = {
            "rows": len(convs),
            "equal_rows": equal,
            "dtype": "float32",
            "tokens_compared": sum(map(len, theirs)),
            "ok": equal == len(convs),
        }
        log(
            f"[decode] {out['model']} on {out['device']}, throughput in {out['dtype']}; "
            "greedy parity (fp32): "
            f"{equal}/{len(convs)} rows equal to model.generate"
        )
        # warm-up of both paths (kernels, allocator) outside the timings
        warm = prompts_for(2, plan["prompt_len"], seed=2)
        run_decoder(lm, warm, 4)
        run_decoder(lm, warm, 4, temperature=0.7)
        run_generate(lm, warm, 4)
        log(f"{'requests':>8} {'path':<12} {'tokens':>7} {'tok/s':>9} {'TTFT mean':>10} {'TTFT max':>9}")
        last = 0.0
        for n in plan["concurrency"]:
            why = budget.refuse(last)
            if why:
                out["rows"].append({"concurrency": n, "skipped": why})
                log(f"{n:>8} skipped: {why}")
                continue
            t0 = time.monotonic()
            convs = prompts_for(n, plan["prompt_len"], seed=100 + n)
            row: dict[str, Any] = {"concurrency": n}
            # greedy both ways, then the decoder sampling at t=0.7 (what harness train's rollouts do)
            paths = (
                ("decoder", run_decoder, {}),
                ("generate", run_generate, {}),
                ("decoder-t0.7", run_decoder, {"temperature": 0.7}),
            )
            for path, fn, kw in paths:
                r = fn(lm, convs, plan["decode_tokens"], **kw)
                r.pop("ids")
                row[path] = r
                log(
                    f"{n:>8} {path:<12} {r['tokens']:>7} {r['tokens_per_s']:>9.1f} "
                    f"{r['ttft_mean_s'] * 1e3:>8.1f}ms "
                    f"{r['ttft_max_s'] * 1e3:>7.1f}ms"
                )
            row["speedup"] = row["decoder"]["tokens_per_s"] / row["generate"]["tokens_per_s"]
            log(f"{n:>8} {'ratio greedy':<12} {'':>7} {row['speedup']:>8.2f}x")
            out["rows"].append(row)
            last = time.monotonic() - t0
        out["max_batch"] = lm.max_batch
        if on_gpu():  # a decode step reads every weight once: the memory-bound ceiling
            weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
            out["copy_bandwidth_bytes_per_s"] = bw = copy_bandwidth()
            out["ceiling_steps_per_s"] = bw / weights
            log(
                f"[decode] memory-bound ceiling {bw / weights:.0f} steps/s "
                f"({weights / 2**30:.2f} GiB of weights at "
                f"{bw / 1e12:.2f} TB/s); measured "
                + ", ".join(
                    f"{r['concurrency']}: {r['decoder']['steps_per_s']:.0f}"
                    for r in out["rows"]
                    if "decoder" in r
                )
            )
        if on_gpu():
            out["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    finally:
        lm.close()
        del lm
        free()
    return out


# ---------------------------------------------------------------- 3. one harness train round


def oracle_replies(task) -> list[str]:
    """The task's solve.sh as one bash block, then submit: what a perfect text-protocol agent replies."""
    script = task.solution_files["solve.sh"].decode()
    body = "\n".join(line for line in script.splitlines() if not line.startswith("#!")).strip()
    return [f"```bash\n{body}\n```", "```bash\nsubmit\n```"]


def in_student_ids(student, messages: list[dict], text: str) -> tuple[list[int], list[int]]:
    """(prompt ids, reply ids + end of turn) as the local backend would record `text` as its own reply."""
    reply = student.tokenizer(text, add_special_tokens=False)["input_ids"]
    return student.encode(messages), list(reply) + [student.tokenizer.eos_token_id]


class Teacher:
    """A replay model (the oracle's replies) whose completions carry the student's token ids, as the
    local backend records its own: the off-policy trajectories round 0 trains on."""

    def __init__(self, replay, student) -> None:
        self.replay, self.student = replay, student
        self.name, self.supports_tools, self.context_window = replay.name, False, student.context_window

    def for_task(self, task_id: str, sample: int = 0) -> "Teacher":
        return Teacher(self.replay.for_task(task_id, sample), self.student)

    def count_tokens(self, messages) -> int:
        return self.student.count_tokens(messages)

    async def complete(self, messages, tools=None, n=1, temperature=0.0, max_tokens=512, seed=None):
        out = await self.replay.complete(
            messages, tools=tools, n=n, temperature=temperature, max_tokens=max_tokens, seed=seed
        )
        for c in out:
            c.prompt_ids, c.completion_ids = in_student_ids(self.student, messages, c.content)
            c.prompt_tokens, c.completion_tokens = len(c.prompt_ids), len(c.completion_ids)
        return out


def num(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4f}"


def docker_ok() -> bool:
    try:
        import docker

        docker.from_env(timeout=5).ping()
        return True
    except Exception:
        return False


def first_turn(instruction: str) -> list[dict]:
    """The loop's opening messages for the text protocol, for the no-sandbox evals (agent.loop imports the
    sandbox package only where a sandbox is used, so a bare GPU machine without the Docker SDK has it)."""
    from agent.loop import clean
    from agent.prompt_format import opening_messages

    return clean(opening_messages(instruction, use_tools=False))


def no_sandbox_eval(
    model: str,
    tasks: list,
    *,
    samples: int,
    temperature: float,
    out_dir: Path,
    adapter: Optional[Path],
    seed: int,
    teacher: bool,
    max_tokens: int,
) -> Path:
    """An eval without Docker: each attempt is one reply to the task's opening messages, solved when it
    equals the oracle's first reply; the teacher's attempts are its two replies, solved."""
    from agent.models.local import LocalModel
    from results.schema import Action, Attempt, Step

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lm = LocalModel(model.removeprefix("local:"), adapter=str(adapter) if adapter else None, seed=seed)
    lines = []
    try:
        for task in tasks:
            oracle = oracle_replies(task)
            for s in range(samples):
                messages, steps = first_turn(task.instruction), []
                replies = oracle if teacher else [None]
                for i, text in enumerate(replies):
                    if text is None:
                        c = lm.generate(
                            messages, temperature=temperature, max_tokens=max_tokens, seed=seed * 1000 + s
                        )[0]
                        text, prompt_ids, completion_ids = c.content, c.prompt_ids, c.completion_ids
                    else:
                        prompt_ids, completion_ids = in_student_ids(lm, messages, text)
                    steps.append(
                        Step(
                            index=i,
                            raw_output=text,
                            actions=[Action(kind="bash", command=text)],
                            observation="(not run: no sandbox)",
                            exit_code=0,
                            prompt_ids=prompt_ids,
                            completion_ids=completion_ids,
                        )
                    )
                    messages = messages + [
                        {"role": "assistant", "content": text},
                        {
                            "role": "user",
                            "content": "exit code: 0\n(no output)\nReply with your "
                            "next command, or with submit if the task is done.",
                        },
                    ]
                solved = teacher or steps[0].raw_output.strip() == oracle[0]
                lines.append(
                    Attempt(
                        key=f"{out_dir.name}/{task.id}/{s}",
                        run_id=out_dir.name,
                        task_id=task.id,
                        sample=s,
                        model=model,
                        steps=steps,
                        status="solved" if solved else "failed",
                        reward=float(solved),
                        solved=solved,
                        reason="no sandbox: first reply compared with the oracle's",
                        n_steps=len(steps),
                    ).model_dump_json()
                )
    finally:
        lm.close()
    (out_dir / "attempts.jsonl").write_text("\n".join(lines) + "\n")
    (out_dir / "eval.json").write_text(
        json.dumps(
            {
                "model": model,
                "adapter": str(adapter) if adapter else None,
                "device": str(lm.device),
                "teacher": teacher,
            }
        )
    )
    return out_dir


def section_e2e(
    plan: dict, budget: Budget, log: Callable[[str], None], work: Path, sandbox: bool = True
) -> dict:
    import lora.backend as lb
    import lora.rundir as lrd
    import lora.train as lt
    from agent.models.local import LocalModel
    from agent.models.replay import ReplayModel
    from lora.config import config_from

    why = budget.refuse(0)
    if why:
        return {"skipped": why}
    t0 = time.monotonic()
    folder = random_model_folder(work / "e2e-tiny", "tiny")
    model = f"local:{folder}"
    sandbox = "docker" if sandbox and docker_ok() else "none"
    tasks = {split: lrd.spread(lb._load_tasks("builtin:easy", split), 1) for split in ("train", "heldout")}
    scripts = work / "oracle.json"
    scripts.write_text(json.dumps({t.id: oracle_replies(t) for ts in tasks.values() for t in ts}))
    student = LocalModel(str(folder))  # only its encode() and tokenizer: the teacher records in its ids
    teacher = Teacher(ReplayModel.from_file(str(scripts)), student)
    evals: list[dict] = []

    def run_eval(cfg, task_list):
        # Round 0's train samples (the next round's data) come from the teacher; every other eval,
        # round 1's with the adapter, is the student's.
        out_dir, adapter = cfg.out, cfg.model_options.get("adapter")
        is_teacher = adapter is None and Path(out_dir).name == "train-sample"
        evals.append(
            {
                "run": f"{Path(out_dir).parent.parent.name}/{Path(out_dir).name}",
                "teacher": is_teacher,
                "adapter": str(adapter) if adapter else None,
            }
        )
        if sandbox == "none":
            return no_sandbox_eval(
                cfg.model,
                task_list,
                samples=cfg.samples,
                temperature=cfg.loop.temperature,
                out_dir=out_dir,
                adapter=adapter,
                seed=cfg.loop.seed,
                teacher=is_teacher,
                max_tokens=cfg.loop.max_reply_tokens or 64,
            )
        if not is_teacher:
            return lb._run_eval(cfg, task_list)
        from dataclasses import replace

        from agent.config import LoopConfig
        from evaluators.run.runner import run_eval as runner_eval

        loop = replace(cfg.loop, wall_time=LoopConfig.wall_time)  # the teacher: the loop's own wall time
        return Path(
            asyncio.run(runner_eval(replace(cfg, loop=loop), task_list, progress=False, model_obj=teacher))
        )

    backend = lb.Backend(
        load_tasks=lambda spec, split: tasks[split],
        run_eval=run_eval,
        fine_tune=lb._fine_tune,
        end_of_turn=lb._end_of_turn,
    )
    cfg = config_from(
        None,
        model=model,
        tasks="builtin:easy",
        out=work / "train",
        rounds=1,
        samples=1,
        eval_samples=1,
        temperature=0.7,
        per_task_cap=1,
        max_steps=2,
        max_reply_tokens=plan["e2e_reply_tokens"],
        concurrency=2,
        sft={
            "rank": 8,
            "alpha": 16,
            "dropout": 0.0,
            "lr": 3e-3,
            "max_steps": plan["e2e_sft_steps"],
            "grad_accum": 1,
            "batch_tokens": 16384,
            "max_seq_len": 8192,
            "warmup_ratio": 0.0,
            "log_every": 0,
        },
    )
    try:
        out = lt.run(cfg, backend, log=lambda line: log(f"[e2e] {line}"))
    finally:
        student.close()
    r1 = out / "round_1"
    data = lrd.phase_done(r1, "data") or {}
    sft = lrd.phase_done(r1, "sft") or {}
    metrics = json.loads((r1 / "metrics.json").read_text()) if (r1 / "metrics.json").exists() else {}
    rows = (
        [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines() if x.strip()]
        if (out / "rounds.jsonl").exists()
        else []
    )
    result = {
        "sandbox": sandbox,
        "device": device_name(),
        "sft_device": "cuda" if on_gpu() else "cpu",
        "examples": data.get("examples", 0),
        "target_tokens": data.get("target_tokens", 0),
        "sft": {k: sft.get(k) for k in ("steps", "first_loss", "final_loss", "seconds")},
        "adapter_saved": (r1 / "adapter" / "adapter_model.safetensors").is_file(),
        "round1_adapter": metrics.get("adapter"),
        "evals": evals,
        "round1_evals_with_adapter": sum(
            1 for e in evals if e["run"].startswith("round_1/") and e["adapter"]
        ),
        "rows": rows,
        "seconds": round(time.monotonic() - t0, 1),
    }
    log(
        f"[e2e] sandbox {sandbox}; {result['examples']} replayed examples "
        f"({result['target_tokens']} target tokens); "
        f"SFT {result['sft']['steps']} steps on {result['sft_device']}, "
        f"loss {num(result['sft']['first_loss'])} -> "
        f"{num(result['sft']['final_loss'])}; adapter saved: {result['adapter_saved']}; "
        f"{result['round1_evals_with_adapter']} round-1 evals with it loaded"
    )
    return result


# ---------------------------------------------------------------- 4. policy-gradient update


def pg_rollouts(groups: int, k: int, seq: int, vocab: int, seed: int = 0) -> list:
    """Synthetic groups as lora/grpo.build_rollouts makes them: per attempt a prompt, then three turns of
    reply (trained) and observation (masked); attempt 0 of each group rewarded."""
    from lora.data import IGNORE
    from lora.grpo import Rollout, advantages

    rng = random.Random(seed)
    out = []
    for g in range(groups):
        rewards = [1.0] + [0.0] * (k - 1)
        for i, (r, adv) in enumerate(zip(rewards, advantages(rewards))):
            ids = [rng.randrange(vocab) for _ in range(seq)]
            labels = [IGNORE] * seq
            turn = seq // 4
            for t in range(3):  # reply: the first half of each turn after the prompt
                start = turn * (t + 1)
                labels[start : start + turn // 2] = ids[start : start + turn // 2]
            out.append(Rollout(ids, labels, f"task{g}", f"task{g}/{i}", [0, 1, 2], r, adv))
    return out


def section_pg(plan: dict, budget: Budget, log: Callable[[str], None]) -> dict:
    import torch

    import lora.grpo as grpo
    from agent.models.local_loading import pick_device
    from lora.config import PGConfig, SFTConfig
    from lora.sft import collate, prepare_model

    bl = bench_module("lora")
    device = pick_device()
    rows = []
    for size in plan["pg_sizes"]:
        why = budget.refuse(0)
        if why:
            rows.append({"size": size, "skipped": why})
            continue
        t0 = time.monotonic()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        sft = SFTConfig(
            rank=16,
            alpha=32,
            dropout=0.0,  # as lora/grpo.fine_tune: pi_theta = pi_old before the first update
            lr=1e-3,
            max_steps=plan["pg_steps"],
            grad_accum=1,
            batch_tokens=4 * plan["pg_seq"],  # one group per optimiser step
            max_seq_len=plan["pg_seq"],
            warmup_ratio=0.0,
            log_every=0,
        )
        model = prepare_model(bl.build_model(size, plan["pg_seq"], device), sft)
        rollouts = pg_rollouts(plan["pg_groups"], 4, plan["pg_seq"], model.config.vocab_size)

        def logp(r, model=model) -> float:
            with torch.no_grad():
                return float(grpo.token_logprobs(model, collate([r], device), 0.7).sum())

        before = [logp(r) for r in rollouts]
        stats = grpo.update(model, rollouts, sft, PGConfig(), temperature=0.7, log=lambda _: None)
        sync()
        after = [logp(r) for r in rollouts]
        up = [a > b for r, a, b in zip(rollouts, after, before) if r.advantage > 0]
        down = [a < b for r, a, b in zip(rollouts, after, before) if r.advantage < 0]
        tokens = sum(len(r.input_ids) for r in rollouts) * stats["steps"] / plan["pg_groups"]
        row = {
            "size": size,
            "steps": stats["steps"],
            "seq": plan["pg_seq"],
            "rollouts": stats["rollouts"],
            "target_tokens": stats["target_tokens"],
            "seconds": stats.get("seconds"),
            "tokens_per_s": round(tokens / stats["seconds"], 1) if stats.get("seconds") else None,
            "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)
            if device.type == "cuda"
            else None,
            "loss": [stats.get("first_loss"), stats.get("final_loss")],
            "clipped_share": stats.get("clipped_share"),
            "kl": stats.get("kl"),
            "rewarded_up": sum(up),
            "rewarded": len(up),
            "others_down": sum(down),
            "others": len(down),
            "row_seconds": round(time.monotonic() - t0, 1),
        }
        rows.append(row)
        log(
            f"[pg] {size}: {row['steps']} steps of {row['seq']}-token groups in {num(row['seconds'])} s "
            f"({row['tokens_per_s']} tok/s, peak {row['peak_mem_gb']} GB); clipped {row['clipped_share']}; "
            f"rewarded log-prob up {row['rewarded_up']}/{row['rewarded']}, others down "
            f"{row['others_down']}/{row['others']}"
        )
        del model
        free()
    return {"device": device_name(), "rows": rows}


# ---------------------------------------------------------------- main


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu_check.json", help="JSON file to write (default gpu_check.json)")
    p.add_argument("--cpu", action="store_true", help="smoke mode: tiny sizes on the CPU (CUDA hidden)")
    p.add_argument("--budget", type=float, help="wall-clock seconds for the whole run (GPU 450, --cpu 170)")
    p.add_argument("--only", help=f"comma list of sections to run ({','.join(SECTIONS)})")
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="e2e without Docker even where an engine answers (as on a bare GPU machine)",
    )
    args = p.parse_args(argv)
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch is imported
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' deprecation notices
    import torch

    mode = "gpu" if on_gpu() else "cpu"  # --cpu hid CUDA above
    plan = PLAN[mode]
    budget = Budget(args.budget or plan["budget"])
    sections = [s for s in SECTIONS if not args.only or s in args.only.split(",")]
    report: dict[str, Any] = {
        "mode": mode,
        "device": device_name(),
        "torch": torch.__version__,
        "budget_s": budget.seconds,
        "sections": {},
    }
    try:
        import peft
        import transformers

        report["transformers"], report["peft"] = transformers.__version__, peft.__version__
    except ImportError as e:
        report["import_error"] = str(e)
    pins = dict(
        line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().split() if "==" in line
    )
    off = {
        k: (report.get(k), pins[k])
        for k in ("transformers", "peft")
        if k in pins and report.get(k) != pins[k]
    }
    if off:  # the decoder needs transformers' 5.24 cache arguments; an older image fails there
        report["unpinned"] = off
        print(
            "warning: not the project's pins: "
            + ", ".join(f"{k} {have} here, {want} pinned" for k, (have, want) in off.items())
            + " (bench/gpu_wheels.sh brings them)",
            flush=True,
        )
    print(
        f"gpu_check ({mode}) on {report['device']}, torch {torch.__version__}, "
        f"transformers {report.get('transformers')}, budget {budget.seconds:.0f} s",
        flush=True,
    )
    out_path = Path(args.out)

    def save() -> None:
        report["seconds"] = round(time.monotonic() - budget.start, 1)
        out_path.write_text(json.dumps(report, indent=2, default=str))

    work = Path(tempfile.mkdtemp(prefix="gpu_check."))
    log = lambda line: print(line, flush=True)  # noqa: E731
    try:
        for i, name in enumerate(sections):
            why = budget.refuse(0)
            if why:
                report["sections"][name] = {"skipped": why}
                print(f"[{name}] skipped: {why}", flush=True)
                continue
            budget.enter(name, sections[i:])
            t0 = time.monotonic()
            budget.armed = True
            try:
                if name == "sft":
                    result = section_sft(plan, budget, log)
                elif name == "decode":
                    result = section_decode(plan, budget, log, work)
                elif name == "pg":
                    result = section_pg(plan, budget, log)
                else:
                    result = section_e2e(plan, budget, log, work, sandbox=not args.no_sandbox)
            except OutOfBudget as e:
                result = {"skipped": f"stopped: {e}"}
                print(f"[{name}] stopped: {e}", flush=True)
            except Exception as e:
                import traceback

                traceback.print_exc()
                result = {"error": f"{type(e).__name__}: {e}"[:1000]}
                print(f"[{name}] failed: {result['error']}", flush=True)
            finally:
                budget.armed = False
            result["section_seconds"] = round(time.monotonic() - t0, 1)
            report["sections"][name] = result
            save()
            free()
    finally:
        budget.stop()
        save()
        shutil.rmtree(work, ignore_errors=True)
    print(f"gpu_check: wrote {out_path} in {report['seconds']:.0f} s", flush=True)
    return 0 if all("error" not in s for s in report["sections"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
