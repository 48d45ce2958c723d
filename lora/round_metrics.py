"""A training round's metrics: each eval run's pass@1 and pass@K with family-clustered bootstrap CIs and the
change from round 0 (summarize_runs), round_N/metrics.json with the cheating signs and the rows of
rounds.jsonl (_write_round_metrics), and the tables `harness train` prints from them."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from lora.rundir import _write_json, phase_done
from results.attempts import is_solved
from results.metrics import cluster_bootstrap_ci, per_task_pass
from results.rounds import ROUNDS_FILE, append_rounds, append_task_rates, load_rounds
from results.store import load_attempts
from results.task_audit import record_flags, task_rates


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
