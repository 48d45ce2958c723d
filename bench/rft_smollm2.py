#!/usr/bin/env python3
"""The proof run: rejection-sampling LoRA fine-tuning of SmolLM2-135M-Instruct on the CPU.

    python bench/rft_smollm2.py [--out runs/rft-smollm2] [--limit N]
    python bench/rft_smollm2.py --smoke --out DIR   # 1 task per split, 2 samples, 1 step of 16 tokens,
                                                    # 1 round

Builtin difficulty 1-2 task families (6 families x 10 instances): the 24 train instances are sampled
(K=8 at t=0.7) and trained on; the 36 held-out instances only measure transfer. Up to two rounds, each
from the base on all solved trajectories so far (ReST-EM); the loop stops early when a round solves
no new train task. Everything is lora.train with the "rft-smollm2" preset (the same as
`harness train --preset rft-smollm2`); interrupted, it resumes where it stopped.
Prints the table of rounds.jsonl (per split: pass@1 at t=0, pass@1 and pass@K at t=0.7, per round,
with 95% bootstrap CIs over tasks; round N's metrics.json also holds each change from round 0 with
its paired bootstrap CI) and the wall time.

Time budget (90 minutes on 2 cores). Generation dominates. Per evaluated model: 36 held-out tasks x
(1 greedy + 4 sampled) + 24 train tasks x (1 greedy + 8 sampled) = 396 attempts of at most 5 steps x
64 reply tokens. The local model decodes up to 16 attempts' replies together and reuses each
conversation's earlier keys/values (agent/models/local_decoding.py), ~2-3 s per attempt here: ~15-20
min per model, three models (base, round 1, round 2) plus two fine-tunings of a minute or two each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lora.config import config_from
from lora.train import run

# --smoke: the whole pipeline at the smallest sizes that still train (bench/rft_curriculum.py uses it too)
SMOKE = dict(
    limit=1,
    rounds=1,
    samples=2,
    eval_samples=1,
    max_steps=1,
    max_reply_tokens=16,
    concurrency=2,
    sft={"epochs": 1},
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/rft-smollm2", help="run folder; the same folder resumes")
    # builtin:easy has grown (issue 28: 10 families of difficulty 1-2, 20 instances each); 24 a split keeps
    # this run's size (its figures in the README are from the six families of 10 before it)
    p.add_argument("--limit", type=int, default=24, help="tasks per split, spread over the families")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="the same pipeline, tiny: checks the benchmark works (tests/bench/test_bench_smoke.py)",
    )
    args = p.parse_args(argv)
    tiny = dict(SMOKE) if args.smoke else {"limit": args.limit}
    cfg = config_from("rft-smollm2", out=args.out, **tiny)
    started = time.monotonic()
    run(cfg)
    print(f"wall time {((time.monotonic() - started) / 60):.1f} min; results in {cfg.out}/rounds.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
