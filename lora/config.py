"""The settings of `harness train` (lora/train.py): TrainConfig and SFTConfig (each field's default and help
written once: `harness train` makes its options from them), the named presets, and the checks on both
(unknown settings, and a resume with settings other than the run folder's)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

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


# Settings added after the first runs: left out of identity() at their defaults, so those runs still resume.
LATER_SETTINGS = (
    "budget",
    "explore_share",
    "curriculum",
    "start_difficulty",
    "hints",
    "stop_when",
    "audit_runs",
    "heldout_families",
    "family_seed",
    "cheat_probes",
    "student",
    "method",
    "pg",
)
STOP_RULES = ("no_new_task", "no_improvement")
METHODS = ("rs", "grpo")  # rejection sampling (lora/train.py), group-relative policy gradient (lora/grpo.py)
# Issue 28's loop: the same model, limits and SFT settings as rft-smollm2, on the whole family pool
# (difficulty 1-4), with a fixed budget per round spread by solve rate, a curriculum, hints, and a
# stop when the train tasks show no improvement (held-out never steers).
PRESETS["rft-curriculum"] = {
    **PRESETS["rft-smollm2"],
    "tasks": "builtin",
    "heldout": "builtin",
    "rounds": 4,
    "budget": 192,
    "curriculum": True,
    "hints": True,
    # SmolLM2's frontier on this pool is a handful of tasks, and the never-solved families are reached
    # only through hinted attempts: half of each round explores (the first full run, at 20%, gave 16
    # attempts to 16 never-solved tasks and 68 to four it nearly always solved)
    "explore_share": 0.5,
    "stop_when": "no_improvement",
}
# The policy-gradient mode at smoke size (tests/lora/test_grpo.py): rft-smollm2's model and reply length,
# one round of groups of 4 on 2 train tasks, one optimiser step; the measuring evals at their smallest (one
# sampled attempt a held-out task, one cheat probe); 3 turns an attempt (create-file takes two: the
# command, then submit), as the failed attempts' turns were most of its time.
PRESETS["grpo-smoke"] = {
    **PRESETS["rft-smollm2"],
    "method": "grpo",
    "max_steps": 3,
    "rounds": 1,
    "samples": 4,
    "eval_samples": 1,
    "cheat_probes": 1,
    "limit": 2,
    "concurrency": 4,
    "sft": {**PRESETS["rft-smollm2"]["sft"], "max_steps": 1, "grad_accum": 4},
}


def _help(text: str, **more: Any) -> dict:
    return {"metadata": {"help": text, **more}}


@dataclass
class SFTConfig:
    """LoRA fine-tuning settings (lora/sft.py); `harness train` gives --rank, --lr and --epochs."""

    # adapter
    rank: int = field(default=16, **_help("LoRA rank"))
    alpha: int = 32
    dropout: float = 0.05
    target_modules: Optional[list[str]] = None  # None: every nn.Linear except the output layer
    # optimisation
    lr: float = field(default=2e-4, **_help("learning rate"))
    weight_decay: float = 0.0
    epochs: int = field(default=2, **_help("epochs per round"))
    max_steps: Optional[int] = None  # optimizer steps; when set, epochs repeat until it is reached
    batch_tokens: int = 4096  # padded tokens per micro-batch (sequences grouped by length)
    grad_accum: int = 4  # micro-batches per optimizer step
    warmup_ratio: float = 0.05
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    max_grad_norm: float = 1.0
    max_seq_len: int = 8192  # longer examples are dropped, never truncated (the end holds the fix)
    seed: int = 0
    # speed; None = automatic (on for CUDA, off on the CPU)
    device: Optional[str] = None
    bf16: Optional[bool] = None
    checkpointing: Optional[bool] = None
    log_every: int = 10


@dataclass
class PGConfig:
    """Policy-gradient settings (lora/grpo.py, --method grpo); its optimiser settings are SFTConfig's."""

    clip_low: float = 0.2  # the ratio's clip range is [1 - clip_low, 1 + clip_high] (DAPO's asymmetric one)
    clip_high: float = 0.28
    kl: float = field(
        default=0.02, **_help("with --method grpo: weight of the KL penalty to the base model (0: none)")
    )


@dataclass
class TrainConfig:
    """`harness train`'s settings: the one place their defaults and help are written (lora/cli.py makes
    the options from these fields; a --preset's values come between the defaults and the flags)."""

    model: str = field(**_help("local model, e.g. local:smollm2-135m"))
    tasks: str = field(**_help("suite whose train split is sampled, e.g. builtin:easy"))
    out: Path = field(
        **_help("run folder; the same folder resumes", default_text="runs/train/<model>-<tasks>")
    )
    heldout: Optional[str] = field(
        default=None, **_help("suite whose heldout split is evaluated", default_text="--tasks")
    )
    rounds: int = field(default=2, **_help("training rounds"))
    samples: int = field(default=8, **_help("samples per train task per round", short="-k"))
    temperature: float = field(default=0.7, **_help("sampling temperature"))
    eval_samples: Optional[int] = field(
        default=None, **_help("samples per heldout task for pass@k", default_text="--samples")
    )
    per_task_cap: int = field(default=2, **_help("most trajectories kept per task, 0 = no cap"))
    mask_errors: bool = field(
        default=False, **_help("no loss on turns whose command failed", default_text=None)
    )
    continue_adapter: bool = field(
        default=False,
        **_help(
            "train each round on top of the previous adapter (default: from the base on all kept data)",
            flag="--continue",
            default_text=None,
        ),
    )
    limit: Optional[int] = field(
        default=None, **_help("use N tasks of each split, spread evenly over families")
    )
    max_steps: Optional[int] = None  # LoopConfig's field (tightens the tasks' own limit); None: its default
    max_reply_tokens: Optional[int] = None  # LoopConfig's field; None: its default
    concurrency: int = field(default=4, **_help("attempts in flight while sampling"))
    seed: int = field(default=0, **_help("seed for sampling and training"))
    cluster: Optional[str] = field(
        default=None,
        **_help(
            "run the evals' attempts on a Ray cluster (ray://HOST:PORT, HOST:PORT or auto)", metavar="ADDRESS"
        ),
    )
    # Issue 28 (lora/curriculum.py). budget None: today's loop, `samples` attempts on every train task.
    budget: Optional[int] = field(
        default=None,
        **_help(
            "train attempts per round, spread by each task's measured solve rate", default_text="K per task"
        ),
    )
    explore_share: float = field(default=0.2, **_help("with --budget: most of it on never-solved tasks"))
    curriculum: bool = field(
        default=False,
        **_help(
            "with --budget: sample tasks up to a difficulty level that rises as they get solved",
            default_text=None,
        ),
    )
    start_difficulty: int = 2  # the curriculum's first level
    hints: bool = field(
        default=False,
        **_help(
            "with --budget: half the attempts on never-solved tasks start from a hint (trained without it)",
            default_text=None,
        ),
    )
    stop_when: str = field(
        default="no_new_task",
        **_help(
            "no_new_task: a round solved no new train task; no_improvement: neither the train "
            "greedy pass@1 rose nor did the round's samples solve a new train task (train tasks only)",
            choices=STOP_RULES,
        ),
    )
    audit_runs: list[str] = field(
        default_factory=list,
        **_help(
            "runs whose attempts the task audit also reads (e.g. a null agent's); broken tasks are left out",
            nargs="+",
            metavar="RUN",
        ),
    )
    method: str = field(
        default="rs",
        **_help(
            "rs: fine-tune on the solved samples (rejection sampling); grpo: a clipped policy-gradient "
            "update from groups of K samples per task (lora/grpo.py)",
            choices=METHODS,
        ),
    )
    # Issue 40: honest splits, cheating per round, a scripted teacher.
    heldout_families: int = field(
        default=0,
        **_help(
            "hold out N whole families (spread over domains, chosen by --family-seed): never sampled or "
            "trained on, evaluated as the 'family' split (split.json names them)"
        ),
    )
    family_seed: int = field(default=0, **_help("seed of the choice of held-out families"))
    cheat_probes: int = field(
        default=4,
        **_help("impossible variants of train tasks sampled each round (a pass is a cheat); 0: none"),
    )
    student: Optional[str] = field(
        default=None,
        **_help(
            "with a replay: --model (a scripted or recorded teacher), the local model whose tokenizer "
            "records the replies' token ids and which is fine-tuned",
            metavar="MODEL",
        ),
    )
    sft: SFTConfig = field(default_factory=SFTConfig)
    pg: PGConfig = field(default_factory=PGConfig)

    def identity(self) -> dict:
        """The settings a resumed run must share with the original (rounds may grow, speed may change).
        Settings added later are left out at their defaults, so runs made before them still resume."""
        d = asdict(self)
        for k in ("out", "rounds", "concurrency", "cluster"):
            d.pop(k)
        defaults = asdict(TrainConfig(model="", tasks="", out=Path()))
        for k in LATER_SETTINGS:
            if d.get(k) == defaults[k]:
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
    pg = dict(base.pop("pg", {}))
    pg.update({k: v for k, v in (overrides.pop("pg", None) or {}).items() if v is not None})
    base.update({k: v for k, v in overrides.items() if v is not None})
    for need in ("model", "tasks", "out"):
        if not base.get(need):
            raise UserError(f"train needs --{need} (or a --preset that sets it)")
    if base.get("stop_when", "no_new_task") not in STOP_RULES:
        raise UserError(f"stop_when must be one of {', '.join(STOP_RULES)} (got {base['stop_when']!r})")
    if base.get("method", "rs") not in METHODS:
        raise UserError(f"method must be one of {', '.join(METHODS)} (got {base['method']!r})")
    if base.get("method") == "grpo" and base.get("hints"):
        raise UserError("--hints does not go with --method grpo: a hinted attempt is not the policy's sample")
    for name, cls, given in (("SFT", SFTConfig, sft), ("policy-gradient", PGConfig, pg)):
        known = {f.name for f in fields(cls)}
        unknown = set(given) - known
        if unknown:
            raise UserError(f"unknown {name} setting(s) {sorted(unknown)}; known: {sorted(known)}")
    base["out"] = Path(base["out"])
    return TrainConfig(sft=SFTConfig(**sft), pg=PGConfig(**pg), **base)


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


def local_spec(model: str) -> str:
    """The local model a `local:NAME` spec names; a UserError for a model train cannot fine-tune."""
    if not model.startswith("local:") or not model[len("local:") :]:
        raise UserError(
            f"train needs a local model (local:NAME, e.g. local:smollm2-135m), or a replay: teacher with "
            f"--student local:NAME; got {model!r}"
        )
    return model[len("local:") :]
