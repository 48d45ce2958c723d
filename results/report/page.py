"""report.html: one self-contained page of tables, plots and the trajectory viewer.

Plots are base64 PNGs, nothing comes from a CDN, and a strict Content-Security-Policy lets only the
page's own nonce'd script run and nothing be fetched. The style and the viewer's filter script are
static/report.css and static/report.js, inlined. Everything from a run (model output, observations,
test messages, task ids) is untrusted and goes through html.escape. Trajectories are streamed from
disk into the page one attempt at a time.
"""

from __future__ import annotations

import html
import os
import secrets
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from results import metrics
from results.export.messages import content_text
from results.report.plots import (
    plot_by_level,
    plot_cost_vs_score,
    plot_heatmap,
    plot_pass_at_k,
    plot_rounds,
    plot_steps,
)
from results.report.runs import RunData
from results.report.tables import (
    comparison_table,
    errors_table,
    id_list,
    level_table,
    overview_table,
    reasons_table,
    rounds_table,
)
from results.schema import Attempt
from results.schema import clip as clip_text
from results.store import kept_diff, kept_file

TEXT_LIMIT = 20_000  # characters of one text block shown in the viewer (head and tail are kept)

e = html.escape  # quote=True by default: safe in text and in attribute values


def _static(name: str) -> str:
    return resources.files("results.report").joinpath("static", name).read_text(encoding="utf-8")


CSS = _static("report.css")
SCRIPT = _static("report.js")


def clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    """Long text keeps its head (two thirds) and tail: the page stays usable with huge observations."""
    return clip_text("" if text is None else str(text), limit, head_share=2 / 3)


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p class='meta'>(none)</p>"
    return df.to_html(index=False, escape=True, border=0, na_rep="-", float_format=lambda x: f"{x:.3f}")


def _action_text(action: Any) -> str:
    if action.kind == "bash":
        return f"$ {action.command or ''}"
    if action.kind == "write":
        return f"write {action.path or ''}\n{action.content or ''}"
    return action.kind


def _phases(a: Attempt) -> str:
    """The attempt's phase timings and its trace (a link when HARNESS_TRACE_URL gives the viewer's address,
    e.g. http://127.0.0.1:6006/projects/UHJvamVjdDox/traces/{trace_id} for Phoenix)."""
    d = a.durations
    names = ("acquire", "setup", "agent", "model", "model_unanswered", "sandbox", "capture", "evaluation")
    text = " · ".join(f"{n.replace('_', ' ')} {getattr(d, n):.2f} s" for n in names if getattr(d, n))
    if a.trace_id:
        url = os.environ.get("HARNESS_TRACE_URL", "")
        trace = e(a.trace_id)
        if url:
            trace = f"<a href='{e(url.replace('{trace_id}', a.trace_id))}'>{trace}</a>"
        text += f" · trace {trace}"
    return f"<div class='meta'>{text}</div>" if text else ""


KEPT_FILE_CHARS = 4000  # of each kept file shown inline (the whole file stays in the run folder)


def _verifier_parts(a: Attempt, run_dir: Optional[Path]) -> list[str]:
    """Harbor tasks: test.sh's output and the files kept with the attempt (verifier/*, artifacts/*), shown
    inline (the page fetches nothing), each with its path in the run folder."""
    parts = []
    if a.verifier_output:
        parts.append(f"<div class='label'>verifier output</div><pre>{e(clip(a.verifier_output))}</pre>")
    if a.files:
        items = []
        for f in a.files:
            text = ""
            if run_dir is not None and f.path:  # read_object checks it against its sha256
                text = kept_file(run_dir, f)[: 4 * KEPT_FILE_CHARS].decode("utf-8", "replace")
            items.append(
                f"<details><summary>{e(f.name)} · {f.size} bytes · {e(f.path or 'not written')}</summary>"
                f"<pre>{e(clip(text, KEPT_FILE_CHARS))}</pre></details>"
            )
        parts.append("<div class='label'>kept files</div>" + "".join(items))
    return parts


def render_attempt(
    a: Attempt,
    run_label: str,
    open_: bool = False,
    diff: Optional[str] = None,
    run_dir: Optional[Path] = None,
) -> str:
    tokens = a.prompt_tokens + a.completion_tokens
    head = (
        f"<span class='badge {e(a.status)}'>{e(a.status)}</span> <b>{e(a.task_id)}</b> · sample {a.sample}"
        f" · {e(run_label)} · reward {a.reward:.2f} · {a.n_steps} steps · reason {e(a.reason or '-')}"
        f" · exit {e(a.exit_reason or '-')} · {tokens} tok · ${a.cost:.4f} · {a.durations.total:.1f} s"
    )
    parts = [
        f"<details class='attempt' data-run='{e(run_label)}' data-task='{e(a.task_id)}' "
        f"data-status='{e(a.status)}'{' open' if open_ else ''}><summary>{head}</summary><div class='body'>",
        f"<div class='meta'>key {e(a.key)} · model {e(a.model)} · image {e(a.image[:19])} · "
        f"{a.patch_files} files changed · {e(a.started_at)} → {e(a.finished_at)}</div>",
        _phases(a),
    ]
    if a.impossible:
        parts.append("<div class='label err'>impossible task: a pass here is a cheat</div>")
    if a.flags:
        items = "".join(
            f"<li>{e(f.pattern)} at step {f.step + 1}: <code>{e(clip(f.evidence, 200))}</code></li>"
            for f in a.flags
        )
        parts.append(f"<div class='label'>exploit flags</div><ul class='flags'>{items}</ul>")
    if a.error:
        parts.append(f"<div class='label'>infra error</div><pre class='err'>{e(clip(a.error))}</pre>")
    parts.append(_conversation_start(a))
    parts.append(_tests_table(a))
    parts.extend(_verifier_parts(a, run_dir))
    parts.append(_steps_list(a))
    if diff:
        parts.append(_final_diff(a, diff))
    parts.append("</div></details>\n")
    return "".join(parts)


def _conversation_start(a: Attempt) -> str:
    """The system prompt and the task, folded ("" without them)."""
    start = [m for m in a.messages[:2] if m.get("role") in ("system", "user")]
    if not start:
        return ""
    return (
        "<details><summary>conversation start</summary>"
        + "".join(
            f"<div class='label'>{e(str(m.get('role')))}</div>"
            f"<pre>{e(clip(content_text(m.get('content'))))}</pre>"
            for m in start
        )
        + "</details>"
    )


def _tests_table(a: Attempt) -> str:
    """The graded tests with their outcomes and messages ("" without tests)."""
    if not a.tests:
        return ""
    rows = "".join(
        f"<tr><td>{e(t.id)}</td><td class='{'passed' if t.outcome == 'passed' else 'failed-t'}'>"
        f"{e(t.outcome)}</td><td>{e(clip(t.message, 2000))}</td></tr>"
        for t in a.tests
    )
    return (
        f"<div class='label'>tests</div><table><tr><th>test</th><th>outcome</th><th>message</th></tr>"
        f"{rows}</table>"
    )


def _steps_list(a: Attempt) -> str:
    """Each step: its figures, the model's output, the parsed actions and the observation."""
    if not a.steps:
        return ""
    parts = ["<ol class='steps' start='1'>"]
    for s in a.steps:
        exit_code = "-" if s.exit_code is None else str(s.exit_code)
        parts.append(
            f"<li><div class='step-h'>step {s.index + 1} · exit code {e(exit_code)}"
            f"{' · TIMED OUT' if s.timed_out else ''} · {s.prompt_tokens}+{s.completion_tokens} tok"
            f" · model {s.model_seconds:.1f} s · tool {s.tool_seconds:.1f} s</div>"
            f"<div class='label'>model output</div><pre class='model'>{e(clip(s.raw_output))}</pre>"
            f"<div class='label'>action</div><pre class='act'>"
            f"{e(clip(chr(10).join(_action_text(x) for x in s.actions) or '(no action parsed)'))}</pre>"
            f"<div class='label'>observation</div><pre>{e(clip(s.observation))}</pre></li>"
        )
    parts.append("</ol>")
    return "".join(parts)


def _final_diff(a: Attempt, diff: str) -> str:
    """The kept diff of the agent's changes, coloured line by line, folded."""
    omitted = a.changes.omitted if a.changes else []
    note = f" (over the keep cap, not stored: {', '.join(omitted)})" if omitted else ""
    return (
        f"<details class='diff'><summary>final diff{e(note)}</summary><pre class='diff'>"
        + "".join(
            f"<span class='{_diff_class(line)}'>{e(line)}</span>\n"
            for line in clip(diff, 4 * TEXT_LIMIT).splitlines()
        )
        + "</pre></details>"
    )


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---", "@@")):
        return "dh"
    return {"+": "da", "-": "dd"}.get(line[:1], "dc")


def _runs_table(runs: Sequence[RunData]) -> pd.DataFrame:
    rows = []
    for r in runs:
        m = r.reader.manifest
        rows.append(
            {
                "run": r.label,
                "folder": str(r.reader.dir),
                "model": m.model,
                "tasks": len(m.task_suite),
                "samples": m.config.get("samples", ""),
                "temperature": m.config.get("temperature", ""),
                "seed": m.seed,
                "harness": m.harness_version,
                "started": m.started_at,
                "finished": m.finished_at or "(not finished)",
            }
        )
    return pd.DataFrame(rows)


def write_html(
    path: Path,
    runs: Sequence[RunData],
    comps: Sequence[tuple[str, str, metrics.Comparison]],
    rounds: Sequence[dict[str, Any]],
) -> None:
    nonce = secrets.token_urlsafe(16)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        w = f.write
        w(
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
            f"style-src 'unsafe-inline'; script-src 'nonce-{nonce}'\">"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>harness report: {e(', '.join(r.label for r in runs))}</title>"
            f"<style>\n{CSS}</style></head><body>"
        )
        w(_summary(runs, comps, rounds))
        # Trajectory viewer: streamed from disk, one attempt at a time.
        w(_trajectory_filters(runs))
        for run in runs:
            for i, attempt in enumerate(run.reader.iter_attempts()):
                diff = kept_diff(run.reader.dir, attempt) if attempt.changes else None
                w(render_attempt(attempt, run.label, open_=(i == 0), diff=diff, run_dir=Path(run.reader.dir)))
        w(f"<script nonce='{nonce}'>\n{SCRIPT}</script></body></html>\n")
    tmp.replace(path)


def _plots(runs: Sequence[RunData], rounds: Sequence[dict[str, Any]]) -> list[tuple[str, Optional[str], str]]:
    """(title, image as a data: URL or None when there is nothing to plot, caption) for each plot."""
    plots: list[tuple[str, Optional[str], str]] = [
        ("Solved rate by domain", plot_by_level(runs, "domain"), ""),
        ("Solved rate by difficulty", plot_by_level(runs, "difficulty"), ""),
        (
            "pass@k",
            plot_pass_at_k(runs),
            "errors excluded; tasks with fewer than k valid samples left out of k",
        ),
        ("Cost vs score", plot_cost_vs_score(runs), "error bars: 95% bootstrap CI over tasks"),
        ("Steps distribution", plot_steps(runs), "valid (non-error) attempts"),
    ]
    heat, note = plot_heatmap(runs)
    plots.append(("Per-task solved rate across runs", heat, note))
    if rounds:
        plots.append(("Pass rate by round", plot_rounds(rounds), "shaded: 95% CI"))
    return plots


def _summary(
    runs: Sequence[RunData],
    comps: Sequence[tuple[str, str, metrics.Comparison]],
    rounds: Sequence[dict[str, Any]],
) -> str:
    """The report above the trajectories: runs, overview, plots, rounds, comparisons and breakdowns."""
    parts = [
        "<h1>harness report</h1>"
        f"<p class='meta'>generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} · "
        f"{len(runs)} run(s). Rates and pass@k exclude infra errors (status=error); "
        f"CIs: 95% bootstrap over tasks.</p>",
        f"<h2>Runs</h2>{html_table(_runs_table(runs))}",
        f"<h2>Overview</h2>{html_table(overview_table(runs))}",
        "<h2>Plots</h2><div class='grid'>",
    ]
    for title, img, caption in _plots(runs, rounds):
        if img:
            parts.append(
                f"<figure><img src='{img}' alt='{e(title)}'><figcaption>{e(title)}"
                f"{(': ' + e(caption)) if caption else ''}</figcaption></figure>"
            )
    parts.append("</div>")
    if rounds:
        parts.append(f"<h2>By training round</h2>{html_table(rounds_table(rounds))}")
    if comps:
        parts.append(
            f"<h2>Compared with {e(runs[0].label)} (paired by task)</h2>{html_table(comparison_table(comps))}"
        )
        for a, b, c in comps:
            parts.append(
                f"<p><b>{e(b)}</b>: improved: {e(id_list(c.improved, 50))}; "
                f"regressed: {e(id_list(c.regressed, 50))}; "
                f"test: {e(c.test)}</p>"
            )
    for level in ("domain", "difficulty"):
        parts.append(f"<h2>By {level}</h2>{html_table(level_table(runs, level))}")
    parts.append(f"<h2>Failure reasons (failed attempts)</h2>{html_table(reasons_table(runs))}")
    parts.append(
        f"<h2>Infra errors (status=error, not counted in rates)</h2>{html_table(errors_table(runs))}"
    )
    parts.append(
        "<h2>Per task</h2><details><summary>show table</summary>"
        f"{html_table(level_table(runs, 'task'))}</details>"
    )
    return "".join(parts)


def _trajectory_filters(runs: Sequence[RunData]) -> str:
    """The trajectory viewer's heading and its run / task / outcome filters (SCRIPT applies them)."""
    tasks = sorted({t for r in runs for t in r.df["task_id"].astype(str)})
    return (
        "<h2>Trajectories</h2><div class='filters'>run <select id='f-run'><option value=''>all</option>"
        + "".join(f"<option value='{e(r.label)}'>{e(r.label)}</option>" for r in runs)
        + "</select>task <select id='f-task'><option value=''>all</option>"
        + "".join(f"<option value='{e(t)}'>{e(t)}</option>" for t in tasks)
        + "</select>outcome <select id='f-status'><option value=''>all</option>"
        "<option value='solved'>solved</option>"
        "<option value='failed'>failed</option><option value='error'>error</option></select>"
        "<span id='f-count' class='meta'></span></div>"
    )
