"""A training round's phases (lora/train.py runs them; --method grpo's data and update are lora/grpo.py's):
data  rejection sampling's kept attempts: the solved train samples so far, hinted ones rebuilt without
      their hint, as round_N/dataset.jsonl (_data_phase)
sft   a LoRA adapter trained on them (_sft_phase)
eval  the round's model measured (measure_evals: held-out and train, greedy and sampled, cheat probes),
      then the train samples the next round learns from: K of each task, or with a budget as many as
      its solve rate earns, some with hints (_train_samples, _allocate) (_eval_phase)
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Optional

from lora.backend import Backend
from lora.config import TrainConfig
from lora.curriculum import Allocation, allocate, hint_for, hinted_task, next_level
from lora.data import build_dataset, filter_attempts, read_dataset, strip_hint, write_dataset
from lora.round_metrics import _write_round_metrics
from lora.rundir import (
    _broken_tasks,
    _family,
    _train_runs,
    _write_json,
    mark_done,
    phase_done,
    read_split,
    spread,
)
from results import telemetry
from results.attempts import is_solved
from results.store import load_attempts
from results.task_audit import task_rates


def _data_phase(cfg: TrainConfig, out: Path, r: int, end_of_turn: Optional[int], encode=None) -> dict:
    """Keep solved attempts from the train samples so far (only the newest with continue_adapter).
    Hinted attempts are rebuilt without their hint (lora/data.strip_hint) first; tamper verdicts,
    exploit flags and the tasks the audit marks broken never enter."""
    rounds = [r - 1] if cfg.continue_adapter else list(range(r))
    attempts, hinted_keys, hint_lost, everything = _train_attempts(out, rounds, encode)
    broken = _broken_tasks(cfg.audit_runs, everything)  # unhinted attempts only
    kept, stats = filter_attempts(attempts, cfg.per_task_cap, exclude_tasks=broken, hinted=hinted_keys)
    stats.hint_not_rebuilt = hint_lost
    examples = build_dataset(kept, cfg.mask_errors, end_of_turn, hinted_keys)
    other = build_dataset(kept, not cfg.mask_errors, end_of_turn)  # the same data, masking the other way
    rd = out / f"round_{r}"
    rd.mkdir(parents=True, exist_ok=True)
    write_dataset(rd / "dataset.jsonl", examples)
    tasks = sorted({a.task_id for a in kept})
    unhinted = sorted({a.task_id for a in kept if a.key not in hinted_keys})
    before: set[str] = set()  # the tasks earlier rounds learnt from
    before_unhinted: set[str] = set()
    for i in range(1, r):
        d = phase_done(out / f"round_{i}", "data")
        before |= set(d["tasks"])
        before_unhinted |= set(d.get("unhinted_tasks", d["tasks"]))
    new = sorted(set(tasks) - before)
    info = {
        "filter": asdict(stats),
        "excluded": {
            "tamper": stats.tamper,
            "flagged": stats.flagged,
            "broken_task": stats.broken_task,
            "hint_not_rebuilt": stats.hint_not_rebuilt,
        },
        "broken_tasks": sorted(broken),
        "examples": len(examples),
        "target_tokens": sum(e.n_targets for e in examples),
        "hinted_examples": sum(e.hinted for e in examples),
        "hinted_target_tokens": sum(e.n_targets for e in examples if e.hinted),
        "appended_target_tokens": sum(e.appended_targets for e in examples),  # end-of-turn the harness added
        "mask_errors": cfg.mask_errors,
        "target_tokens_other_masking": sum(e.n_targets for e in other),
        "tasks": tasks,
        "unhinted_tasks": unhinted,
        "new_tasks": new,
        "new_unhinted_tasks": sorted(set(unhinted) - before_unhinted),
        "hinted_kept": stats.hinted,
        "from_rounds": rounds,
        "end_of_turn": end_of_turn,
    }
    if not examples:
        info["stop"] = "no solved train attempt with token ids to learn from"
    elif r >= 2 and not new and cfg.stop_when == "no_new_task":
        info["stop"] = f"round {r - 1} solved no new train task"
    return mark_done(rd, "data", info)


def _train_attempts(out: Path, rounds: list[int], encode: Any) -> tuple[list, set[str], int, list]:
    """The train samples of `rounds`: (the attempts to filter, hinted ones rebuilt without their hint;
    the keys of those; how many solved hinted attempts could not be rebuilt; the unhinted attempts)."""
    attempts, hinted_keys, hint_lost = [], set(), 0
    everything = []
    for i in rounds:
        ev = phase_done(out / f"round_{i}", "eval")
        hints = ev.get("hints", {})
        for name, run_dir in _train_runs(ev).items():
            for a in load_attempts(Path(run_dir)):
                if "hinted" not in name:
                    everything.append(a)
                    attempts.append(a)
                    continue
                plain = strip_hint(a, hints.get(a.task_id, ""), encode) if encode else None
                if plain is None:
                    hint_lost += is_solved(a, strict=True)
                    continue
                attempts.append(plain)
                hinted_keys.add(plain.key)
    return attempts, hinted_keys, hint_lost, everything


def _sft_phase(cfg: TrainConfig, backend: Backend, out: Path, r: int, log: Callable[[str], None]) -> dict:
    rd = out / f"round_{r}"
    examples = read_dataset(rd / "dataset.jsonl")
    continue_from = out / f"round_{r - 1}" / "adapter" if cfg.continue_adapter and r >= 2 else None
    log(
        f"train: round {r}: fine-tuning on {len(examples)} sequences"
        + (f" on top of {continue_from}" if continue_from else " from the base model")
    )
    stats = backend.fine_tune(
        cfg.model,
        examples,
        replace(cfg.sft, seed=cfg.sft.seed + 1000 * cfg.seed + r),  # --seed varies the training too
        rd / "adapter",
        continue_from,
    )
    return mark_done(rd, "sft", dict(stats))


def eval_config(
    cfg: TrainConfig, samples: int, temperature: float, out: Path, adapter: Optional[Path], seed: int
):
    """The EvalConfig of one of a round's evals: the model (with the round's adapter), its samples at its
    temperature, the train run's limits, concurrency and cluster."""
    from agent.config import LoopConfig
    from evaluators.run.config import EvalConfig

    limits = {
        k: v for k, v in (("max_steps", cfg.max_steps), ("max_reply_tokens", cfg.max_reply_tokens)) if v
    }
    # the runner keeps the tighter of these and the task's own limits
    loop = LoopConfig(**limits, task_wall_time=False, wall_time=1800.0) if limits else LoopConfig()
    return EvalConfig(
        model=cfg.model,
        model_options={"adapter": str(adapter)} if adapter and not cfg.student else {},  # a teacher has none
        loop=replace(loop, temperature=temperature, seed=seed),
        samples=samples,
        concurrency=cfg.concurrency,
        cluster=cfg.cluster,
        out=out,
    )


def measure_evals(cfg: TrainConfig) -> dict[str, tuple[str, int, float]]:
    """A round's evals that measure its model, before the train samples: name -> (split, samples,
    temperature)."""
    evals = {
        "heldout-greedy": ("heldout", 1, 0.0),
        "heldout-sample": ("heldout", cfg.eval_samples or cfg.samples, cfg.temperature),
        "train-greedy": ("train", 1, 0.0),
    }
    if cfg.heldout_families:  # whole families never trained on
        evals["family-greedy"] = ("family", 1, 0.0)
    if cfg.cheat_probes:  # impossible variants of train tasks, at the sampling temperature: a pass is a cheat
        evals["impossible-sample"] = ("impossible", 1, cfg.temperature)
    return evals


def cheat_probes(cfg: TrainConfig, backend: Backend, train_tasks: list) -> list:
    """The round's cheat probes: impossible variants of cfg.cheat_probes train tasks (spread over their
    families; tasks with no variant are passed over), the same every round."""
    variants = {t.id: v for t in train_tasks if cfg.cheat_probes and (v := backend.impossible(t)) is not None}
    return [variants[t.id] for t in spread([t for t in train_tasks if t.id in variants], cfg.cheat_probes)]


def _eval_phase(
    cfg: TrainConfig,
    backend: Backend,
    out: Path,
    r: int,
    adapter: Optional[Path],
    train_tasks: list,
    heldout_tasks: list,
    log: Callable[[str], None],
) -> dict:
    rd = out / f"round_{r}"
    rd.mkdir(parents=True, exist_ok=True)
    held = set(read_split(out).get("heldout_families", []))
    tasks_of = {
        "heldout": [t for t in heldout_tasks if _family(t) not in held],
        "family": [t for t in heldout_tasks if _family(t) in held],
        "train": train_tasks,
        "impossible": cheat_probes(cfg, backend, train_tasks),
    }
    families = {t.id: _family(t) or t.id for ts in tasks_of.values() for t in ts}
    runs: dict[str, tuple[Path, int, float]] = {}
    seconds: dict[str, float] = {}

    def one(name: str, tasks: list, samples: int, temperature: float) -> None:
        if name.startswith("train") and any(_family(t) in held for t in tasks):
            raise RuntimeError(f"{name}: a held-out family's task would be sampled for training")  # a bug
        log(f"train: round {r}: eval {name} ({len(tasks)} tasks x {samples} at t={temperature:g})")
        phase = "sample" if name == "train-sample" else "eval"  # the train samples feed the next round
        attrs = {"harness.train.round": r, "harness.train.run": name, "harness.samples": samples}
        started = time.monotonic()
        with telemetry.span(f"train {phase}", attrs):
            run_dir = backend.run_eval(
                eval_config(cfg, samples, temperature, rd / "eval" / name, adapter, seed=cfg.seed + r), tasks
            )
        seconds[name] = time.monotonic() - started
        runs[name] = (Path(run_dir), samples, temperature)

    for name, (split, samples, temperature) in measure_evals(cfg).items():
        if tasks_of[split]:  # no cheat probe among fake tasks, say
            one(name, tasks_of[split], samples, temperature)
    allocation, hints = _train_samples(cfg, out, r, train_tasks, runs, one, log)
    _write_round_metrics(out, r, adapter, runs, seconds, allocation, families)
    return mark_done(rd, "eval", {"runs": {k: str(v[0]) for k, v in runs.items()}, "hints": hints})


def _train_samples(
    cfg: TrainConfig,
    out: Path,
    r: int,
    train_tasks: list,
    runs: dict[str, tuple[Path, int, float]],
    one: Callable[[str, list, int, float], None],
    log: Callable[[str], None],
) -> tuple[Optional[Any], dict[str, list[dict]]]:
    """The train samples the next round learns from, run with `one`: K of every task, or with a budget
    as many per task as its solve rate earns (some with hints). Returns (the allocation, the hints)."""
    if cfg.budget is None:  # today's loop: K samples of every train task (also the next round's samples)
        one("train-sample", train_tasks, cfg.samples, cfg.temperature)
        return None, {}
    allocation, hints = _allocate(cfg, out, r, train_tasks, runs["train-greedy"][0], log)
    by_id = {t.id: t for t in train_tasks}
    counts = sorted(set(allocation.plain.values()))
    if counts == [cfg.samples] and not allocation.hinted and len(allocation.plain) == len(train_tasks):
        one("train-sample", train_tasks, cfg.samples, cfg.temperature)  # uniform: today's run, same name
    else:
        for c in counts:
            group = [by_id[t] for t, n in allocation.plain.items() if n == c]
            one(f"train-sample-x{c}", group, c, cfg.temperature)
        for c in sorted(set(allocation.hinted.values())):
            group = [hinted_task(by_id[t], hints[t]) for t, n in allocation.hinted.items() if n == c]
            one(f"train-hinted-x{c}", group, c, cfg.temperature)
    _write_json(out / f"round_{r}" / "allocation.json", allocation.summary())
    return allocation, hints


def _allocate(
    cfg: TrainConfig, out: Path, r: int, train_tasks: list, greedy_run: Path, log: Callable[[str], None]
) -> tuple[Allocation, dict[str, list[dict]]]:
    """This round's allocation of cfg.budget (lora/curriculum.py), from the measured rates: this
    round's greedy run and every earlier round's train samples (unhinted): a task only hinted last
    round keeps the record of its earlier failures, and is not taken for one never measured."""
    measured = list(load_attempts(greedy_run))
    level = cfg.start_difficulty if cfg.curriculum else None
    solved_ever: set[str] = set()
    successes: dict[str, list] = defaultdict(list)
    family = {t.id: getattr(t, "family", "") or "" for t in train_tasks}
    for i in range(r):
        ev = phase_done(out / f"round_{i}", "eval")
        for name, run_dir in _train_runs(ev).items():
            if "hinted" in name:
                continue
            for a in load_attempts(Path(run_dir)):
                measured.append(a)
                if is_solved(a, strict=True):
                    solved_ever.add(a.task_id)
                    successes[family.get(a.task_id, "")].append(a)
        saved = out / f"round_{i}" / "allocation.json"
        if cfg.curriculum and saved.exists():
            previous = json.loads(saved.read_text()).get("level")
            level = previous if previous is not None else level
    top = max(getattr(t, "difficulty", 1) for t in train_tasks)
    if cfg.curriculum and r >= 1:
        pool = [t for t in train_tasks if getattr(t, "difficulty", 1) <= level]
        level = next_level(level, pool, solved_ever, top)
    while (
        level is not None
        and level < top
        and not any(getattr(t, "difficulty", 1) <= level for t in train_tasks)
    ):
        level += 1  # nothing at this level among the train tasks (a small --limit): start where there is
    pool = [t for t in train_tasks if level is None or getattr(t, "difficulty", 1) <= level]
    rates = task_rates(measured)
    alloc = allocate([t.id for t in pool], rates, cfg.budget, cfg.explore_share, cfg.hints)
    alloc.level = level
    alloc.left_out = [t.id for t in train_tasks if t not in pool]
    hints: dict[str, list[dict]] = {}
    for t in pool:
        if t.id in alloc.hinted:
            example = hint_for(t, successes, train_tasks)
            if example:
                hints[t.id] = example
            else:  # no hint to give: its attempts run plain
                alloc.plain[t.id] = alloc.plain.get(t.id, 0) + alloc.hinted.pop(t.id)
    summary = alloc.summary()
    log(
        f"train: round {r}: {summary['total']} attempts"
        + (f", curriculum level {level}" if level is not None else "")
        + ": "
        + ", ".join(
            f"{k} {v['tasks']} tasks {v['attempts']} ({v['hinted']} hinted)"
            for k, v in summary["by_kind"].items()
        )
    )
    return alloc, hints
