#!/usr/bin/env python3
"""The proof run: rejection-sampling LoRA fine-tuning of SmolLM2-135M-Instruct on the CPU.

    python bench/rft_smollm2.py [--out runs/rft-smollm2] [--limit N]

Builtin difficulty 1-2 task families: instances of the train split are sampled (K=8 at t=0.7) and
trained on; instances of the heldout split only measure transfer. Two rounds, each from the base on
all solved trajectories so far (ReST-EM). Everything is lora.train with the "rft-smollm2" preset
(the same as `harness train --preset rft-smollm2`); interrupted, it resumes where it stopped.
Prints the table of rounds.jsonl (pass@1 at t=0 and pass@8 at t=0.7, per split and round, with 95%
bootstrap CIs over tasks) and the wall time.
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
