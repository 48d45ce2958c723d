"""`harness report RUN [RUN ...]`: terminal tables plus report.html, summary.csv/.parquet/.md.

report.html is one self-contained file: plots are base64 PNGs (matplotlib, Agg, no pyplot state),
no CDN, and a strict Content-Security-Policy (only the page's own nonce'd script runs, nothing is
fetched). Everything from a run (model output, observations, test messages, task ids) is untrusted
and goes through html.escape. Trajectories are streamed from disk into the page one attempt at a time.
"""
from __future__ import annotations

import base64
import html
import io
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from results.errors import UserError
from results import metrics
from results.schema import Attempt
from results.store import MANIFEST, RunReader, iter_jsonl, open_run

ROUNDS_FILE = "rounds.jsonl"  # written by the post-training loop into its run folder
TEXT_LIMIT = 20_000  # characters of one text block shown in the viewer (head and tail are kept)
HEATMAP_MAX_TASKS = 120
TERMINAL_KS = (1, 2, 5, 10)


@dataclass
class RunData:
    label: str  # unique short name used in tables and plots
    reader: RunReader
    df: pd.DataFrame
    summary: pd.DataFrame  # metrics.run_summary

    def level(self, level: str) -> pd.DataFrame:
        return self.summary[self.summary["level"] == level]

    @property
    def overall(self) -> pd.Series:
        return self.level("overall").iloc[0]


# ---------------------------------------------------------------- loading

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


def load_runs(run_dirs: Sequence[str | Path], n_boot: int = 1000, seed: int = 0) -> list[RunData]:
    readers = [open_run(d) for d in run_dirs]
    labels = [r.run_id for r in readers]
    if len(set(labels)) < len(labels):  # the same run id twice (copies): number them
        labels = [f"{i + 1}:{label}" for i, label in enumerate(labels)]
    runs = []
    for label, reader in zip(labels, readers):
        df = reader.read_attempts()
        runs.append(RunData(label, reader, df, metrics.run_summary(df, n_boot, seed)))
    return runs


# ---------------------------------------------------------------- tables

def _pass_cols(summary: pd.DataFrame) -> list[str]:
    return [c for c in summary.columns if c.startswith("pass@")]


def overview_table(runs: Sequence[RunData], ks: Optional[Sequence[int]] = None) -> pd.DataFrame:
    """One row per run: the headline numbers."""
    rows = []
    for run in runs:
        o = run.overall
        row = {"run": run.label, "model": run.reader.manifest.model, "tasks": o["n_tasks"],
               "attempts": o["n_attempts"], "errors": o["n_errors"], "solved_rate": o["solved_rate"],
               "ci_low": o["solved_ci_low"], "ci_high": o["solved_ci_high"], "mean_reward": o["mean_reward"]}
        for col in _pass_cols(run.summary):
            if ks is None or int(col[5:]) in ks:
                row[col] = o[col]
        row.update({"steps/attempt": o["steps_per_attempt"], "tokens/attempt": o["tokens_per_attempt"],
                    "cost": o["total_cost"], "cost/solved": o["cost_per_solved"],
                    "s/attempt": o["seconds_per_attempt"]})
        rows.append(row)
    return pd.DataFrame(rows)


def level_table(runs: Sequence[RunData], level: str) -> pd.DataFrame:
    """Solved rate (with CI) per group of `level`, one row per (group, run)."""
    cols = ["group", "n_tasks", "n_attempts", "n_errors", "solved_rate", "solved_ci_low", "solved_ci_high",
            "mean_reward"]
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


def reasons_table(runs: Sequence[RunData]) -> pd.DataFrame:
    parts = [metrics.failure_reasons(r.df).assign(run=r.label) for r in runs]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True)[["run", "field", "value", "count"]] if parts else \
        pd.DataFrame(columns=["run", "field", "value", "count"])


def errors_table(runs: Sequence[RunData]) -> pd.DataFrame:
    parts = [metrics.error_summary(r.df).assign(run=r.label) for r in runs]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True)[["run", "exit_reason", "error", "count"]] if parts else \
        pd.DataFrame(columns=["run", "exit_reason", "error", "count"])


def comparisons(runs: Sequence[RunData], n_boot: int, seed: int) -> list[tuple[str, str, metrics.Comparison]]:
    """Every later run against the first (the baseline)."""
    return [(runs[0].label, r.label, metrics.compare(runs[0].df, r.df, n_boot, seed)) for r in runs[1:]]


def comparison_table(comps: Sequence[tuple[str, str, metrics.Comparison]]) -> pd.DataFrame:
    return pd.DataFrame([{
        "baseline": a, "run": b, "tasks": c.n_tasks, "rate_baseline": c.rate_a, "rate_run": c.rate_b,
        "diff": c.diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value,
        "improved": len(c.improved), "regressed": len(c.regressed)} for a, b, c in comps])


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
    table = pd.DataFrame(list(rounds), columns=cols).sort_values(["run", "split", "metric", "round"], kind="stable")
    if not table["run"].astype(bool).any():
        table = table.drop(columns="run")
    return table.reset_index(drop=True)


def headline_ks(runs: Sequence[RunData]) -> set[int]:
    """The k of pass@k worth a column in a short table: 1, 2, 5, 10 and the largest."""
    return set(TERMINAL_KS) | {max((len(_pass_cols(r.summary)) for r in runs), default=1)}


def format_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "  (none)"
    return df.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-")


def terminal_report(runs: Sequence[RunData], comps: Sequence[tuple[str, str, metrics.Comparison]],
                    rounds: Sequence[dict[str, Any]] = ()) -> str:
    ks = headline_ks(runs)
    out = ["== overview (solved rate CI: 95% bootstrap over tasks; errors excluded from rates)",
           format_table(overview_table(runs, ks))]
    for level in ("domain", "difficulty"):
        out += [f"\n== by {level}", format_table(level_table(runs, level))]
    if comps:
        out += ["\n== compared with the baseline (paired by task)", format_table(comparison_table(comps))]
        for a, b, c in comps:
            if c.improved or c.regressed:
                out.append(f"  {b} vs {a}: improved {id_list(c.improved)}; regressed {id_list(c.regressed)}")
    out += ["\n== failure reasons (failed attempts)", format_table(reasons_table(runs))]
    errs = errors_table(runs)
    if not errs.empty:
        out += ["\n== infra errors (status=error; not counted in rates)", format_table(errs)]
    if rounds:
        out += ["\n== by training round", format_table(rounds_table(rounds))]
    return "\n".join(out)


def id_list(ids: Sequence[str], limit: int = 10) -> str:
    if not ids:
        return "none"
    return ", ".join(ids[:limit]) + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")


# ---------------------------------------------------------------- plots

def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _colors(n: int) -> list:
    from matplotlib import colormaps
    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def plot_by_level(runs: Sequence[RunData], level: str) -> Optional[str]:
    tables = [r.level(level) for r in runs]
    groups = sorted({g for t in tables for g in t["group"]},
                    key=lambda g: (float(g), g) if level == "difficulty" and g.lstrip("-").isdigit() else (0, g))
    if not groups:
        return None
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    x = np.arange(len(groups))
    width = 0.8 / len(runs)
    for i, (run, t, color) in enumerate(zip(runs, tables, _colors(len(runs)))):
        t = t.set_index("group").reindex(groups)
        y = t["solved_rate"].to_numpy(dtype=float)
        err = np.vstack([y - t["solved_ci_low"].to_numpy(dtype=float), t["solved_ci_high"].to_numpy(dtype=float) - y])
        ax.bar(x + (i - (len(runs) - 1) / 2) * width, np.nan_to_num(y), width, yerr=np.nan_to_num(err),
               capsize=3, label=run.label, color=color)
    ax.set_xticks(x, groups, rotation=30 if len(groups) > 6 else 0, ha="right" if len(groups) > 6 else "center")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("solved rate")
    ax.set_xlabel(level)
    ax.set_title(f"Solved rate by {level} (95% CI)")
    ax.legend(fontsize=8)
    return _png(fig)


def plot_pass_at_k(runs: Sequence[RunData]) -> Optional[str]:
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    drawn = False
    for run, color in zip(runs, _colors(len(runs))):
        cols = _pass_cols(run.summary)
        ks = [int(c[5:]) for c in cols]
        ys = [run.overall[c] for c in cols]
        if ks:
            ax.plot(ks, ys, marker="o", label=run.label, color=color)
            drawn = True
    if not drawn:
        return None
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.05)
    ax.set_title("pass@k (unbiased estimator)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    return _png(fig)


def plot_cost_vs_score(runs: Sequence[RunData]) -> Optional[str]:
    have_cost = any(r.overall["total_cost"] > 0 for r in runs)
    key, xlabel = (("cost_per_attempt", "cost per attempt (USD)") if have_cost
                   else ("tokens_per_attempt", "tokens per attempt (no cost recorded)"))
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
    ax.set_xlabel(xlabel)
    ax.set_ylabel("solved rate")
    ax.set_ylim(0, 1.05)
    ax.set_title("Cost vs score")
    ax.legend(fontsize=8)
    return _png(fig)


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
        ax.hist([v.loc[solved, "n_steps"], v.loc[~solved, "n_steps"]], bins=bins, stacked=True,
                label=["solved", "not solved"], color=["#2ca02c", "#d62728"])
    else:
        for (run, v), color in zip(valid, _colors(len(runs))):
            ax.hist(v["n_steps"], bins=bins, histtype="step", linewidth=2, label=run.label, color=color)
    ax.set_xlabel("steps per attempt")
    ax.set_ylabel("attempts")
    ax.set_title("Steps distribution")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    return _png(fig)


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
    image = ax.imshow(np.ma.masked_invalid(rates.to_numpy(dtype=float)), cmap=cmap, vmin=0, vmax=1, aspect="auto")
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
    ax.set_xlabel("round")
    ax.set_ylabel("pass rate")
    ax.set_ylim(0, 1.05)
    ax.set_title("Pass rate by round")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    return _png(fig)


# ---------------------------------------------------------------- html

e = html.escape  # quote=True by default: safe in text and in attribute values

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1240px;padding:16px 24px;color:#1f2328;background:#fff}
h1{margin:.2em 0}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:1.6em}
.meta{color:#59636e}table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
table{display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:right;vertical-align:top}th{background:#f6f8fa}
td:first-child,th:first-child{text-align:left}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px}
figure{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:8px;background:#fff}figure img{max-width:100%}
figcaption{color:#59636e;font-size:12px}
.filters{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #d0d7de;z-index:1}
.filters select{margin-right:12px}
details.attempt{border:1px solid #d0d7de;border-radius:6px;margin:6px 0;background:#fff}
details.attempt>summary{cursor:pointer;padding:6px 10px;background:#f6f8fa}
.body{padding:6px 12px}.badge{display:inline-block;border-radius:10px;padding:0 8px;color:#fff;font-size:12px}
.solved{background:#1a7f37}.failed{background:#cf222e}.error{background:#9a6700}
.passed{color:#1a7f37}.failed-t{color:#cf222e}
pre{background:#f6f8fa;border:1px solid #eaeef2;border-radius:4px;padding:6px 8px;white-space:pre-wrap;word-break:break-word;max-height:420px;overflow:auto;margin:3px 0}
pre.model{background:#eef6ff}pre.act{background:#fff8e6}pre.err{background:#ffebe9}
ol.steps>li{margin-bottom:10px}.step-h{color:#59636e;font-size:12px}.label{font-size:12px;font-weight:600;margin-top:4px}
"""

SCRIPT = """
(function(){
  var sel = {run: document.getElementById('f-run'), task: document.getElementById('f-task'),
             status: document.getElementById('f-status')};
  var count = document.getElementById('f-count');
  function apply(){
    var shown = 0, all = document.querySelectorAll('details.attempt');
    for (var i = 0; i < all.length; i++) {
      var d = all[i].dataset;
      var ok = (!sel.run.value || d.run === sel.run.value) && (!sel.task.value || d.task === sel.task.value) &&
               (!sel.status.value || d.status === sel.status.value);
      all[i].style.display = ok ? '' : 'none';
      if (ok) shown++;
    }
    count.textContent = shown + ' of ' + all.length + ' attempts shown';
  }
  for (var k in sel) sel[k].addEventListener('change', apply);
  apply();
})();
"""


def clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    """Long text keeps its head and tail; the page stays usable with huge observations."""
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters not shown ...]\n{text[-tail:]}"


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p class='meta'>(none)</p>"
    return df.to_html(index=False, escape=True, border=0, na_rep="-", float_format=lambda x: f"{x:.3f}")


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _action_text(action: Any) -> str:
    if action.kind == "bash":
        return f"$ {action.command or ''}"
    if action.kind == "write":
        return f"write {action.path or ''}\n{action.content or ''}"
    return action.kind


def render_attempt(a: Attempt, run_label: str, open_: bool = False) -> str:
    tokens = a.prompt_tokens + a.completion_tokens
    head = (f"<span class='badge {e(a.status)}'>{e(a.status)}</span> <b>{e(a.task_id)}</b> · sample {a.sample}"
            f" · {e(run_label)} · reward {a.reward:.2f} · {a.n_steps} steps · reason {e(a.reason or '-')}"
            f" · exit {e(a.exit_reason or '-')} · {tokens} tok · ${a.cost:.4f} · {a.durations.total:.1f} s")
    parts = [f"<details class='attempt' data-run='{e(run_label)}' data-task='{e(a.task_id)}' "
             f"data-status='{e(a.status)}'{' open' if open_ else ''}><summary>{head}</summary><div class='body'>",
             f"<div class='meta'>key {e(a.key)} · model {e(a.model)} · image {e(a.image[:19])} · "
             f"{a.patch_files} files changed · {e(a.started_at)} → {e(a.finished_at)}</div>"]
    if a.error:
        parts.append(f"<div class='label'>infra error</div><pre class='err'>{e(clip(a.error))}</pre>")
    start = [m for m in a.messages[:2] if m.get("role") in ("system", "user")]
    if start:
        parts.append("<details><summary>conversation start</summary>" + "".join(
            f"<div class='label'>{e(str(m.get('role')))}</div><pre>{e(clip(_content_text(m.get('content'))))}</pre>"
            for m in start) + "</details>")
    if a.tests:
        rows = "".join(f"<tr><td>{e(t.id)}</td><td class='{'passed' if t.outcome == 'passed' else 'failed-t'}'>"
                       f"{e(t.outcome)}</td><td>{e(clip(t.message, 2000))}</td></tr>" for t in a.tests)
        parts.append(f"<div class='label'>tests</div><table><tr><th>test</th><th>outcome</th><th>message</th></tr>"
                     f"{rows}</table>")
    if a.steps:
        parts.append("<ol class='steps' start='1'>")
        for s in a.steps:
            exit_code = "-" if s.exit_code is None else str(s.exit_code)
            parts.append(
                f"<li><div class='step-h'>step {s.index + 1} · exit code {e(exit_code)}"
                f"{' · TIMED OUT' if s.timed_out else ''} · {s.prompt_tokens}+{s.completion_tokens} tok"
                f" · model {s.model_seconds:.1f} s · tool {s.tool_seconds:.1f} s</div>"
                f"<div class='label'>model output</div><pre class='model'>{e(clip(s.raw_output))}</pre>"
                f"<div class='label'>action</div><pre class='act'>"
                f"{e(clip(chr(10).join(_action_text(x) for x in s.actions) or '(no action parsed)'))}</pre>"
                f"<div class='label'>observation</div><pre>{e(clip(s.observation))}</pre></li>")
        parts.append("</ol>")
    parts.append("</div></details>\n")
    return "".join(parts)


def _runs_table(runs: Sequence[RunData]) -> pd.DataFrame:
    rows = []
    for r in runs:
        m = r.reader.manifest
        rows.append({"run": r.label, "folder": str(r.reader.dir), "model": m.model, "tasks": len(m.task_suite),
                     "samples": m.config.get("samples", ""), "temperature": m.config.get("temperature", ""),
                     "seed": m.seed, "harness": m.harness_version, "started": m.started_at,
                     "finished": m.finished_at or "(not finished)"})
    return pd.DataFrame(rows)


def write_html(path: Path, runs: Sequence[RunData], comps: Sequence[tuple[str, str, metrics.Comparison]],
               rounds: Sequence[dict[str, Any]]) -> None:
    nonce = secrets.token_urlsafe(16)
    plots: list[tuple[str, Optional[str], str]] = [
        ("Solved rate by domain", plot_by_level(runs, "domain"), ""),
        ("Solved rate by difficulty", plot_by_level(runs, "difficulty"), ""),
        ("pass@k", plot_pass_at_k(runs), "errors excluded; tasks with fewer than k valid samples left out of k"),
        ("Cost vs score", plot_cost_vs_score(runs), "error bars: 95% bootstrap CI over tasks"),
        ("Steps distribution", plot_steps(runs), "valid (non-error) attempts"),
    ]
    heat, note = plot_heatmap(runs)
    plots.append(("Per-task solved rate across runs", heat, note))
    if rounds:
        plots.append(("Pass rate by round", plot_rounds(rounds), "shaded: 95% CI"))
    tasks = sorted({t for r in runs for t in r.df["task_id"].astype(str)})
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        w = f.write
        w("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
          f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
          f"style-src 'unsafe-inline'; script-src 'nonce-{nonce}'\">"
          "<meta name='viewport' content='width=device-width,initial-scale=1'>"
          f"<title>harness report: {e(', '.join(r.label for r in runs))}</title><style>{CSS}</style></head><body>")
        w(f"<h1>harness report</h1><p class='meta'>generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} · "
          f"{len(runs)} run(s). Rates and pass@k exclude infra errors (status=error); CIs: 95% bootstrap over "
          f"tasks.</p>")
        w(f"<h2>Runs</h2>{html_table(_runs_table(runs))}")
        w(f"<h2>Overview</h2>{html_table(overview_table(runs))}")
        w("<h2>Plots</h2><div class='grid'>")
        for title, img, caption in plots:
            if img:
                w(f"<figure><img src='{img}' alt='{e(title)}'><figcaption>{e(title)}"
                  f"{(': ' + e(caption)) if caption else ''}</figcaption></figure>")
        w("</div>")
        if rounds:
            w(f"<h2>By training round</h2>{html_table(rounds_table(rounds))}")
        if comps:
            w(f"<h2>Compared with {e(runs[0].label)} (paired by task)</h2>{html_table(comparison_table(comps))}")
            for a, b, c in comps:
                w(f"<p><b>{e(b)}</b>: improved: {e(id_list(c.improved, 50))}; regressed: {e(id_list(c.regressed, 50))}; "
                  f"test: {e(c.test)}</p>")
        for level in ("domain", "difficulty"):
            w(f"<h2>By {level}</h2>{html_table(level_table(runs, level))}")
        w(f"<h2>Failure reasons (failed attempts)</h2>{html_table(reasons_table(runs))}")
        w(f"<h2>Infra errors (status=error, not counted in rates)</h2>{html_table(errors_table(runs))}")
        w("<h2>Per task</h2><details><summary>show table</summary>"
          f"{html_table(level_table(runs, 'task'))}</details>")
        # Trajectory viewer: streamed from disk, one attempt at a time.
        w("<h2>Trajectories</h2><div class='filters'>run <select id='f-run'><option value=''>all</option>")
        w("".join(f"<option value='{e(r.label)}'>{e(r.label)}</option>" for r in runs))
        w("</select>task <select id='f-task'><option value=''>all</option>")
        w("".join(f"<option value='{e(t)}'>{e(t)}</option>" for t in tasks))
        w("</select>outcome <select id='f-status'><option value=''>all</option><option value='solved'>solved</option>"
          "<option value='failed'>failed</option><option value='error'>error</option></select>"
          "<span id='f-count' class='meta'></span></div>")
        for run in runs:
            for i, attempt in enumerate(run.reader.iter_attempts()):
                w(render_attempt(attempt, run.label, open_=(i == 0)))
        w(f"<script nonce='{nonce}'>{SCRIPT}</script></body></html>\n")
    tmp.replace(path)


# ---------------------------------------------------------------- markdown

def _md_cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if np.isnan(value) else f"{value:.3f}"
    return str(value).replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_none_\n"
    lines = ["| " + " | ".join(_md_cell(c) for c in df.columns) + " |",
             "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def markdown_summary(runs: Sequence[RunData], comps: Sequence[tuple[str, str, metrics.Comparison]],
                     rounds: Sequence[dict[str, Any]] = ()) -> str:
    out = ["## harness results", ""]
    head, ks = [], headline_ks(runs)
    for r in runs:
        o = r.overall
        row = {"run": r.label, "model": r.reader.manifest.model, "tasks": o["n_tasks"],
               "attempts": o["n_attempts"], "errors": o["n_errors"],
               "solved rate (95% CI)": f"{o['solved_rate']:.3f} ({o['solved_ci_low']:.3f}-{o['solved_ci_high']:.3f})"
               if not np.isnan(o["solved_rate"]) else "-"}
        for col in _pass_cols(r.summary):
            if int(col[5:]) in ks:
                row[col] = o[col]
        row.update({"mean reward": o["mean_reward"], "cost (USD)": o["total_cost"]})
        head.append(row)
    out += [markdown_table(pd.DataFrame(head)), ""]
    if rounds:
        out += ["### By training round", "", markdown_table(rounds_table(rounds)), ""]
    if comps:
        out += ["### Compared with the baseline", ""]
        for a, b, c in comps:
            out.append(f"- **{_md_cell(b)}** vs **{_md_cell(a)}** on {c.n_tasks} shared tasks: "
                       f"{c.diff:+.3f} solved rate (95% CI {c.ci_low:+.3f} to {c.ci_high:+.3f}), "
                       f"{c.test} p = {c.p_value:.4f}; improved {len(c.improved)} ({_md_cell(id_list(c.improved))}), "
                       f"regressed {len(c.regressed)} ({_md_cell(id_list(c.regressed))})")
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
    out.append("_Rates are means over tasks of per-task solved fractions; pass@k uses the unbiased estimator "
               "(Chen et al. 2021); CIs are 95% bootstrap over tasks._")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- entry point

def build_report(paths: Sequence[str | Path], out_dir: Optional[str | Path] = None,
                 extra_rounds: Optional[Sequence[dict[str, Any]]] = None, n_boot: int = 1000, seed: int = 0,
                 echo: Callable[[str], Any] = print) -> dict[str, Path]:
    """Print the terminal tables (through `echo`) and write report.html, summary.{csv,parquet,md} to out_dir.

    `paths` are run folders; a folder with rounds.jsonl but no manifest.json (a post-training run)
    contributes its rounds only. out_dir defaults to the folder itself when there is one,
    reports/<UTC timestamp>/ otherwise. `extra_rounds` are per-round metric rows (round, split, pass@1,
    ci_low, ci_high); they and any rounds.jsonl add a "pass rate by round" plot and table.
    """
    if not paths:
        raise UserError("harness report needs at least one run folder")
    run_dirs = [Path(p) for p in paths if (Path(p) / MANIFEST).exists() or not (Path(p) / ROUNDS_FILE).exists()]
    runs = load_runs(run_dirs, n_boot, seed)
    rounds = normalize_rounds(extra_rounds or [], "extra round metrics")
    several = len(paths) > 1
    for p in paths:
        rounds += load_rounds(p, run=Path(p).name if several else "")
    if out_dir is None:
        out_dir = Path(paths[0]) if not several else \
            Path("reports") / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    comps = comparisons(runs, n_boot, seed)
    echo(terminal_report(runs, comps, rounds))
    files = {"html": out / "report.html", "csv": out / "summary.csv", "parquet": out / "summary.parquet",
             "md": out / "summary.md"}
    table = summary_table(runs)
    table.to_csv(files["csv"], index=False)
    table.to_parquet(files["parquet"], index=False)
    files["md"].write_text(markdown_summary(runs, comps, rounds), encoding="utf-8")
    write_html(files["html"], runs, comps, rounds)
    return files


def print_summary(run_dir: str | Path, echo: Callable[[str], Any] = print, n_boot: int = 1000) -> None:
    """The terminal tables for one run (what `harness eval` prints when it finishes)."""
    runs = load_runs([run_dir], n_boot)
    echo(terminal_report(runs, []))
