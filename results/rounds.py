"""rounds.jsonl: the per-round metrics of a post-training run, written by the training loop (lora/train.py)
and read by the report. This module is the one place that knows the file's layout.

    <train run folder>/rounds.jsonl   append-only, one row per (round, split, metric):
        {"round": 0, "split": "heldout", "metric": "pass@1", "value": 0.25, "ci_low": 0.0, "ci_high": 0.5}

A torn last line (a crash mid-append) is skipped by readers and cut off by the next append.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from results.errors import UserError
from results.jsonl import JsonlScan, cut_torn_line, iter_jsonl

ROUNDS_FILE = "rounds.jsonl"


def normalize_rounds(rows: Iterable[dict[str, Any]], source: str, run: str = "") -> list[dict[str, Any]]:
    """Per-round metric rows as {run, round, split, metric, value, ci_low, ci_high}.

    Accepts {round, split, pass@1, ci_low, ci_high} and the training loop's long form
    {round, split, metric, value, ci_low, ci_high}. A bad row is a UserError naming it.
    """
    out = []
    for n, row in enumerate(rows, start=1):
        try:
            metric = str(row["metric"]) if "metric" in row else "pass@1"
            value = row["value"] if "metric" in row else row["pass@1"]
            clean = {
                "run": run,
                "round": int(row["round"]),
                "split": str(row.get("split", "") or "all"),
                "metric": metric,
                "value": float(value),
            }
            for key in ("ci_low", "ci_high"):
                clean[key] = float(row[key]) if row.get(key) is not None else float("nan")
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(
                f"{source} row {n} is not a round record ({type(e).__name__}: {e}); expected "
                f"round, split, pass@1 (or metric and value), ci_low, ci_high"
            ) from None
        out.append(clean)
    return out


def load_rounds(folder: str | Path, run: str = "") -> list[dict[str, Any]]:
    """The rows of folder/rounds.jsonl (a torn last line is skipped); [] when there is none."""
    path = Path(folder) / ROUNDS_FILE
    return normalize_rounds(iter_jsonl(path), str(path), run) if path.exists() else []


def append_rounds(folder: str | Path, round_: int, metrics: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Append one round's rows to folder/rounds.jsonl from {split: {metric: {value, ci_low, ci_high, ...}}},
    skipping the rows already there (a resumed eval phase writes its round again)."""
    path = Path(folder) / ROUNDS_FILE
    scan = JsonlScan()
    have = {
        (r["round"], r["split"], r["metric"]) for r in normalize_rounds(iter_jsonl(path, scan), str(path))
    }
    if scan.torn_line:
        cut_torn_line(path, scan)
    with open(path, "a", encoding="utf-8") as f:
        for split, by_metric in metrics.items():
            for metric, m in by_metric.items():
                if (round_, split, metric) not in have:
                    row = {
                        "round": round_,
                        "split": split,
                        "metric": metric,
                        "value": m["value"],
                        "ci_low": m["ci_low"],
                        "ci_high": m["ci_high"],
                    }
                    f.write(json.dumps(row) + "\n")


# ---------------------------------------------------------------- each task's solve rate, per round

TASK_RATES_FILE = "task_rates.jsonl"


def append_task_rates(folder: str | Path, round_: int, run: str, rates: Iterable[Any]) -> None:
    """Append one eval run's per-task solve rates (results.task_audit.TaskRate) to folder/task_rates.jsonl:
    {round, run, task_id, split, domain, difficulty, n, solved, rate, ci_low, ci_high, tamper, flagged,
    errors}. Rows already there for (round, run) are not written again (a resumed eval phase)."""
    from dataclasses import asdict

    path = Path(folder) / TASK_RATES_FILE
    scan = JsonlScan()
    have = {(r.get("round"), r.get("run")) for r in iter_jsonl(path, scan)} if path.exists() else set()
    if scan.torn_line:
        cut_torn_line(path, scan)
    if (round_, run) in have:
        return
    with open(path, "a", encoding="utf-8") as f:
        for r in rates:
            f.write(json.dumps({"round": round_, "run": run, **asdict(r)}) + "\n")


def load_task_rates(folder: str | Path) -> list[dict[str, Any]]:
    """The rows of folder/task_rates.jsonl (a torn last line is skipped); [] when there is none."""
    path = Path(folder) / TASK_RATES_FILE
    return list(iter_jsonl(path)) if path.exists() else []
