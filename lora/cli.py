"""`harness train`: rejection-sampling LoRA fine-tuning of a local model (lora/train.py)."""

from __future__ import annotations

import argparse
import re

from agent.config import add_field_options, add_loop_options, given_fields
from lora.config import PGConfig, SFTConfig, TrainConfig
from results import telemetry
from results.commandline import add_command


def register(subparsers) -> None:
    p = add_command(
        subparsers,
        "train",
        help="improve a local model on its own solved attempts (rejection sampling + LoRA)",
        description="Each round: sample the train tasks K times, keep solved attempts, "
        "fine-tune a LoRA adapter, evaluate it on heldout and train tasks. "
        "The result is the round best.json names (best train greedy pass@1). "
        "Re-running with the same --out resumes.",
        examples=["harness train --model local:smollm2-135m --tasks builtin:easy --rounds 2 --samples 8"],
    )

    def add(cls, *names):
        add_field_options(p, cls, *names, unset=True)

    add(TrainConfig, "model", "tasks", "heldout", "rounds", "samples", "temperature", "eval_samples")
    add(TrainConfig, "per_task_cap", "mask_errors", "continue_adapter", "limit")
    add_loop_options(
        p,
        "max_steps",
        "max_reply_tokens",  # None: the preset's, else LoopConfig's
        defaults={
            "max_steps": (None, "from --preset, else {default}"),
            "max_reply_tokens": (None, "from --preset, else {default}"),
        },
    )
    add(TrainConfig, "concurrency", "seed")
    add(SFTConfig, "rank", "lr", "epochs")
    add(
        TrainConfig,
        "out",
        "cluster",
        "budget",
        "explore_share",
        "curriculum",
        "hints",
        "stop_when",
        "audit_runs",
        "method",
    )
    add(PGConfig, "kl")
    add(TrainConfig, "heldout_families", "family_seed", "cheat_probes", "student")
    p.add_argument("--preset", help="named settings, e.g. rft-smollm2; explicit flags override it")
    telemetry.add_options(p)
    p.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from lora.train import run

    cfg = train_config_from(args)
    telemetry.apply_options(args, "harness-train")
    run(cfg)
    return 0


def train_config_from(args: argparse.Namespace):
    """The TrainConfig `harness train`'s options ask for: the preset's settings, then the flags given."""
    from lora.config import PRESETS, config_from

    given = given_fields(args, TrainConfig)
    preset = PRESETS.get(args.preset or "", {})
    model, tasks = given.get("model") or preset.get("model"), given.get("tasks") or preset.get("tasks")
    if given.get("out") is None and model and tasks:
        given["out"] = "runs/train/" + re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model}-{tasks}")
    return config_from(
        args.preset, **given, sft=given_fields(args, SFTConfig), pg=given_fields(args, PGConfig)
    )
