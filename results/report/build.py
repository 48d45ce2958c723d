"""`harness report RUN [RUN ...]`: the terminal tables, then report.html and summary.csv/.parquet/.md."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from results.errors import UserError
from results.manifest import MANIFEST
from results.report.page import write_html
from results.report.runs import load_runs
from results.report.tables import comparisons, markdown_summary, summary_table, terminal_report
from results.rounds import ROUNDS_FILE, load_rounds, normalize_rounds


def build_report(
    paths: Sequence[str | Path],
    out_dir: Optional[str | Path] = None,
    extra_rounds: Optional[Sequence[dict[str, Any]]] = None,
    n_boot: int = 1000,
    seed: int = 0,
    echo: Callable[[str], Any] = print,
) -> dict[str, Path]:
    """Print the terminal tables (through `echo`) and write report.html, summary.{csv,parquet,md} to out_dir.

    `paths` are run folders; a folder with rounds.jsonl but no manifest.json (a post-training run)
    contributes its rounds only. out_dir defaults to the folder itself when there is one,
    reports/<UTC timestamp>/ otherwise. `extra_rounds` are per-round metric rows (round, split, pass@1,
    ci_low, ci_high); they and any rounds.jsonl add a "pass rate by round" plot and table.
    """
    if not paths:
        raise UserError("harness report needs at least one run folder")
    run_dirs = [
        Path(p) for p in paths if (Path(p) / MANIFEST).exists() or not (Path(p) / ROUNDS_FILE).exists()
    ]
    runs = load_runs(run_dirs, n_boot, seed)
    rounds = normalize_rounds(extra_rounds or [], "extra round metrics")
    several = len(paths) > 1
    for p in paths:
        rounds += load_rounds(p, run=Path(p).name if several else "")
    if out_dir is None:
        out_dir = (
            Path(paths[0])
            if not several
            else Path("reports") / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    comps = comparisons(runs, n_boot, seed)
    echo(terminal_report(runs, comps, rounds))
    files = {
        "html": out / "report.html",
        "csv": out / "summary.csv",
        "parquet": out / "summary.parquet",
        "md": out / "summary.md",
    }
    table = summary_table(runs)
    table.to_csv(files["csv"], index=False)
    table.to_parquet(files["parquet"], index=False)
    files["md"].write_text(markdown_summary(runs, comps, rounds), encoding="utf-8")
    write_html(files["html"], runs, comps, rounds)
    return files
