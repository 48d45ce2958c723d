"""The report's plots: matplotlib figures (Agg, no pyplot state) as base64 PNG data URLs for the page."""

from __future__ import annotations

import base64
import io
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from results import metrics
from results.report.runs import RunData
from results.report.tables import pass_cols

HEATMAP_MAX_TASKS = 120


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _finish(
    fig: Figure, ax, xlabel: str, ylabel: str, title: str, rate: bool = False, whole_x: bool = False
) -> str:
    """The plots' common frame (labels, title, legend; a rate from 0 to 1, whole numbers on x), as a PNG."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if rate:
        ax.set_ylim(0, 1.05)
    ax.set_title(title)
    if whole_x:
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    return _png(fig)


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def plot_by_level(runs: Sequence[RunData], level: str) -> Optional[str]:
    tables = [r.level(level) for r in runs]
    groups = sorted(
        {g for t in tables for g in t["group"]},
        key=lambda g: (float(g), g) if level == "difficulty" and g.lstrip("-").isdigit() else (0, g),
    )
    if not groups:
        return None
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    x = np.arange(len(groups))
    width = 0.8 / len(runs)
    for i, (run, t, color) in enumerate(zip(runs, tables, _colors(len(runs)))):
        t = t.set_index("group").reindex(groups)
        y = t["solved_rate"].to_numpy(dtype=float)
        err = np.vstack(
            [y - t["solved_ci_low"].to_numpy(dtype=float), t["solved_ci_high"].to_numpy(dtype=float) - y]
        )
        ax.bar(
            x + (i - (len(runs) - 1) / 2) * width,
            np.nan_to_num(y),
            width,
            yerr=np.nan_to_num(err),
            capsize=3,
            label=run.label,
            color=color,
        )
    ax.set_xticks(
        x, groups, rotation=30 if len(groups) > 6 else 0, ha="right" if len(groups) > 6 else "center"
    )
    return _finish(fig, ax, level, "solved rate", f"Solved rate by {level} (95% CI)", rate=True)


def plot_pass_at_k(runs: Sequence[RunData]) -> Optional[str]:
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    drawn = False
    for run, color in zip(runs, _colors(len(runs))):
        cols = pass_cols(run.summary)
        ks = [int(c[5:]) for c in cols]
        ys = [run.overall[c] for c in cols]
        if ks:
            ax.plot(ks, ys, marker="o", label=run.label, color=color)
            drawn = True
    if not drawn:
        return None
    return _finish(fig, ax, "k", "pass@k", "pass@k (unbiased estimator)", rate=True, whole_x=True)


def plot_cost_vs_score(runs: Sequence[RunData]) -> Optional[str]:
    have_cost = any(r.overall["total_cost"] > 0 for r in runs)
    key, xlabel = (
        ("cost_per_attempt", "cost per attempt (USD)")
        if have_cost
        else ("tokens_per_attempt", "tokens per attempt (no cost recorded)")
    )
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    for run, color in zip(runs, _colors(len(runs))):
        o = run.overall
        x, y = o[key], o["solved_rate"]
        if np.isnan(x) or np.isnan(y):
            continue
        yerr = [[y - o["solved_ci_low"]], [o["solved_ci_high"] - y]]
        ax.errorbar([x], [y], yerr=np.nan_to_num(yerr), fmt="o", capsize=4, color=color, label=run.label)
    if not ax.lines:
        return None
    ax.set_xlim(0, max(max(r.overall[key] for r in runs if not np.isnan(r.overall[key])) * 1.25, 1e-9))
    return _finish(fig, ax, xlabel, "solved rate", "Cost vs score", rate=True)


def plot_steps(runs: Sequence[RunData]) -> Optional[str]:
    valid = [(r, r.df[r.df["status"] != "error"]) for r in runs]
    if all(v.empty for _, v in valid):
        return None
    top = int(max(v["n_steps"].max() for _, v in valid if not v.empty))
    bins = np.arange(0, top + 2) - 0.5
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    if len(runs) == 1:
        v = valid[0][1]
        solved = v["solved"].astype(bool)
        ax.hist(
            [v.loc[solved, "n_steps"], v.loc[~solved, "n_steps"]],
            bins=bins,
            stacked=True,
            label=["solved", "not solved"],
            color=["#2ca02c", "#d62728"],
        )
    else:
        for (run, v), color in zip(valid, _colors(len(runs))):
            ax.hist(v["n_steps"], bins=bins, histtype="step", linewidth=2, label=run.label, color=color)
    return _finish(fig, ax, "steps per attempt", "attempts", "Steps distribution", whole_x=True)


def plot_heatmap(runs: Sequence[RunData]) -> tuple[Optional[str], str]:
    rates = pd.DataFrame({r.label: metrics.task_table(r.df)["rate"] for r in runs})
    if rates.empty:
        return None, ""
    note = ""
    if len(rates) > HEATMAP_MAX_TASKS:  # keep the tasks where runs disagree most
        spread = (rates.max(axis=1) - rates.min(axis=1)).fillna(0)
        keep = spread.sort_values(ascending=False, kind="stable").index[:HEATMAP_MAX_TASKS]
        rates = rates.loc[sorted(keep)]
        note = f" ({HEATMAP_MAX_TASKS} of {len(spread)} tasks shown: those where runs differ most)"
    rates = rates.sort_index()
    from matplotlib import colormaps

    cmap = colormaps["RdYlGn"].with_extremes(bad="#dddddd")
    fig = Figure(figsize=(min(3 + 1.2 * len(runs), 12), min(1.5 + 0.22 * len(rates), 30)))
    ax = fig.subplots()
    image = ax.imshow(
        np.ma.masked_invalid(rates.to_numpy(dtype=float)), cmap=cmap, vmin=0, vmax=1, aspect="auto"
    )
    ax.set_yticks(range(len(rates)), [str(t) for t in rates.index], fontsize=7)
    ax.set_xticks(range(len(runs)), [r.label for r in runs], rotation=20, ha="right", fontsize=8)
    fig.colorbar(image, ax=ax, label="solved rate")
    ax.set_title("Solved rate per task (grey: not run / only errors)")
    return _png(fig), note


def plot_rounds(rows: Sequence[dict[str, Any]]) -> Optional[str]:
    """pass@1 by training round, one line per (run, split), with the CI band when given."""
    if not rows:
        return None
    table = pd.DataFrame(list(rows))
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    series = list(table.groupby(["run", "split", "metric"], sort=True))
    for ((run, split, metric), part), color in zip(series, _colors(len(series))):
        part = part.sort_values("round")
        label = f"{run} {split} {metric}".strip()
        ax.plot(part["round"], part["value"], marker="o", label=label, color=color)
        if part[["ci_low", "ci_high"]].notna().all().all():
            ax.fill_between(part["round"], part["ci_low"], part["ci_high"], alpha=0.2, color=color)
    return _finish(fig, ax, "round", "pass rate", "Pass rate by round", rate=True, whole_x=True)
