"""Rejection-sampling fine-tuning (expert iteration) of a local model with LoRA.

Round 0 evaluates the base model. Round r >= 1:
  data  keep the solved train attempts sampled so far (lora/data.py), build dataset.jsonl
  sft   train a LoRA adapter: from the base on the union of kept trajectories (ReST-EM), or, with
        continue_adapter, on top of the previous adapter on the newest ones only
  eval  with the new adapter: heldout and train tasks, pass@1 at temperature 0 and pass@k at the
        sampling temperature, with bootstrap CIs and the change from round 0
The eval's K samples of the train tasks at the sampling temperature are also the next round's samples
(same model, tasks, K and temperature), so sampling is never run twice. The loop stops early when a
round's samples solve no train task that earlier rounds had not solved.

Layout of the run folder (re-running with the same folder resumes after the last finished phase;
each phase writes round_N/<phase>.done.json atomically when it is finished):
  config.json                the settings (lora/config.py); a resume with other settings is refused
  rounds.jsonl               append-only rows {round, split, metric, value, ci_low, ci_high}
                             (results/rounds.py)
  round_N/eval/<run>/        the eval runs (attempts.jsonl): heldout-greedy, heldout-sample,
                             train-greedy, train-sample
  round_N/dataset.jsonl, round_N/adapter/, round_N/metrics.json
  stopped.json               why and when the loop stopped early
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

from lora.config import TrainConfig, check_config
from lora.data import build_dataset, filter_attempts, read_dataset, write_dataset
from lora.sft import SFTConfig
from results import telemetry
from results.errors import UserError
from results.jsonl import write_json_atomic
from results.metrics import bootstrap_ci, per_task_pass
from results.rounds import ROUNDS_FILE, append_rounds, load_rounds
from results.store import load_attempts

# ---------------------------------------------------------------- what train needs from the rest of harness


@dataclass
class Backend:
    """The three operations the loop uses. The defaults call the runner, the task loader and the
    local model; tests pass fakes."""

    load_tasks: Callable[[str, str], list]  # (suite spec, split) -> [Task]
    # (model, tasks, *, samples, temperature, out_dir, adapter, seed, concurrency, limits) -> run dir
    run_eval: Callable[..., Path]
    fine_tune: Callable[..., dict]  # (model, examples, sft_cfg, out_dir, continue_from) -> stats
    end_of_turn: Callable[[str], Optional[int]] = lambda model: None  # model -> its end-of-turn token id


def _load_tasks(spec: str, split: str) -> list:
    from tasks.loader import load_suite

    return list(load_suite(spec, split=split))


def _run_eval(
    model: str,
    tasks: list,
    *,
    samples: int,
    temperature: float,
    out_dir: Path,
    adapter: Optional[Path],
    seed: int,
    concurrency: int,
    limits: dict,
    cluster: Optional[str] = None,
) -> Path:
    from evaluators.runner import run_eval
    from lora.sft import free_memory

    options = {"adapter": str(adapter)} if adapter else None
    extra = {}
    if limits:  # LoopConfig fields; the runner keeps the tighter of these and the task's own limits
        from agent.config import LoopConfig

        extra["loop"] = LoopConfig(**limits, task_wall_time=False, wall_time=1800.0)
    resume = (Path(out_dir) / "manifest.json").exists()  # an interrupted run of this phase: finish it
    run_dir = asyncio.run(
        run_eval(
            model,
            tasks,
            samples=samples,
            temperature=temperature,
            out_dir=out_dir,
            concurrency=concurrency,
            resume=resume,
            seed=seed,
            model_options=options,
            cluster=cluster,
            **extra,
        )
    )
    free_memory()  # the runner's model copy is gone; give its memory back before training
    return Path(run_dir)


def _fine_tune(
    model: str, examples: list, cfg: SFTConfig, out_dir: Path, continue_from: Optional[Path]
) -> dict:
    from agent.models.local_loading import load_hf
    from lora.sft import free_memory, prepare_model, save_adapter, train

    base, _tokenizer = load_hf(local_spec(model))
    peft_model = prepare_model(base, cfg, continue_from=continue_from)
    result = train(peft_model, examples, cfg)
    if result.steps:
        save_adapter(peft_model, out_dir)
    del peft_model, base
    free_memory()
    return result.summary()


def _end_of_turn(model: str) -> Optional[int]:
    """The token the chat template closes an assistant turn with (a GGUF model's tokenizer is on disk
    once the round-0 eval has loaded it)."""
    from agent.models.local_loading import end_of_turn_id

    return end_of_turn_id(local_spec(model))


def default_backend(cluster: Optional[str] = None) -> Backend:
    return Backend(
        load_tasks=_load_tasks,
        run_eval=partial(_run_eval, cluster=cluster),
        fine_tune=_fine_tune,
        end_of_turn=_end_of_turn,
    )


def local_spec(model: str) -> str:
    if not model.startswith("local:") or not model[len("local:") :]:
        raise UserError(f"train needs a local model (local:NAME, e.g. local:smollm2-135m); got {model!r}")
    return model[len("local:") :]


# ---------------------------------------------------------------- phase markers


def _write_json(path: Path, data: Any) -> None:
    # atomic: a crash leaves the old file or none, never half of one
    write_json_atomic(path, json.loads(json.dumps(data, default=str)))


def phase_done(round_dir: Path, phase: str) -> Optional[dict]:
    """The info written when `phase` of this round finished, or None if it has not."""
    p = round_dir / f"{phase}.done.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None


def mark_done(round_dir: Path, phase: str, info: dict) -> dict:
    round_dir.mkdir(parents=True, exist_ok=True)
    _write_json(round_dir / f"{phase}.done.json", info)
    return info


# ---------------------------------------------------------------- metrics


def metric_name(k: int, temperature: float) -> str:
    return "pass@1" if temperature == 0 else f"pass@{k}_t{temperature:g}"


def summarize_runs(runs: dict[str, tuple[Path, int, float]], base: Optional[dict] = None) -> dict:
    """{split: {metric: {...}}} for each eval run: pass@1 at temperature 0; pass@1 (the mean solved rate,
    the estimate with the least variance) and pass@K at the sampling temperature. With `base` (round 0's),
    each metric's change and its paired bootstrap CI over tasks."""
    out: dict[str, dict] = defaultdict(dict)
    for name, (run_dir, samples, temperature) in runs.items():
        split = name.split("-")[0]
        attempts = load_attempts(run_dir)
        for k in sorted({1, samples} if temperature > 0 else {1}):
            metric = metric_name(k, temperature)
            # strict: a task counts as solved as it does for training (lora/data.py); infra errors are not
            # samples
            per_task = per_task_pass(attempts, k, strict=True)
            values = [per_task[t] for t in sorted(per_task)]
            lo, hi = bootstrap_ci(values)
            m = {
                "value": sum(values) / len(values) if values else float("nan"),
                "ci_low": lo,
                "ci_high": hi,
                "n_tasks": len(values),
                "n_errors": sum(a.status == "error" for a in attempts),
                "solved_tasks": sorted(t for t, v in per_task.items() if v > 0),
                "per_task": per_task,
            }
            b = (base or {}).get(split, {}).get(metric)
            if b:
                common = sorted(set(per_task) & set(b["per_task"]))
                diffs = [per_task[t] - b["per_task"][t] for t in common]
                m["base"] = b["value"]
                m["delta"] = sum(diffs) / len(diffs) if diffs else float("nan")
                m["delta_ci_low"], m["delta_ci_high"] = bootstrap_ci(diffs)
            out[split][metric] = m
    return dict(out)


# ---------------------------------------------------------------- the loop


def run(cfg: TrainConfig, backend: Optional[Backend] = None, log: Callable[[str], None] = print) -> Path:
    """Run (or resume) the rounds of `cfg` in cfg.out. Returns the run folder."""
    backend = backend or default_backend(cfg.cluster)
    local_spec(cfg.model)
    if cfg.cluster:  # no Ray or a bad address: said before anything is written
        from evaluators.cluster import check_address, import_ray

        check_address(cfg.cluster), import_ray()
    out = Path(cfg.out)
    check_config(out, cfg)
    stopped = out / "stopped.json"
    if stopped.exists():
        log(f"train: {out} already stopped: {json.loads(stopped.read_text())['reason']}")
        return out

    train_tasks = spread(backend.load_tasks(cfg.tasks, "train"), cfg.limit)
    heldout_tasks = spread(backend.load_tasks(cfg.heldout or cfg.tasks, "heldout"), cfg.limit)
    if not train_tasks:
        raise UserError(f"--tasks {cfg.tasks}: no tasks in its train split")
    if not heldout_tasks:
        raise UserError(f"--heldout {cfg.heldout or cfg.tasks}: no tasks in its heldout split")
    log(
        f"train: {len(train_tasks)} train tasks, {len(heldout_tasks)} heldout tasks, "
        f"up to {cfg.rounds} rounds, "
        f"K={cfg.samples} at t={cfg.temperature:g}, in {out}"
    )

    for r in range(cfg.rounds + 1):
        rd = out / f"round_{r}"
        adapter: Optional[Path] = None
        with telemetry.span(
            f"train round {r}", {"harness.train.round": r, "gen_ai.request.model": cfg.model}
        ) as rs:
            if r >= 1:
                with telemetry.span("train data", {"harness.train.round": r}) as span:
                    data = phase_done(rd, "data") or _data_phase(cfg, out, r, backend.end_of_turn(cfg.model))
                    span.set(_flat("harness.data", data))
                if data.get("stop"):
                    _write_json(stopped, {"round": r, "reason": data["stop"]})
                    log(f"train: stopping before round {r}: {data['stop']}")
                    rs.set({"harness.train.stopped": data["stop"]})
                    break
                with telemetry.span("train sft", {"harness.train.round": r}) as span:
                    sft = phase_done(rd, "sft") or _sft_phase(cfg, backend, out, r, log)
                    span.set(_flat("harness.sft", sft))
                if not sft.get("steps"):
                    _write_json(stopped, {"round": r, "reason": "nothing to train on"})
                    rs.set({"harness.train.stopped": "nothing to train on"})
                    break
                adapter = rd / "adapter"
            if not phase_done(rd, "eval"):
                _eval_phase(cfg, backend, out, r, adapter, train_tasks, heldout_tasks, log)
            if (rd / "metrics.json").exists():
                rs.set(_flat("harness.metrics", json.loads((rd / "metrics.json").read_text())["metrics"]))
            telemetry.event("train_round_finished", round=r, out=str(out))
    log(summary_table(out))
    return out


def _flat(prefix: str, info: dict) -> dict:
    """A phase's numbers and names as span attributes: prefix.key(.subkey...)."""
    out: dict = {}
    for k, v in info.items():
        if isinstance(v, dict):
            out.update(_flat(f"{prefix}.{k}", v))
        elif isinstance(v, (int, float, str, bool)):
            out[f"{prefix}.{k}"] = v
    return out


def spread(tasks: list, n: Optional[int]) -> list:
    """The first `n` tasks taken round-robin over their families, so a small run still covers them all."""
    if n is None or n >= len(tasks):
        return list(tasks)
    families: dict[str, list] = defaultdict(list)
    for t in tasks:
        families[getattr(t, "family", "") or t.id].append(t)
    picked: list = []
    while len(picked) < n:
        for group in families.values():
            if group and len(picked) < n:
                picked.append(group.pop(0))
    return picked


def _data_phase(cfg: TrainConfig, out: Path, r: int, end_of_turn: Optional[int]) -> dict:
    """Keep solved attempts from the train samples so far (only the newest with continue_adapter)."""
    rounds = [r - 1] if cfg.continue_adapter else list(range(r))
    attempts = []
    for i in rounds:
        ev = phase_done(out / f"round_{i}", "eval")
        attempts += load_attempts(Path(ev["runs"]["train-sample"]))
    kept, stats = filter_attempts(attempts, cfg.per_task_cap)
    examples = build_dataset(kept, cfg.mask_errors, end_of_turn)
    rd = out / f"round_{r}"
    rd.mkdir(parents=True, exist_ok=True)
    write_dataset(rd / "dataset.jsonl", examples)
    tasks = sorted({a.task_id for a in kept})
    before: set[str] = set()
    for i in range(1, r):
        before |= set(phase_done(out / f"round_{i}", "data")["tasks"])
    new = sorted(set(tasks) - before)
    info = {
        "filter": asdict(stats),
        "examples": len(examples),
        "target_tokens": sum(e.n_targets for e in examples),
        "tasks": tasks,
        "new_tasks": new,
        "from_rounds": rounds,
        "end_of_turn": end_of_turn,
    }
    if not examples:
        info["stop"] = "no solved train attempt with token ids to learn from"
    elif r >= 2 and not new:
        info["stop"] = f"round {r - 1} solved no new train task"
    return mark_done(rd, "data", info)


def _sft_phase(cfg: TrainConfig, backend: Backend, out: Path, r: int, log: Callable[[str], None]) -> dict:
    rd = out / f"round_{r}"
    examples = read_dataset(rd / "dataset.jsonl")
    continue_from = out / f"round_{r - 1}" / "adapter" if cfg.continue_adapter and r >= 2 else None
    log(
        f"train: round {r}: fine-tuning on {len(examples)} sequences"
        + (f" on top of {continue_from}" if continue_from else " from the base model")
    )
    stats = backend.fine_tune(
        cfg.model, examples, replace(cfg.sft, seed=cfg.sft.seed + r), rd / "adapter", continue_from
    )
    return mark_done(rd, "sft", dict(stats))


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
    plan = {
        "heldout-greedy": (heldout_tasks, 1, 0.0),
        "heldout-sample": (heldout_tasks, cfg.eval_samples or cfg.samples, cfg.temperature),
        "train-greedy": (train_tasks, 1, 0.0),
        "train-sample": (train_tasks, cfg.samples, cfg.temperature),  # also the next round's samples
    }
    limits = {
        k: v for k, v in (("max_steps", cfg.max_steps), ("max_reply_tokens", cfg.max_reply_tokens)) if v
    }
    runs: dict[str, tuple[Path, int, float]] = {}
    for name, (tasks, samples, temperature) in plan.items():
        log(f"train: round {r}: eval {name} ({len(tasks)} tasks x {samples} at t={temperature:g})")
        phase = "sample" if name == "train-sample" else "eval"  # the train samples feed the next round
        attrs = {"harness.train.round": r, "harness.train.run": name, "harness.samples": samples}
        with telemetry.span(f"train {phase}", attrs):
            run_dir = backend.run_eval(
                cfg.model,
                tasks,
                samples=samples,
                temperature=temperature,
                out_dir=rd / "eval" / name,
                adapter=adapter,
                seed=cfg.seed + r,
                concurrency=cfg.concurrency,
                limits=limits,
            )
        runs[name] = (Path(run_dir), samples, temperature)
    base = json.loads((out / "round_0" / "metrics.json").read_text())["metrics"] if r >= 1 else None
    metrics = summarize_runs(runs, base)
    extra = {p: phase_done(rd, p) for p in ("data", "sft")} if r >= 1 else {}
    _write_json(
        rd / "metrics.json",
        {"round": r, "adapter": str(adapter) if adapter else None, "metrics": metrics, **extra},
    )
    append_rounds(out, r, metrics)
    return mark_done(rd, "eval", {"runs": {k: str(v[0]) for k, v in runs.items()}})


def summary_table(out: Path) -> str:
    if not (Path(out) / ROUNDS_FILE).exists():
        return "train: no finished round yet"
    rows = load_rounds(out)
    lines = [f"{'round':>5}  {'split':<8} {'metric':<16} {'value':>6}  95% CI"]
    for row in sorted(rows, key=lambda x: (x["split"], x["metric"], x["round"])):
        lines.append(
            f"{row['round']:>5}  {row['split']:<8} {row['metric']:<16} {row['value']:>6.3f}  "
            f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        )
    return "\n".join(lines)
