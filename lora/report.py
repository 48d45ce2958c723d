"""What finished `harness train` runs report beyond their own folders: each run's per-task verdicts as one
small file to keep in the repo (bench/figures/), and several seeds' runs aggregated from those files (mean
and spread over seeds, a family-clustered CI of the pooled change), so anyone can recompute a reported
table without the run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from results.attempts import is_solved
from results.jsonl import write_json_atomic
from results.metrics import cluster_bootstrap_ci, mean_and_spread
from results.store import load_attempts
from results.task_audit import record_flags

VERDICT_FIELDS = ("task_id", "sample", "solved", "flagged", "tamper", "impossible")
DATA_FIELDS = ("examples", "target_tokens", "hinted_examples", "hinted_target_tokens", "hinted_kept", "tasks")


def verdicts(out: Path) -> dict[str, Any]:
    """A finished run's record: its settings, split, result (best.json), each round's data counts and
    every eval attempt's verdict as a row of VERDICT_FIELDS (solved: strictly, as training counts it;
    None for an infra error, which no rate counts)."""
    from lora.rundir import phase_done, read_split

    out = Path(out)
    rounds: dict[str, Any] = {}
    r = 0
    while (ev := phase_done(out / f"round_{r}", "eval")) is not None:
        runs = {}
        for name, run_dir in sorted(ev["runs"].items()):
            runs[name] = sorted(
                [
                    a.task_id,
                    a.sample,
                    None if a.status == "error" else is_solved(a, strict=True),
                    bool(record_flags(a)),
                    a.reason == "tamper",
                    a.impossible,
                ]
                for a in load_attempts(Path(run_dir))
            )
        data = phase_done(out / f"round_{r}", "data") or {}
        counts = {k: (len(data[k]) if k == "tasks" else data[k]) for k in DATA_FIELDS if k in data}
        if "filter" in data:  # the kept attempts, beside hinted_kept: the share that came from hints
            counts["kept"] = data["filter"]["kept"]
        rounds[str(r)] = {"runs": runs, "data": counts, "seconds": _round_seconds(out / f"round_{r}")}
        r += 1
    best = out / "best.json"
    stopped = out / "stopped.json"
    return {
        "fields": list(VERDICT_FIELDS),
        "config": json.loads((out / "config.json").read_text(encoding="utf-8")),
        "split": read_split(out),
        "best": json.loads(best.read_text(encoding="utf-8")) if best.exists() else None,
        "stopped": json.loads(stopped.read_text(encoding="utf-8")) if stopped.exists() else None,
        "rounds": rounds,
    }


def _round_seconds(rd: Path) -> dict[str, float]:
    """Seconds a round spent per eval and in fine-tuning/update (its metrics.json; {} before it exists):
    what a reported table cost, kept beside its verdicts."""
    path = rd / "metrics.json"
    if not path.exists():
        return {}
    m = json.loads(path.read_text(encoding="utf-8"))
    seconds = {name: round(float(p["seconds"]), 1) for name, p in (m.get("phases") or {}).items()}
    if "seconds" in (m.get("sft") or {}):
        seconds["sft/update"] = round(float(m["sft"]["seconds"]), 1)
    return seconds


def write_verdicts(out: Path, path: Path) -> Path:
    """verdicts(out) as JSON at `path` (e.g. bench/figures/<table>/<run>.json)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, verdicts(out))
    return path


def greedy(v: dict[str, Any], r: int, split: str) -> dict[str, float]:
    """{task: 1.0 or 0.0}: round r's greedy verdicts on `split` (heldout, family, train); errors left out."""
    rows = v["rounds"].get(str(r), {}).get("runs", {}).get(f"{split}-greedy", [])
    return {row[0]: float(row[2]) for row in rows if row[2] is not None}


def aggregate_seeds(
    runs: Iterable[dict | Path | str],
    splits: Iterable[str] = ("heldout", "family", "train"),
    n_boot: int = 2000,
) -> dict[str, Any]:
    """Several runs (one per seed; verdicts dicts or files written by write_verdicts) aggregated per split:
    greedy pass@1 of round 0 and of each run's result round (best.json), the change, each as mean and
    spread over the runs (results.metrics.mean_and_spread), and a 95% CI of the mean change from a
    bootstrap over families of the per-task change averaged over the runs (tasks every run measured)."""
    vs = [r if isinstance(r, dict) else json.loads(Path(r).read_text(encoding="utf-8")) for r in runs]
    out: dict[str, Any] = {"runs": len(vs)}
    for split in splits:
        base = [greedy(v, 0, split) for v in vs]
        result = [greedy(v, (v["best"] or {}).get("round", 0), split) for v in vs]
        common = sorted(set.intersection(*(set(b) & set(x) for b, x in zip(base, result)))) if vs else []
        if not common:
            continue
        families = {}
        for v in vs:
            families.update(v["split"].get("families", {}))
        diffs = [sum(x[t] - b[t] for b, x in zip(base, result)) / len(vs) for t in common]
        clusters = [families.get(t) or t for t in common]
        lo, hi = cluster_bootstrap_ci(diffs, clusters, n_boot=n_boot)
        mean = lambda d: sum(d[t] for t in common) / len(common)  # noqa: E731
        out[split] = {
            "tasks": len(common),
            "families": len(set(clusters)),
            "base": mean_and_spread([mean(b) for b in base]),
            "result": mean_and_spread([mean(x) for x in result]),
            "delta": mean_and_spread([mean(x) - mean(b) for b, x in zip(base, result)]),
            "delta_ci_low": lo,
            "delta_ci_high": hi,
        }
    return out
