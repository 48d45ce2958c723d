"""Rejection-sampling fine-tuning (expert iteration) of a local model with LoRA.

Round 0 evaluates the base model. Round r >= 1:
  data  keep the solved train attempts sampled so far (lora/data.py), build dataset.jsonl
  sft   train a LoRA adapter: from the base on the union of kept trajectories (ReST-EM), or, with
        continue_adapter, on top of the previous adapter on the newest ones only
  eval  with the new adapter: heldout and train tasks, pass@1 at temperature 0 and pass@k at the
        sampling temperature, with bootstrap CIs and the change from round 0
With --method grpo, data and sft are lora/grpo.py's: groups of the previous round's samples, rewards,
advantages (rollouts.jsonl), and a clipped policy-gradient update of the policy's adapter.
The eval's K samples of the train tasks at the sampling temperature are also the next round's samples
(same model, tasks, K and temperature), so sampling is never run twice. The loop stops early when a
round's samples solve no train task that earlier rounds had not solved.

Layout of the run folder (re-running with the same folder resumes after the last finished phase;
each phase writes round_N/<phase>.done.json atomically when it is finished):
  config.json                the settings (lora/config.py); a resume with other settings is refused
  split.json                 the run's splits: the held-out families (--heldout-families; never sampled
                             or trained on, evaluated as split "family"), each split's task ids, and
                             each task's family (the clusters of the CIs)
  rounds.jsonl               append-only rows {round, split, metric, value, ci_low, ci_high}
                             (results/rounds.py)
  round_N/eval/<run>/        the eval runs (attempts.jsonl): heldout-greedy, heldout-sample,
                             train-greedy, family-greedy, impossible-sample (the cheat probes),
                             train-sample
  round_N/dataset.jsonl, round_N/adapter/, round_N/metrics.json
  stopped.json               why and when the loop stopped early
  best.json                  the round whose adapter is the run's result (best_round): the best train
                             greedy pass@1, so a last round that regressed is not what the run hands on
Nothing held out steers the run: the stop rules and best.json read train tasks only; held-out
instances and families are what the result is reported on. CIs resample task families (the cluster),
not instances (results.metrics.cluster_bootstrap_ci).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

from lora.config import TrainConfig, check_config
from lora.curriculum import Allocation, allocate, hint_for, hinted_task, next_level
from lora.data import build_dataset, filter_attempts, read_dataset, strip_hint, write_dataset
from lora.sft import SFTConfig
from results import telemetry
from results.attempts import is_solved
from results.errors import UserError
from results.jsonl import write_json_atomic
from results.metrics import cluster_bootstrap_ci, per_task_pass, record_flags, task_rates
from results.rounds import ROUNDS_FILE, append_rounds, append_task_rates, load_rounds
from results.store import load_attempts

# ---------------------------------------------------------------- what train needs from the rest of harness


@dataclass
class Backend:
    """The three operations the loop uses. The defaults call the runner, the task loader and the
    local model; tests pass fakes."""

    load_tasks: Callable[[str, str], list]  # (suite spec, split) -> [Task]
    run_eval: Callable[
        [Any, list], Path
    ]  # (evaluators.run.config.EvalConfig, tasks) -> run dir (eval_config)
    fine_tune: Callable[..., dict]  # (model, examples, sft_cfg, out_dir, continue_from) -> stats
    # task -> its impossible variant (tasks/impossible.py) or None: the round's cheat probes
    impossible: Callable[[Any], Any] = lambda task: None
    end_of_turn: Callable[[str], Optional[int]] = lambda model: None  # model -> its end-of-turn token id
    # model -> messages -> the prompt token ids the local model would see (rebuilding hinted attempts)
    encoder: Callable[[str], Optional[Callable[[list], list[int]]]] = lambda model: None
    # --method grpo's update: (model, rollouts, cfg, out_dir, continue_from) -> stats; None: lora/grpo.py's
    policy_update: Optional[Callable[..., dict]] = None


def _load_tasks(spec: str, split: str) -> list:
    from tasks.loader import load_suite

    return list(load_suite(spec, split=split))


def _run_eval(cfg: Any, tasks: list) -> Path:
    """runner.run_eval of one eval (cfg: an EvalConfig); an interrupted run of this phase is finished."""
    from evaluators.run.runner import run_eval
    from lora.sft import free_memory

    if (Path(cfg.out) / "manifest.json").exists():
        cfg = replace(cfg, resume=cfg.out)
    run_dir = asyncio.run(run_eval(cfg, tasks))
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


def _encoder(model: str) -> Optional[Callable[[list], list[int]]]:
    """LocalModel.encode from the tokenizer files alone (no weights loaded)."""
    from transformers import AutoTokenizer

    from agent.models.local import encode_messages
    from agent.models.local_loading import cache_dir_for, resolve

    kind, path, _ = resolve(local_spec(model))
    folder = path if kind == "hf" else cache_dir_for(local_spec(model))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError):
        return None
    return partial(encode_messages, tokenizer)


def _impossible(task: Any) -> Any:
    from tasks.impossible import make_variant

    return make_variant(task)[0]


def default_backend(student: Optional[str] = None) -> Backend:
    """The real operations. With a `student` (--student, a replay: --model), a scripted or recorded teacher
    samples and the student's tokenizer records its replies' token ids; the student is fine-tuned
    (lora/teacher.py)."""
    backend = Backend(
        load_tasks=_load_tasks,
        run_eval=_run_eval,
        fine_tune=_fine_tune,
        end_of_turn=_end_of_turn,
        encoder=_encoder,
        impossible=_impossible,
    )
    if student:
        from lora.teacher import teacher_backend

        return teacher_backend(backend, student)
    return backend


def local_spec(model: str) -> str:
    if not model.startswith("local:") or not model[len("local:") :]:
        raise UserError(
            f"train needs a local model (local:NAME, e.g. local:smollm2-135m), or a replay: teacher with "
            f"--student local:NAME; got {model!r}"
        )
    return model[len("local:") :]


def _check_models(cfg: TrainConfig) -> None:
    """The model that samples and the one that learns: a local model is both; a replay: teacher samples
    and --student learns."""
    if not cfg.student:
        local_spec(cfg.model)
        return
    local_spec(cfg.student)
    if not cfg.model.startswith("replay:"):
        raise UserError(
            f"--student goes with a replay: --model (a scripted or recorded teacher); got {cfg.model!r}"
        )
    if getattr(cfg, "method", "rs") != "rs":
        raise UserError(
            "--student goes with rejection sampling: a policy gradient needs the policy's own samples"
        )


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


def summarize_runs(
    runs: dict[str, tuple[Path, int, float]],
    base: Optional[dict] = None,
    families: Optional[dict[str, str]] = None,
) -> dict:
    """{split: {metric: {...}}} for each eval run: pass@1 at temperature 0; pass@1 (the mean solved rate,
    the estimate with the least variance) and pass@K at the sampling temperature. With `base` (round 0's),
    each metric's change and its paired bootstrap CI over tasks. Runs whose names share a prefix before
    "-x" (an allocated train-sample split by sample count: train-sample-x2, train-sample-x4) are pooled
    and give pass@1 only (their tasks had different K); hinted runs are not scored (a hint is help).
    The CIs resample `families` ({task id: family}; a task not in it is its own), not instances: a
    family's instances share a template and rise or fall together."""
    pooled: dict[str, tuple[list, int, float]] = {}
    for name, (run_dir, samples, temperature) in runs.items():
        if "hinted" in name:
            continue
        key, _, count = name.partition("-x")
        attempts, k, _t = pooled.setdefault(key, ([], samples, temperature))
        attempts += load_attempts(run_dir)
        if count:
            pooled[key] = (attempts, 1, temperature)
    out: dict[str, dict] = defaultdict(dict)
    for name, (attempts, samples, temperature) in pooled.items():
        split = name.split("-")[0]
        for k in sorted({1, samples} if temperature > 0 else {1}):
            metric = metric_name(k, temperature)
            # strict: a task counts as solved as it does for training (lora/data.py); infra errors are not
            # samples
            per_task = per_task_pass(attempts, k, strict=True)
            values = [per_task[t] for t in sorted(per_task)]
            lo, hi = cluster_bootstrap_ci(values, [(families or {}).get(t) or t for t in sorted(per_task)])
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
                m["delta_ci_low"], m["delta_ci_high"] = cluster_bootstrap_ci(
                    diffs, [(families or {}).get(t) or t for t in common]
                )
            out[split][metric] = m
    return dict(out)


# ---------------------------------------------------------------- the loop


def run(cfg: TrainConfig, backend: Optional[Backend] = None, log: Callable[[str], None] = print) -> Path:
    """Run (or resume) the rounds of `cfg` in cfg.out. Returns the run folder."""
    backend = backend or default_backend(cfg.student)
    _check_models(cfg)
    if cfg.cluster:  # no Ray or a bad address: said before anything is written
        from evaluators.run.cluster import check_address, import_ray

        check_address(cfg.cluster), import_ray()
    out = Path(cfg.out)
    check_config(out, cfg)
    stopped = out / "stopped.json"
    if stopped.exists():
        said = json.loads(stopped.read_text())
        if not (said.get("rounds_exhausted") and cfg.rounds > said.get("round", 0)):
            log(f"train: {out} already stopped: {said['reason']}")
            _keep_best(out, log)
            return out
        stopped.unlink()  # more rounds asked for than the run had: go on

    train_tasks, heldout_tasks = _train_and_heldout(cfg, backend, log)
    log(
        f"train: {len(train_tasks)} train tasks, {len(heldout_tasks)} heldout tasks, "
        f"up to {cfg.rounds} rounds, "
        + (f"K={cfg.samples}" if cfg.budget is None else f"{cfg.budget} attempts a round by solve rate")
        + f" at t={cfg.temperature:g}, in {out}"
    )
    for r in range(cfg.rounds + 1):
        if _round(cfg, backend, out, r, train_tasks, heldout_tasks, log):
            break
    else:
        _write_json(
            stopped,
            {
                "round": cfg.rounds,
                "reason": f"reached the last round ({cfg.rounds})",
                "rounds_exhausted": True,
            },
        )
    log(summary_table(out))
    _keep_best(out, log)
    return out


def best_round(out: Path) -> Optional[dict]:
    """The finished round whose model is the run's result: the highest train greedy pass@1 (over every
    train task); a round takes over only by beating every earlier one, as the stop rule asks (a tie keeps
    the earlier, smaller model). Held-out does not choose: it is what the result is reported on.
    None before round 0 has finished."""
    rows = load_rounds(out)
    train = {x["round"]: x["value"] for x in rows if x["split"] == "train" and x["metric"] == "pass@1"}
    held = {x["round"]: x for x in rows if x["split"] == "heldout" and x["metric"] == "pass@1"}
    family = {x["round"]: x["value"] for x in rows if x["split"] == "family" and x["metric"] == "pass@1"}
    if not train:
        return None
    r = max(train, key=lambda k: (train[k], -k))
    adapter = out / f"round_{r}" / "adapter"
    return {
        "round": r,
        "adapter": str(adapter) if r >= 1 and adapter.is_dir() else None,  # None: the base model
        "chosen_by": "train greedy pass@1",
        "train_greedy": train[r],
        "heldout_greedy": held[r]["value"] if r in held else None,
        "family_greedy": family.get(r),
        "last_round": max(train),
    }


def _keep_best(out: Path, log: Callable[[str], None]) -> None:
    best = best_round(out)
    if best is None:
        return
    _write_json(out / "best.json", best)
    held = "" if best["heldout_greedy"] is None else f", held-out greedy {best['heldout_greedy']:.3f}"
    if best.get("family_greedy") is not None:
        held += f", held-out families greedy {best['family_greedy']:.3f}"
    log(
        f"train: the result is round {best['round']} (train greedy pass@1 {best['train_greedy']:.3f}{held}): "
        + (best["adapter"] or "the base model: no adapter did as well")
        + ("" if best["round"] == best["last_round"] else f"; round {best['last_round']} did no better")
    )


def _family(task: Any) -> str:
    return getattr(task, "family", "") or ""


def _train_and_heldout(cfg: TrainConfig, backend: Backend, log: Callable[[str], None]) -> tuple[list, list]:
    """The train and heldout tasks (cfg.limit of each, spread), less the tasks the audit marks broken.
    With cfg.heldout_families, whole families are held out (tasks/family.choose_heldout_families): no
    task of theirs is a train task, and their heldout instances (cfg.limit, spread) come after the
    others in the heldout list, evaluated as split "family"; split.json names them."""
    from tasks.family import choose_heldout_families

    train_all = backend.load_tasks(cfg.tasks, "train")
    heldout_all = backend.load_tasks(cfg.heldout or cfg.tasks, "heldout")
    held = set(choose_heldout_families(train_all + heldout_all, cfg.heldout_families, cfg.family_seed))
    train_tasks = spread([t for t in train_all if _family(t) not in held], cfg.limit)
    heldout_tasks = spread([t for t in heldout_all if _family(t) not in held], cfg.limit)
    family_tasks = spread([t for t in heldout_all if _family(t) in held], cfg.limit)
    if held and not family_tasks:
        raise UserError(f"--heldout-families: the held-out families {sorted(held)} have no heldout tasks")
    if not train_tasks:
        raise UserError(f"--tasks {cfg.tasks}: no tasks in its train split")
    if not heldout_tasks:
        raise UserError(f"--heldout {cfg.heldout or cfg.tasks}: no tasks in its heldout split")
    broken = _broken_tasks(cfg.audit_runs)
    if broken:
        train_tasks = [t for t in train_tasks if t.id not in broken]
        log(
            f"train: leaving out {len(broken)} task(s) the audit of --audit-runs marks broken: "
            f"{sorted(broken)}"
        )
    _write_split(cfg, sorted(held), train_all + heldout_all, train_tasks, heldout_tasks, family_tasks)
    if held:
        log(f"train: holding out {len(held)} families ({len(family_tasks)} tasks): {', '.join(sorted(held))}")
    return train_tasks, heldout_tasks + family_tasks


SPLIT_FILE = "split.json"


def _write_split(
    cfg: TrainConfig, held: list[str], every: list, train: list, heldout: list, family: list
) -> None:
    """split.json: the held-out families (with their domains), each split's task ids and every task's
    family. Written once; a resume whose tasks would give other held-out families is refused."""
    path = Path(cfg.out) / SPLIT_FILE
    domain = {_family(t): getattr(t, "domain", "") for t in every if _family(t) in held}
    split = {
        "heldout_families": held,
        "family_seed": cfg.family_seed,
        "domains": {f: domain[f] for f in held},
        "train": [t.id for t in train],
        "heldout": [t.id for t in heldout],
        "family": [t.id for t in family],
        "families": {t.id: _family(t) or t.id for t in [*train, *heldout, *family]},
    }
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        if before.get("heldout_families") != held:
            raise UserError(
                f"{path}: the run held out {before.get('heldout_families')}, the tasks now give {held}; "
                "use another --out"
            )
        return
    _write_json(path, split)


def read_split(out: Path) -> dict:
    """The run's split.json ({} for runs made before it)."""
    path = Path(out) / SPLIT_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _round(
    cfg: TrainConfig,
    backend: Backend,
    out: Path,
    r: int,
    train_tasks: list,
    heldout_tasks: list,
    log: Callable[[str], None],
) -> bool:
    """Round r: (from round 1) data and SFT, then the eval of its adapter (round 0: the base model).
    A phase already done is not redone. True when the run stops here (stopped.json says why)."""
    from lora import grpo  # --method grpo's data and update phases (it imports this module)

    rd = out / f"round_{r}"
    stopped = out / "stopped.json"
    adapter: Optional[Path] = None
    with telemetry.span(
        f"train round {r}", {"harness.train.round": r, "gen_ai.request.model": cfg.model}
    ) as rs:
        if r >= 1:
            with telemetry.span("train data", {"harness.train.round": r}) as span:
                data = phase_done(rd, "data") or (
                    grpo.data_phase(cfg, out, r)
                    if cfg.method == "grpo"
                    else _data_phase(
                        cfg,
                        out,
                        r,
                        backend.end_of_turn(cfg.model),
                        backend.encoder(cfg.model) if cfg.hints else None,
                    )
                )
                span.set(_flat("harness.data", data))
            if data.get("stop"):
                _write_json(stopped, {"round": r, "reason": data["stop"]})
                log(f"train: stopping before round {r}: {data['stop']}")
                rs.set({"harness.train.stopped": data["stop"]})
                return True
            with telemetry.span("train sft", {"harness.train.round": r}) as span:
                sft = phase_done(rd, "sft") or (
                    grpo.update_phase(cfg, out, r, log, backend.policy_update or grpo.fine_tune)
                    if cfg.method == "grpo"
                    else _sft_phase(cfg, backend, out, r, log)
                )
                span.set(_flat("harness.sft", sft))
            if not sft.get("steps"):
                _write_json(stopped, {"round": r, "reason": "nothing to train on"})
                rs.set({"harness.train.stopped": "nothing to train on"})
                return True
            adapter = rd / "adapter"
        if not phase_done(rd, "eval"):
            _eval_phase(cfg, backend, out, r, adapter, train_tasks, heldout_tasks, log)
        if (rd / "metrics.json").exists():
            rs.set(_flat("harness.metrics", json.loads((rd / "metrics.json").read_text())["metrics"]))
        telemetry.event("train_round_finished", round=r, out=str(out))
        if r >= 1 and cfg.stop_when == "no_improvement":
            why = _no_improvement(out, r)
            if why:
                _write_json(stopped, {"round": r, "reason": why})
                log(f"train: stopping after round {r}: {why}")
                rs.set({"harness.train.stopped": why})
                return True
    return False


def _flat(prefix: str, info: dict) -> dict:
    """A phase's numbers and names as span attributes: prefix.key(.subkey...)."""
    out: dict = {}
    for k, v in info.items():
        if isinstance(v, dict):
            out.update(_flat(f"{prefix}.{k}", v))
        elif isinstance(v, (int, float, str, bool)):
            out[f"{prefix}.{k}"] = v
    return out


def _broken_tasks(runs: list[str], more: Optional[list] = None) -> set[str]:
    """Tasks the audit (results.metrics.audit_tasks) marks broken, over these runs' attempts and `more`."""
    from results.metrics import audit_tasks
    from results.store import find_attempt_files, iter_attempts

    attempts = [a for path in find_attempt_files(runs) for a in iter_attempts(path)] if runs else []
    attempts += more or []
    return {row.rate.task_id for row in audit_tasks(attempts) if row.broken} if attempts else set()


def _no_improvement(out: Path, r: int) -> Optional[str]:
    """Why the loop should stop after round r, from train tasks only (held-out is what the result is
    reported on, so it never steers): the train solve rate (greedy pass@1 over every train task: the
    sampled rate covers only the tasks the budget chose) did not beat the best of the earlier rounds,
    and round r's train samples solved no train task that earlier rounds' had not. Hinted samples count:
    a task solved only from a hint is new data the next round trains on (without the hint), and a rule
    that ignored them stopped the hinted loop before its hints ever reached the model. None: one of
    them moved."""
    rows = load_rounds(out)
    greedy = {x["round"]: x["value"] for x in rows if x["split"] == "train" and x["metric"] == "pass@1"}
    now, before = greedy.get(r), max((v for k, v in greedy.items() if k < r), default=None)
    if now is None or before is None or now > before:
        return None
    new = _solved_in_samples(out, r) - set().union(*(_solved_in_samples(out, i) for i in range(r)))
    if new:
        return None
    return (
        f"round {r} improved neither: train greedy pass@1 {now:.3f} <= best before {before:.3f}; "
        "its train samples solved no new train task"
    )


def _solved_in_samples(out: Path, r: int) -> set[str]:
    """The train tasks round r's train samples, hinted or not, solved (strictly, with no exploit flag)."""
    ev = phase_done(out / f"round_{r}", "eval") or {"runs": {}}
    return {
        a.task_id
        for run_dir in _train_runs(ev).values()
        for a in load_attempts(Path(run_dir))
        if is_solved(a, strict=True) and not record_flags(a)
    }


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


def _train_runs(ev: dict) -> dict[str, str]:
    """The train sample runs of an eval phase: train-sample, train-sample-xN, train-hinted-xN."""
    return {k: v for k, v in ev["runs"].items() if k.startswith(("train-sample", "train-hinted"))}


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


def _write_round_metrics(
    out: Path,
    r: int,
    adapter: Optional[Path],
    runs: dict[str, tuple[Path, int, float]],
    seconds: dict[str, float],
    allocation: Optional[Any],
    families: Optional[dict[str, str]] = None,
) -> None:
    """round_r/metrics.json (the round's metrics against round 0 with family-clustered CIs, each eval's
    figures, the train successes, the cheating signs), the task rates and the rounds table."""
    rd = out / f"round_{r}"
    base = json.loads((out / "round_0" / "metrics.json").read_text())["metrics"] if r >= 1 else None
    metrics = summarize_runs(runs, base, families)
    phases = {}
    cheating = {"impossible_attempts": 0, "impossible_solved": 0, "attempts": 0, "flagged": 0, "tamper": 0}
    for name, (run_dir, _, _) in runs.items():
        attempts = load_attempts(run_dir)
        for a in attempts:  # every attempt of the round, hinted ones included: a hack shows wherever it is
            if a.status == "error":
                continue
            cheating["attempts"] += 1
            cheating["flagged"] += bool(record_flags(a))
            cheating["tamper"] += a.reason == "tamper"
            cheating["impossible_attempts"] += a.impossible
            cheating["impossible_solved"] += a.impossible and is_solved(a)  # any pass of one is a cheat
        rates = task_rates(attempts)
        append_task_rates(out, r, name, rates.values())
        tokens = sum(len(s.completion_ids or ()) or s.completion_tokens for a in attempts for s in a.steps)
        phases[name] = {
            "attempts": len(attempts),
            "solved": sum(is_solved(a, strict=True) for a in attempts),
            "seconds": round(seconds[name], 1),
            "generated_tokens": tokens,
            "tokens_per_second": round(tokens / seconds[name], 2) if seconds[name] > 0 else None,
        }
    train_attempts = [k for k in runs if k.startswith(("train-sample", "train-hinted"))]
    successes = {
        "hinted": sum(phases[k]["solved"] for k in train_attempts if "hinted" in k),
        "unhinted": sum(phases[k]["solved"] for k in train_attempts if "hinted" not in k),
    }
    extra = {p: phase_done(rd, p) for p in ("data", "sft")} if r >= 1 else {}
    _write_json(
        rd / "metrics.json",
        {
            "round": r,
            "adapter": str(adapter) if adapter else None,
            "metrics": metrics,
            "phases": phases,
            "train_successes": successes,
            "cheating": cheating,
            "ci": "bootstrap over task families",
            "allocation": allocation.summary() if allocation else None,
            **extra,
        },
    )
    append_rounds(out, r, metrics)


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


def summary_table(out: Path) -> str:
    if not (Path(out) / ROUNDS_FILE).exists():
        return "train: no finished round yet"
    rows = load_rounds(out)
    lines = [f"{'round':>5}  {'split':<10} {'metric':<16} {'value':>6}  95% CI (over families)"]
    for row in sorted(rows, key=lambda x: (x["split"], x["metric"], x["round"])):
        lines.append(
            f"{row['round']:>5}  {row['split']:<10} {row['metric']:<16} {row['value']:>6.3f}  "
            f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        )
    return "\n".join(lines) + "\n\n" + cheating_table(out)


def cheating_table(out: Path) -> str:
    """Per round, greedy pass@1 beside the signs of cheating: impossible variants solved (each pass a
    cheat), attempts with exploit flags, tamper verdicts (over all the round's attempts), so a policy
    that learns to hack shows the round it starts."""
    greedy = {(x["round"], x["split"]): x["value"] for x in load_rounds(out) if x["metric"] == "pass@1"}
    lines = [
        f"{'round':>5}  {'train':>6} {'heldout':>7} {'family':>6}  {'impossible solved':>17}  "
        f"{'flagged':>9}  {'tamper':>9}"
    ]
    for r in sorted({k[0] for k in greedy}):
        path = out / f"round_{r}" / "metrics.json"
        c = json.loads(path.read_text()).get("cheating") if path.exists() else None
        if not c:
            continue
        cells = [f"{greedy[(r, s)]:.3f}" if (r, s) in greedy else "-" for s in ("train", "heldout", "family")]
        imp = f"{c['impossible_solved']}/{c['impossible_attempts']}" if c["impossible_attempts"] else "-"
        lines.append(
            f"{r:>5}  {cells[0]:>6} {cells[1]:>7} {cells[2]:>6}  {imp:>17}  "
            f"{c['flagged']:>4}/{c['attempts']:<4}  {c['tamper']:>4}/{c['attempts']:<4}"
        )
    return "\n".join(lines)
