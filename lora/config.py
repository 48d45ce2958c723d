"""The settings of `harness train` (lora/train.py): TrainConfig, the named presets, and the checks on both
(unknown settings, and a resume with settings other than the run folder's)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from lora.sft import SFTConfig
from results.errors import UserError
from results.jsonl import write_json_atomic

# Settings for the CPU proof run (bench/rft_smollm2.py), sized for a 2-core machine: see that file for the
# time estimate. Few tasks (one instance per family per split), short attempts, small data: many epochs.
PRESETS: dict[str, dict[str, Any]] = {
    "rft-smollm2": {
        "model": "local:smollm2-135m",
        "tasks": "builtin:easy",
        "heldout": "builtin:easy",
        "rounds": 2,
        "samples": 8,
        "temperature": 0.7,
        "eval_samples": 4,
        "per_task_cap": 2,
        "max_steps": 5,
        # shorter than the loop's default: a 135M model's useful replies are one command
        "max_reply_tokens": 64,
        "concurrency": 16,
        "sft": {
            "rank": 16,
            "alpha": 32,
            "dropout": 0.05,
            "lr": 1e-3,
            "epochs": 3,
            "batch_tokens": 2048,
            "grad_accum": 1,
            "warmup_ratio": 0.1,
            "max_seq_len": 4096,
        },
    },
}


LATER_DEFAULTS: dict[str, Any] = {
    "budget": None,
    "explore_share": 0.2,
    "curriculum": False,
    "start_difficulty": 2,
    "hints": False,
    "stop_when": "no_new_task",
    "audit_runs": [],
}
STOP_RULES = ("no_new_task", "no_improvement")
# Issue 28's loop: the same model, limits and SFT settings as rft-smollm2, on the whole family pool
# (difficulty 1-4), with a fixed budget per round spread by solve rate, a curriculum, hints, and a
# stop when neither held-out nor train solve rates improve.
PRESETS["rft-curriculum"] = {
    **PRESETS["rft-smollm2"],
    "tasks": "builtin",
    "heldout": "builtin",
    "rounds": 4,
    "budget": 192,
    "curriculum": True,
    "hints": True,
    "stop_when": "no_improvement",
}


@dataclass
class TrainConfig:
    model: str  # local:NAME
    tasks: str  # suite spec; its train split is sampled and trained on
    out: Path
    heldout: Optional[str] = None  # suite spec whose heldout split is evaluated; None: same as tasks
    rounds: int = 2
    samples: int = 8  # K samples per train task per round
    temperature: float = 0.7
    eval_samples: Optional[int] = None  # samples per heldout task for pass@k; None: samples
    per_task_cap: int = 2
    mask_errors: bool = False
    continue_adapter: bool = False
    limit: Optional[int] = None  # N tasks of each split, spread evenly over families (quick runs)
    max_steps: Optional[int] = None  # LoopConfig's field (tightens the tasks' own limit); None: its default
    max_reply_tokens: Optional[int] = None  # LoopConfig's field; None: its default
    concurrency: int = 4
    seed: int = 0
    cluster: Optional[str] = None  # a Ray address: the evals run their attempts on its nodes
    # Issue 28 (lora/curriculum.py). budget None: today's loop, `samples` attempts on every train task.
    budget: Optional[int] = None  # train attempts per round, spread by measured solve rate
    explore_share: float = 0.2  # at most this share of the budget on never-solved tasks
    curriculum: bool = False  # pool by difficulty: saturated tasks leave, harder ones enter
    start_difficulty: int = 2  # the curriculum's first level
    hints: bool = False  # never-solved tasks: half their attempts start from a hint (trained without it)
    stop_when: str = "no_new_task"  # or "no_improvement": neither held-out nor train solve rate rose
    audit_runs: list[str] = field(default_factory=list)  # more runs for the audit (e.g. a null agent's)
    sft: SFTConfig = field(default_factory=SFTConfig)

    def identity(self) -> dict:
        """The settings a resumed run must share with the original (rounds may grow, speed may change).
        Settings added later are left out at their defaults, so runs made before them still resume."""
        d = asdict(self)
        for k in ("out", "rounds", "concurrency", "cluster"):
            d.pop(k)
        for k, default in LATER_DEFAULTS.items():
            if d.get(k) == default:
                d.pop(k)
        d["sft"] = {k: v for k, v in d["sft"].items() if k not in ("device", "log_every")}
        return d


def config_from(preset: Optional[str] = None, **overrides: Any) -> TrainConfig:
    """A TrainConfig from a preset name and explicit settings (None values are ignored);
    `sft` may be a dict of SFTConfig fields that override the preset's."""
    base: dict[str, Any] = {}
    if preset:
        if preset not in PRESETS:
            raise UserError(f"unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
        base = json.loads(json.dumps(PRESETS[preset]))
    sft = dict(base.pop("sft", {}))
    sft.update({k: v for k, v in (overrides.pop("sft", None) or {}).items() if v is not None})
    base.update({k: v for k, v in overrides.items() if v is not None})
    for need in ("model", "tasks", "out"):
        if not base.get(need):
            raise UserError(f"train needs --{need} (or a --preset that sets it)")
    if base.get("stop_when", "no_new_task") not in STOP_RULES:
        raise UserError(f"stop_when must be one of {', '.join(STOP_RULES)} (got {base['stop_when']!r})")
    known = {f.name for f in fields(SFTConfig)}
    unknown = set(sft) - known
    if unknown:
        raise UserError(f"unknown SFT setting(s) {sorted(unknown)}; known: {sorted(known)}")
    base["out"] = Path(base["out"])
    return TrainConfig(sft=SFTConfig(**sft), **base)


def check_config(out: Path, cfg: TrainConfig) -> None:
    """Writes cfg's identity to out/config.json, or refuses to resume a run made with other settings."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.json"
    mine = json.loads(json.dumps(cfg.identity(), default=str))
    if path.exists():
        theirs = json.loads(path.read_text(encoding="utf-8"))
        diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if diff:
            k = diff[0]
            raise UserError(
                f"{out} holds a train run with other settings ({k}: {theirs.get(k)!r} there, "
                f"{mine.get(k)!r} now); use another --out or the same settings to resume"
            )
    else:
        write_json_atomic(path, mine)  # atomic: a crash leaves no half of it
