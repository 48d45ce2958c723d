#!/usr/bin/env python3
"""The proof run: rejection-sampling LoRA fine-tuning of SmolLM2-135M-Instruct on the CPU.

    python bench/rft_smollm2.py [--out runs/rft-smollm2] [--limit N]

Builtin difficulty 1-2 task families: instances of the train split are sampled (K=8 at t=0.7) and
trained on; instances of the heldout split only measure transfer. Two rounds, each from the base on
all solved trajectories so far (ReST-EM). Everything is lora.train with the "rft-smollm2" preset
(the same as `harness train --preset rft-smollm2`); interrupted, it resumes where it stopped.
Prints the table of rounds.jsonl (pass@1 at t=0 and pass@8/pass@4 at t=0.7 for train/heldout, per
round, with 95% bootstrap CIs over tasks) and the wall time.

Time budget (90 minutes on 2 cores). Generation dominates: SmolLM2-135M decodes one sequence at a time
at roughly 10-30 tokens/s here, and the local model serialises generation across attempts. Per
evaluated model (3 of them: base, round 1, round 2), with L tasks per split, K train samples and E
heldout samples: L*(K + 1 + E + 1) attempts = 6*(8+1+4+1) = 84 with the preset. An attempt is capped at
5 steps x 192 reply tokens; at ~12 s per attempt that is ~17 min per model, ~50 min in all, plus two
fine-tunings of a few minutes (a few dozen trajectories of ~1k tokens, 4 epochs, ~100 tokens/s).
If the first round's evals run faster, raise --limit (12 doubles the sampling time).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lora.train import PRESETS, config_from, run  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/rft-smollm2", help="run folder; the same folder resumes")
    p.add_argument("--limit", type=int, help=f"tasks per split (preset: {PRESETS['rft-smollm2'].get('limit')})")
    args = p.parse_args(argv)
    cfg = config_from("rft-smollm2", out=args.out, limit=args.limit)
    started = time.monotonic()
    run(cfg)
    print(f"wall time {((time.monotonic() - started) / 60):.1f} min; results in {cfg.out}/rounds.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
