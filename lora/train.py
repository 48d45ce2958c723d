"""Rejection-sampling fine-tuning (expert iteration) of a local model with LoRA: the round loop (run).

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

This module owns the loop: the tasks it starts from, the rounds and their phase order, the stop rule after
a round (no_improvement) and the run's result (best.json). The phases themselves are lora/phases.py's, a
round's metrics and tables lora/round_metrics.py's, the phase markers and split.json lora/rundir.py's, and
what the loop calls on the rest of harness (Backend) lora/backend.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from lora.backend import Backend, _check_models, default_backend
from lora.config import TrainConfig, check_config
from lora.phases import _data_phase, _eval_phase, _sft_phase
from lora.round_metrics import summary_table
from lora.rundir import _broken_tasks, _family, _train_runs, _write_json, _write_split, phase_done, spread
from results import telemetry
from results.attempts import is_solved
from results.errors import UserError
from results.rounds import load_rounds
from results.store import load_attempts
from results.task_audit import record_flags

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
    from lora import grpo  # --method grpo's data and update phases

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


# ---------------------------------------------------------------- the stop rule and the run's result


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
