"""Report: every attempt in the page, untrusted text escaped, self-contained, summaries, rounds,
screenshot."""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from results import cli, report, rounds
from results.errors import UserError
from results.run_writer import RunStore
from results.store import open_run
from results.synthetic import make_attempt, make_run

EVIL = '<script>alert("pwned")</script></pre><img src=x onerror=alert(1)>'
TASKS = [(f"task-{i}", ["coding", "math", "text"][i % 3], 1 + i % 3) for i in range(6)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    base = make_run(
        root / "base",
        "local/smollm2",
        TASKS,
        samples=2,
        native_tools=False,
        outcome=lambda t, s: (
            "error" if (t, s) == ("task-5", 1) else ("solved" if int(t[-1]) % 2 == 0 else "failed")
        ),
    )
    tuned = make_run(
        root / "tuned",
        "local/smollm2+lora",
        TASKS,
        samples=2,
        outcome=lambda t, s: "failed" if t == "task-4" else "solved",
    )
    with RunStore.open(tuned) as store:  # model output and observations are untrusted text
        hostile = make_attempt(store.run_id, "task-0", 2, observation=EVIL, model="local/smollm2+lora")
        hostile.steps[1].raw_output = EVIL
        hostile.tests[0].message = EVIL
        store.append(hostile)
    return base, tuned


@pytest.fixture(scope="module")
def built(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    printed: list[str] = []
    paths = report.build_report(list(runs), out, n_boot=200, echo=printed.append)
    return paths, "\n".join(printed)


def test_terminal_tables(built):
    _, text = built
    for heading in (
        "== overview",
        "== by domain",
        "== by difficulty",
        "== compared with the baseline",
        "== failure reasons",
        "== infra errors",
    ):
        assert heading in text
    assert "base" in text and "tuned" in text and "sandbox_died" in text


def test_terminal_tables_fit_80_columns_with_the_run_ids_eval_gives(tmp_path, monkeypatch):
    # `harness eval` names a run by a timestamp and the model (~35 characters): as a table column or in every
    # row they would wrap at 80 columns. The tables say #1, #2 and a legend gives each whole id on one line.
    monkeypatch.setenv("COLUMNS", "80")
    ids = ["20261206T062301Z-local-smollm2-135m", "20261206T070512Z-local-smollm2-135m-lora"]
    tasks = [(f"a-task-with-a-long-name-{i}", "coding", 1) for i in range(8)]
    base = make_run(tmp_path / ids[0], "local:smollm2-135m", tasks, samples=1, outcome=lambda t, s: "failed")
    tuned = make_run(
        tmp_path / ids[1], "local:smollm2-135m+lora", tasks, samples=1, outcome=lambda t, s: "solved"
    )
    printed: list[str] = []
    report.build_report([base, tuned], tmp_path / "report", n_boot=50, echo=printed.append)
    lines = "\n".join(printed).splitlines()
    assert [line for line in lines if len(line) > 80] == []
    assert lines[:3] == ["== runs", f"#1 {ids[0]}", f"#2 {ids[1]}"]
    assert any(line.startswith("  #2 vs #1: improved a-task-with-a-long-name-0,") for line in lines)


def test_html_contains_every_attempt_with_its_steps(built, runs):
    paths, _ = built
    page = paths["html"].read_text(encoding="utf-8")
    total = 0
    for run_dir in runs:
        for attempt in open_run(run_dir).iter_attempts():
            total += 1
            assert f"key {attempt.key} " in page
            for step in attempt.steps:
                assert 0 < len(step.observation) < 20_000  # short: shown whole (long ones: see below)
                assert html.escape(step.observation) in page
                for action in step.actions:
                    if action.command:
                        assert html.escape("$ " + action.command) in page
            for test in attempt.tests:
                assert html.escape(test.id) in page
    assert page.count("<details class='attempt'") == total == 25
    # Filters: one option per task, and outcome data attributes the script filters on.
    for task, _, _ in TASKS:
        assert f"<option value='{task}'>" in page
    assert page.count("data-status='error'") == 1


def test_untrusted_text_is_escaped_and_page_is_self_contained(built):
    paths, _ = built
    page = paths["html"].read_text(encoding="utf-8")
    assert EVIL not in page and "<img src=x" not in page
    assert html_escaped(EVIL) in page
    assert page.count("<script") == 1  # only the page's own (nonce'd) filter script
    assert re.search(r"<script nonce='[^']+'>", page)
    assert "script-src 'nonce-" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", page)  # nothing fetched from anywhere
    images = re.findall(r"<img src='([^']*)'", page)
    assert len(images) >= 6 and all(src.startswith("data:image/png;base64,") for src in images)


def test_page_inlines_the_packaged_style_and_script(built):
    paths, _ = built
    page = paths["html"].read_text(encoding="utf-8")
    static = Path(report.__file__).parent / "static"  # shipped as package data (pyproject.toml)
    css, js = (
        (static / "report.css").read_text(encoding="utf-8"),
        (static / "report.js").read_text(encoding="utf-8"),
    )
    assert "details.attempt" in css and "getElementById('f-status')" in js  # the real files, not stubs
    assert f"<style>\n{css}</style>" in page
    assert re.search(r"<script nonce='[^']+'>\n" + re.escape(js) + "</script>", page)


def html_escaped(text: str) -> str:
    # The standard library's escaping, not the report's own helper: the judge must be independent.
    return html.escape(text, quote=True)


def test_a_long_observation_keeps_its_head_and_tail(tmp_path):
    head, middle, tail = "A" * 13_333, "B" * 30_001, "C" * 6_666  # 50,000 characters; 20,000 are shown
    run_dir = make_run(tmp_path / "long", "m", [("task-0", "coding", 1)], samples=1)
    with RunStore.open(run_dir) as store:
        store.append(make_attempt(store.run_id, "task-0", 1, observation=head + middle + tail))
    paths = report.build_report([run_dir], tmp_path / "out", n_boot=10, echo=lambda _: None)
    page = paths["html"].read_text(encoding="utf-8")
    assert head + "\n[... 30001 characters cut here ...]\n" + tail in page
    assert "A" * 13_334 not in page and "C" * 6_667 not in page and "B" * 100 not in page


def test_summary_files(built, runs):
    paths, _ = built
    csv = pd.read_csv(paths["csv"])
    parquet = pd.read_parquet(paths["parquet"])
    assert len(csv) == len(parquet) > 0
    assert set(csv["run"]) == {"base", "tuned"}
    assert set(csv["level"]) == {"overall", "domain", "difficulty", "task"}
    overall = parquet[parquet["level"] == "overall"].set_index("run")
    assert overall.loc["base", "n_errors"] == 1
    assert overall.loc["base", "solved_rate"] == pytest.approx(
        open_run(runs[0])
        .read_attempts()
        .query("status != 'error'")
        .groupby("task_id")["solved"]
        .mean()
        .mean()
    )
    md = paths["md"].read_text()
    assert md.startswith("## harness results") and "| run | model |" in md
    assert "**tuned** vs **base**" in md and "### By domain" in md


@pytest.mark.slow
def test_rounds_plot_only_when_round_metrics_exist(runs, tmp_path):
    base = runs[0]
    paths = report.build_report([base], tmp_path / "plain", n_boot=50, echo=lambda s: None)
    assert "Pass rate by round" not in paths["html"].read_text()
    extra = [
        {
            "round": r,
            "split": "heldout",
            "pass@1": 0.3 + 0.1 * r,
            "ci_low": 0.2 + 0.1 * r,
            "ci_high": 0.4 + 0.1 * r,
        }
        for r in range(3)
    ]
    paths = report.build_report(
        [base], tmp_path / "extra", extra_rounds=extra, n_boot=50, echo=lambda s: None
    )
    assert "Pass rate by round" in paths["html"].read_text()

    with_file = tmp_path / "with-rounds"
    shutil.copytree(base, with_file)
    (with_file / rounds.ROUNDS_FILE).write_text(
        "".join(json.dumps(r) + "\n" for r in extra) + '{"round": 3, "spl'
    )
    assert [r["round"] for r in rounds.load_rounds(with_file)] == [0, 1, 2]  # torn tail ignored
    paths = report.build_report([with_file], None, n_boot=50, echo=lambda s: None)
    assert paths["html"].parent == with_file  # one run: the report goes into its folder
    assert "Pass rate by round" in paths["html"].read_text()

    with pytest.raises(UserError, match="row 1 is not a round record"):
        rounds.normalize_rounds([{"split": "train"}], "rounds")


def test_post_training_folder_contributes_its_rounds(tmp_path):
    # The training loop's folder: no manifest.json, rounds.jsonl in the long form (metric, value).
    train = tmp_path / "train-run"
    train.mkdir()
    rows = [
        {"round": r, "split": split, "metric": metric, "value": v, "ci_low": v - 0.1, "ci_high": v + 0.1}
        for r in range(3)
        for split, metric, v in (
            ("heldout", "pass@1", 0.2 + 0.1 * r),
            ("train", "pass@8_t0.7", 0.5 + 0.1 * r),
        )
    ]
    (train / rounds.ROUNDS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    printed: list[str] = []
    paths = report.build_report([train], None, n_boot=10, echo=printed.append)
    assert paths["html"].parent == train
    page = paths["html"].read_text()
    assert "Pass rate by round" in page and "pass@8_t0.7" in page
    assert "== by training round" in printed[0] and "heldout" in printed[0]
    assert "### By training round" in paths["md"].read_text()


def test_print_summary_for_one_run(runs):
    printed: list[str] = []
    report.print_summary(runs[0], echo=printed.append, n_boot=20)
    assert "== overview" in printed[0] and "base" in printed[0] and "compared" not in printed[0]


def test_empty_run_still_reports(tmp_path):
    make_run(tmp_path / "empty", "m", [], samples=1)
    paths = report.build_report([tmp_path / "empty"], tmp_path / "out", n_boot=10, echo=lambda s: None)
    assert "<h1>harness report</h1>" in paths["html"].read_text()


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_commands(runs, tmp_path, capsys):
    assert run_cli(["report", *map(str, runs), "--out", str(tmp_path), "--bootstrap", "50"]) == 0
    assert (tmp_path / "report.html").exists() and "wrote" in capsys.readouterr().out
    assert run_cli(["compare", str(runs[0]), str(runs[1]), "--bootstrap", "50"]) == 0
    out = capsys.readouterr().out
    assert "B - A = " in out and "improved (solved in B only): task-1, task-3" in out
    assert run_cli(["export", str(runs[1]), "--format", "sharegpt", "--out", str(tmp_path / "x.jsonl")]) == 0
    assert "wrote 13 sharegpt records" in capsys.readouterr().out
    for argv in (
        ["report", str(tmp_path / "nope")],
        ["compare", str(runs[0]), str(tmp_path)],
        ["export", str(tmp_path), "--format", "openai"],
    ):
        with pytest.raises(UserError) as err:
            run_cli(argv)
        assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


# ---------------------------------------------------------------- screenshot

CHROMIUM = Path("/usr/bin/chromium")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs /usr/bin/chromium (Debian package 'chromium') to render report.html headless",
)
def test_report_screenshot_in_headless_chromium(built, tmp_path):
    paths, _ = built
    shot = tmp_path / "report.png"
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1280,2000",
        paths["html"].resolve().as_uri(),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(tmp_path)}
    )
    assert shot.exists(), f"chromium wrote no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    data = shot.read_bytes()
    assert png_size(data) == (1280, 2000)
    from PIL import Image  # matplotlib depends on Pillow

    image = Image.open(shot).convert("RGB").resize((320, 500))
    colors = image.getcolors(maxcolors=320 * 500)
    assert len(colors) > 200  # plots and tables were drawn, not a blank or error page
    keep = os.environ.get("HARNESS_REPORT_SCREENSHOT")  # to look at it: set this to a path
    if keep:
        shutil.copy(shot, keep)
