"""`harness train`: rejection-sampling LoRA fine-tuning of a local model (lora/train.py)."""

from __future__ import annotations

import argparse
import re

from agent.config import add_loop_options
from results import telemetry


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="improve a local model on its own solved attempts (rejection sampling + LoRA)",
        description="Each round: sample the train tasks K times, keep solved attempts, "
        "fine-tune a LoRA adapter, evaluate it on heldout and train tasks. "
        "Re-running with the same --out resumes.",
        epilog="example:\n"
        "  harness train --model local:smollm2-135m --tasks builtin:easy --rounds 2 --samples 8",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", help="local model, e.g. local:smollm2-135m")
    p.add_argument("--tasks", help="suite whose train split is sampled, e.g. builtin:easy")
    p.add_argument("--heldout", help="suite whose heldout split is evaluated (default: --tasks)")
    p.add_argument("--rounds", type=int, help="training rounds (default 2)")
    p.add_argument("--samples", "-k", type=int, help="samples per train task per round (default 8)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default 0.7)")
    p.add_argument(
        "--eval-samples", type=int, help="samples per heldout task for pass@k (default: --samples)"
    )
    p.add_argument("--per-task-cap", type=int, help="most trajectories kept per task, 0 = no cap (default 2)")
    p.add_argument(
        "--mask-errors", action="store_true", default=None, help="no loss on turns whose command failed"
    )
    p.add_argument(
        "--continue",
        dest="continue_adapter",
        action="store_true",
        default=None,
        help="train each round on top of the previous adapter (default: from the base on all kept data)",
    )
    p.add_argument("--limit", type=int, help="use N tasks of each split, spread evenly over families")
    add_loop_options(
        p,
        "max_steps",
        "max_reply_tokens",  # None: the preset's, else LoopConfig's
        defaults={
            "max_steps": (None, "from --preset, else {default}"),
            "max_reply_tokens": (None, "from --preset, else {default}"),
        },
    )
    p.add_argument("--concurrency", type=int, help="attempts in flight while sampling (default 4)")
    p.add_argument("--seed", type=int, help="seed for sampling and training (default 0)")
    p.add_argument("--rank", type=int, help="LoRA rank (default 16)")
    p.add_argument("--lr", type=float, help="learning rate (default 2e-4)")
    p.add_argument("--epochs", type=int, help="epochs per round (default 2)")
    p.add_argument("--out", help="run folder (default runs/train/<model>-<tasks>); the same folder resumes")
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the evals' attempts on a Ray cluster (ray://HOST:PORT, HOST:PORT or auto)",
    )
    p.add_argument(
        "--budget",
        type=int,
        help="train attempts per round, spread by each task's measured solve rate (default: K per task)",
    )
    p.add_argument(
        "--explore-share", type=float, help="with --budget: most of it on never-solved tasks (default 0.2)"
    )
    p.add_argument(
        "--curriculum",
        action="store_true",
        default=None,
        help="with --budget: sample tasks up to a difficulty level that rises as they get solved",
    )
    p.add_argument(
        "--hints",
        action="store_true",
        default=None,
        help="with --budget: half the attempts on never-solved tasks start from a hint (trained without it)",
    )
    p.add_argument(
        "--stop-when",
        choices=("no_new_task", "no_improvement"),
        help="no_new_task (default): a round solved no new train task; no_improvement: neither held-out "
        "greedy pass@1 nor the train solve rate rose",
    )
    p.add_argument(
        "--audit-runs",
        nargs="+",
        metavar="RUN",
        help="runs whose attempts the task audit also reads (e.g. a null agent's); broken tasks are left out",
    )
    p.add_argument("--preset", help="named settings, e.g. rft-smollm2; explicit flags override it")
    telemetry.add_options(p)
    p.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from lora.config import PRESETS, config_from
    from lora.train import run

    model = args.model or PRESETS.get(args.preset or "", {}).get("model")
    tasks = args.tasks or PRESETS.get(args.preset or "", {}).get("tasks")
    out = args.out
    if out is None and model and tasks:
        out = "runs/train/" + re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model}-{tasks}")
    cfg = config_from(
        args.preset,
        model=args.model,
        tasks=args.tasks,
        heldout=args.heldout,
        rounds=args.rounds,
        samples=args.samples,
        temperature=args.temperature,
        eval_samples=args.eval_samples,
        per_task_cap=args.per_task_cap,
        mask_errors=args.mask_errors,
        continue_adapter=args.continue_adapter,
        limit=args.limit,
        max_steps=args.max_steps,
        max_reply_tokens=args.max_reply_tokens,
        concurrency=args.concurrency,
        seed=args.seed,
        out=out,
        cluster=args.cluster,
        budget=args.budget,
        explore_share=args.explore_share,
        curriculum=args.curriculum,
        hints=args.hints,
        stop_when=args.stop_when,
        audit_runs=args.audit_runs,
        sft={"rank": args.rank, "lr": args.lr, "epochs": args.epochs},
    )
    telemetry.apply_options(args, "harness-train")
    run(cfg)
    return 0
