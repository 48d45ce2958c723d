"""Per-round metrics of a post-training run (lora's rounds.jsonl) or given by the caller, as report rows."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from results.errors import UserError
from results.store import iter_jsonl

ROUNDS_FILE = "rounds.jsonl"  # written by the post-training loop into its run folder


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
            clean = {"run": run, "round": int(row["round"]), "split": str(row.get("split", "") or "all"),
                     "metric": metric, "value": float(value)}
            for key in ("ci_low", "ci_high"):
                clean[key] = float(row[key]) if row.get(key) is not None else float("nan")
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"{source} row {n} is not a round record ({type(e).__name__}: {e}); expected "
                            f"round, split, pass@1 (or metric and value), ci_low, ci_high") from None
        out.append(clean)
    return out


def load_rounds(folder: str | Path, run: str = "") -> list[dict[str, Any]]:
    """The rows of folder/rounds.jsonl (a torn last line is skipped); [] when there is none."""
    path = Path(folder) / ROUNDS_FILE
    return normalize_rounds(iter_jsonl(path), str(path), run) if path.exists() else []
