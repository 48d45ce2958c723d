"""The report's tables: pandas tables of runs, comparisons and rounds, as terminal text and as markdown.

`terminal_report` is what `harness report` prints, `print_summary` what `harness eval` prints when it
finishes, `markdown_summary` is summary.md and `summary_table` summary.csv/.parquet. The terminal's tables
keep the headline columns and fit its width (80 columns by default; rich lays them out; long run ids become
#1, #2, ... with a legend); every column is in summary.md, summary.csv and report.html (`harness report RUN`).
"""

from __future__ import annotations

import io
import shutil
import textwrap
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from results import metrics
from results.report.runs import RunData, load_runs

TERMINAL_KS = (1, 2, 5, 10)


def pass_cols(summary: pd.DataFrame) -> list[str]:
    return [c for c in summary.columns if c.startswith("pass@")]


def _counts(run: RunData) -> dict[str, Any]:
    """The first columns of a run's headline row, in the table and in the Markdown summary."""
    o = run.overall
    return {
        "run": run.label,
        "model": run.reader.manifest.model,
        "tasks": o["n_tasks"],
        "attempts": o["n_attempts"],
        "errors": o["n_errors"],
    }


def overview_table(runs: Sequence[RunData], ks: Optional[Sequence[int]] = None) -> pd.DataFrame:
    """One row per run: the headline numbers."""
    rows = []
    for run in runs:
        o = run.overall
        row = {
            **_counts(run),
            "solved_rate": o["solved_rate"],
            "ci_low": o["solved_ci_low"],
            "ci_high": o["solved_ci_high"],
            "mean_reward": o["mean_reward"],
        }
        for col in pass_cols(run.summary):
            if ks is None or int(col[5:]) in ks:
                row[col] = o[col]
        row.update(cheating_columns(run))
        row.update(
            {
                "steps/attempt": o["steps_per_attempt"],
                "tokens/attempt": o["tokens_per_attempt"],
                "cost": o["total_cost"],
                "cost/solved": o["cost_per_solved"],
                "s/attempt": o["seconds_per_attempt"],
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def cheating_columns(run: RunData) -> dict[str, Any]:
    """The cheating rate beside pass@k (runs with impossible tasks) and the attempts with exploit flags
    (runs that have any); nothing for other runs, so their tables stay as they were."""
    out: dict[str, Any] = {}
    c = metrics.cheating_rate(run.df)
    if c is not None:
        out.update({"cheating_rate": c.rate, "cheat_ci_low": c.ci_low, "cheat_ci_high": c.ci_high})
    if "n_flags" in run.df.columns and (run.df["n_flags"] > 0).any():
        out["flagged"] = int((run.df["n_flags"] > 0).sum())
    return out


def level_table(runs: Sequence[RunData], level: str) -> pd.DataFrame:
    """Solved rate (with CI) per group of `level`, one row per (group, run)."""
    cols = [
        "group",
        "n_tasks",
        "n_attempts",
        "n_errors",
        "solved_rate",
        "solved_ci_low",
        "solved_ci_high",
        "mean_reward",
    ]
    if level == "task":  # CIs resample tasks: none for a single task
        cols = [c for c in cols if "_ci_" not in c and c != "n_tasks"]
    parts = []
    for run in runs:
        t = run.level(level)[cols].copy()
        t.insert(1, "run", run.label)
        parts.append(t)
    if not parts:
        return pd.DataFrame(columns=[level, "run", *cols[1:]])
    table = pd.concat(parts, ignore_index=True)
    if level == "difficulty":
        order = pd.to_numeric(table["group"], errors="coerce")
        table = table.iloc[np.lexsort((table["group"].to_numpy(), order.to_numpy()))]
    else:
        table = table.sort_values("group", kind="stable")
    return table.rename(columns={"group": level}).reset_index(drop=True)


def _stacked(runs: Sequence[RunData], table: Callable[[pd.DataFrame], pd.DataFrame], cols: list[str]):
    """table(run's attempts) for each run, one below the other, with a run column first."""
    parts = [table(r.df).assign(run=r.label) for r in runs]
    parts = [p for p in parts if not p.empty]
    return (
        pd.concat(parts, ignore_index=True)[["run", *cols]] if parts else pd.DataFrame(columns=["run", *cols])
    )


def reasons_table(runs: Sequence[RunData]) -> pd.DataFrame:
    return _stacked(runs, metrics.failure_reasons, ["field", "value", "count"])


def errors_table(runs: Sequence[RunData]) -> pd.DataFrame:
    return _stacked(runs, metrics.error_summary, ["exit_reason", "error", "count"])


def comparisons(runs: Sequence[RunData], n_boot: int, seed: int) -> list[tuple[str, str, metrics.Comparison]]:
    """Every later run against the first (the baseline)."""
    return [(runs[0].label, r.label, metrics.compare(runs[0].df, r.df, n_boot, seed)) for r in runs[1:]]


def comparison_table(comps: Sequence[tuple[str, str, metrics.Comparison]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "baseline": a,
                "run": b,
                "tasks": c.n_tasks,
                "rate_baseline": c.rate_a,
                "rate_run": c.rate_b,
                "diff": c.diff,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "p_value": c.p_value,
                "improved": len(c.improved),
                "regressed": len(c.regressed),
            }
            for a, b, c in comps
        ]
    )


def summary_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """All levels of all runs in one tidy table (summary.csv / summary.parquet)."""
    parts = []
    for run in runs:
        s = run.summary.copy()
        s.insert(0, "run", run.label)
        s.insert(1, "model", run.reader.manifest.model)
        parts.append(s)
    if not parts:
        return pd.DataFrame({"run": [], "model": [], "level": [], "group": []})
    table = pd.concat(parts, ignore_index=True)
    table["group"] = table["group"].astype(str)
    return table


def rounds_table(rounds: Sequence[dict[str, Any]]) -> pd.DataFrame:
    cols = ["run", "round", "split", "metric", "value", "ci_low", "ci_high"]
    table = pd.DataFrame(list(rounds), columns=cols).sort_values(
        ["run", "split", "metric", "round"], kind="stable"
    )
    if not table["run"].astype(bool).any():
        table = table.drop(columns="run")
    return table.reset_index(drop=True)


def headline_ks(runs: Sequence[RunData]) -> set[int]:
    """The k of pass@k worth a column in a short table: 1, 2, 5, 10 and the largest."""
    return set(TERMINAL_KS) | {max((len(pass_cols(r.summary)) for r in runs), default=1)}


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS, else 80 when not a terminal)."""
    return max(shutil.get_terminal_size((80, 24)).columns, 40)


def _cell(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return "-" if np.isnan(value) else f"{value:.3f}"
    return "-" if value is None else str(value)


def format_table(df: pd.DataFrame, width: Optional[int] = None) -> str:
    """A table as text no wider than `width` (default: the terminal's): long cells wrap in their column."""
    if df.empty:
        return "  (none)"
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=0, collapse_padding=True)
    for col in df.columns:
        numeric = pd.api.types.is_numeric_dtype(df[col])
        table.add_column(str(col), justify="right" if numeric else "left", overflow="fold", no_wrap=numeric)
    for row in df.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    out = io.StringIO()
    Console(file=out, width=width or terminal_width(), color_system=None, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())


def _ci(low: pd.Series, high: pd.Series) -> list[str]:
    return [f"{_cell(a)}-{_cell(b)}" if not np.isnan(a) else "-" for a, b in zip(low, high)]


def terminal_overview(runs: Sequence[RunData]) -> pd.DataFrame:
    """The overview turned on its side for the terminal: one row per measure, one column per run (a row
    per run would need ~130 columns)."""
    full = overview_table(runs, headline_ks(runs))
    if full.empty:
        return full
    rows: dict[str, list[Any]] = {"model": list(full["model"])}
    rows["solved"] = [_cell(x) for x in full["solved_rate"]]
    rows["95% CI"] = _ci(full["ci_low"], full["ci_high"])
    for col in pass_cols(full):
        rows[col] = [_cell(x) for x in full[col]]
    for col in ("tasks", "attempts", "errors"):
        rows[col] = [str(x) for x in full[col]]
    for col, fmt in (("steps/attempt", "{:.1f}"), ("tokens/attempt", "{:.0f}"), ("s/attempt", "{:.1f}")):
        rows[col] = ["-" if np.isnan(x) else fmt.format(x) for x in full[col]]
    rows["cost"] = [f"${x:.4f}" for x in full["cost"]]
    if "cheating_rate" in full.columns:  # beside pass@k: passes of impossible tasks (each is a cheat)
        rows["cheating_rate"] = [_cell(x) for x in full["cheating_rate"]]
        rows["cheat 95% CI"] = _ci(full["cheat_ci_low"], full["cheat_ci_high"])
    if "flagged" in full.columns:  # attempts with exploit flags (results/flags.py)
        rows["flagged"] = ["-" if pd.isna(x) else str(int(x)) for x in full["flagged"]]
    table = pd.DataFrame({"": list(rows)})
    for n, label in enumerate(full["run"]):
        table[str(label)] = [values[n] for values in rows.values()]
    return table


def terminal_level(runs: Sequence[RunData], level: str) -> pd.DataFrame:
    full = level_table(runs, level)
    cols = [c for c in (level, "run", "n_tasks", "n_attempts", "n_errors") if c in full]
    table = full[cols].rename(columns={"n_tasks": "tasks", "n_attempts": "attempts", "n_errors": "errors"})
    table["solved"] = full["solved_rate"]
    if "solved_ci_low" in full:
        table["95% CI"] = _ci(full["solved_ci_low"], full["solved_ci_high"])
    return table


def terminal_comparison(comps: Sequence[tuple[str, str, metrics.Comparison]]) -> pd.DataFrame:
    full = comparison_table(comps)
    table = full[["run", "baseline", "tasks", "diff"]].copy()
    table["95% CI"] = [f"{a:+.3f}-{b:+.3f}" for a, b in zip(full["ci_low"], full["ci_high"])]
    table["p"] = full["p_value"]
    table["better"], table["worse"] = full["improved"], full["regressed"]
    return table


def short_names(runs: Sequence[RunData], longest: int = 16) -> dict[str, str]:
    """The runs' names in the terminal's tables: their labels where all are short, else #1, #2, ... in the
    given order (a run id, a timestamp and the model, would wrap in every row at 80 columns)."""
    labels = [r.label for r in runs]
    if max(map(len, labels), default=0) <= longest:
        return {label: label for label in labels}
    return {label: f"#{i + 1}" for i, label in enumerate(labels)}


def terminal_report(
    runs: Sequence[RunData],
    comps: Sequence[tuple[str, str, metrics.Comparison]],
    rounds: Sequence[dict[str, Any]] = (),
) -> str:
    width = terminal_width()
    names = short_names(runs)

    def table(df: pd.DataFrame) -> str:
        return format_table(df.replace({"run": names, "baseline": names}).rename(columns=names), width)

    legend = [f"{short} {label}" for label, short in names.items() if short != label]
    out = ["== runs", *legend, ""] if legend else []
    out += [
        "== overview (95% CI: bootstrap over tasks; errors left out of rates)",
        table(terminal_overview(runs)),
    ]
    for level in ("domain", "difficulty"):
        out += [f"\n== by {level}", table(terminal_level(runs, level))]
    if comps:
        out += ["\n== compared with the baseline (paired by task)", table(terminal_comparison(comps))]
        for a, b, c in comps:
            if c.improved or c.regressed:
                line = f"  {names[b]} vs {names[a]}: improved {id_list(c.improved)}; "
                line += f"regressed {id_list(c.regressed)}"
                out += textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False)
    out += ["\n== failure reasons (failed attempts)", table(reasons_table(runs))]
    errs = errors_table(runs)
    if not errs.empty:
        out += ["\n== infra errors (status=error; not counted in rates)", table(errs)]
    if rounds:
        out += ["\n== by training round", table(rounds_table(rounds))]
    return "\n".join(out)


def id_list(ids: Sequence[str], limit: int = 10) -> str:
    if not ids:
        return "none"
    return ", ".join(ids[:limit]) + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")


# ---------------------------------------------------------------- markdown (summary.md)


def _md_cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if np.isnan(value) else f"{value:.3f}"
    return str(value).replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_none_\n"
    lines = [
        "| " + " | ".join(_md_cell(c) for c in df.columns) + " |",
        "|" + "|".join("---" for _ in df.columns) + "|",
    ]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def markdown_summary(
    runs: Sequence[RunData],
    comps: Sequence[tuple[str, str, metrics.Comparison]],
    rounds: Sequence[dict[str, Any]] = (),
) -> str:
    out = ["## harness results", ""]
    head, ks = [], headline_ks(runs)
    for r in runs:
        o = r.overall
        row = {
            **_counts(r),
            "solved rate (95% CI)": (
                f"{o['solved_rate']:.3f} ({o['solved_ci_low']:.3f}-{o['solved_ci_high']:.3f})"
                if not np.isnan(o["solved_rate"])
                else "-"
            ),
        }
        for col in pass_cols(r.summary):
            if int(col[5:]) in ks:
                row[col] = o[col]
        cheat = cheating_columns(r)
        if "cheating_rate" in cheat:
            row["cheating rate (95% CI)"] = (
                f"{cheat['cheating_rate']:.3f} ({cheat['cheat_ci_low']:.3f}-{cheat['cheat_ci_high']:.3f})"
            )
        if "flagged" in cheat:
            row["flagged attempts"] = cheat["flagged"]
        row.update({"mean reward": o["mean_reward"], "cost (USD)": o["total_cost"]})
        head.append(row)
    out += [markdown_table(pd.DataFrame(head)), ""]
    if rounds:
        out += ["### By training round", "", markdown_table(rounds_table(rounds)), ""]
    if comps:
        out += ["### Compared with the baseline", ""]
        for a, b, c in comps:
            out.append(
                f"- **{_md_cell(b)}** vs **{_md_cell(a)}** on {c.n_tasks} shared tasks: "
                f"{c.diff:+.3f} solved rate (95% CI {c.ci_low:+.3f} to {c.ci_high:+.3f}), "
                f"{c.test} p = {c.p_value:.4f}; "
                f"improved {len(c.improved)} ({_md_cell(id_list(c.improved))}), "
                f"regressed {len(c.regressed)} ({_md_cell(id_list(c.regressed))})"
            )
        out.append("")
    for level in ("domain", "difficulty"):
        table = level_table(runs, level)
        cols = [level, "run", "n_tasks", "solved_rate", "solved_ci_low", "solved_ci_high"]
        out += [f"### By {level}", "", markdown_table(table[[c for c in cols if c in table]]), ""]
    reasons = reasons_table(runs)
    out += ["### Failure reasons (failed attempts)", "", markdown_table(reasons), ""]
    errs = errors_table(runs)
    if not errs.empty:
        out += ["### Infra errors (excluded from rates)", "", markdown_table(errs), ""]
    out.append(
        "_Rates are means over tasks of per-task solved fractions; pass@k uses the unbiased estimator "
        "(Chen et al. 2021); CIs are 95% bootstrap over tasks._"
    )
    return "\n".join(out) + "\n"


def print_summary(run_dir: str | Path, echo: Callable[[str], Any] = print, n_boot: int = 1000) -> None:
    """The terminal tables for one run (what `harness eval` prints when it finishes)."""
    runs = load_runs([run_dir], n_boot)
    echo(terminal_report(runs, []))
    from results.commandline import invocation

    echo(f"every column, plots and each attempt's steps:\n  {invocation()} report {run_dir}")
