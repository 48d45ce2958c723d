"""`harness export --format inspect`: written by inspect_ai's own writer, read back by inspect_ai."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from results.store import RunStore, open_run
from results.synthetic import make_attempt, make_run

pytest.importorskip("inspect_ai")  # an optional extra; .ci/setup --test installs it

ROOT = Path(__file__).resolve().parent.parent
TASKS = [("fix-add", "coding", 1), ("sum", "math", 2)]


@pytest.fixture
def run(tmp_path) -> Path:
    folder = make_run(
        tmp_path / "run",
        "test/model",
        TASKS,
        samples=2,
        outcome=lambda t, s: "solved" if (t, s) != ("sum", 1) else "failed",
    )
    with RunStore.open(folder) as store:
        store.append(make_attempt(store.run_id, "sum", 2, status="error"))
        store.append(make_attempt(store.run_id, "fix-add", 2, native_tools=False, n_steps=2, solved=False))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_inspect_reads_back_our_log(run, tmp_path, suffix):
    from inspect_ai.log import read_eval_log

    out = tmp_path / f"log{suffix}"
    proc = subprocess.run(
        [sys.executable, "harness.py", "export", str(run), "--format", "inspect", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "6 samples" in proc.stdout
    log = read_eval_log(str(out))
    assert log.status == "success" and log.eval.model == "test/model"
    assert len(log.samples) == 6 and log.eval.config.epochs == 3
    by_key = {(s.id, s.epoch): s for s in log.samples}
    rewards = {(a.task_id, a.sample + 1): a.reward for a in open_run(run).iter_attempts()}
    assert by_key["sum", 2].scores["harness"].value == rewards["sum", 2] < 1.0
    assert by_key["sum", 2].scores["harness"].answer == "failed"
    assert by_key["fix-add", 1].scores["harness"].value == 1.0
    assert by_key["sum", 3].error is not None and not by_key["sum", 3].scores  # infra error: no score
    native = by_key["fix-add", 1]
    calls = [c for m in native.messages if m.role == "assistant" for c in (m.tool_calls or [])]
    assert calls[0].function == "bash" and calls[0].arguments == {"command": "ls -la"}
    tool_msgs = [m for m in native.messages if m.role == "tool"]
    assert tool_msgs and tool_msgs[0].function == "bash" and tool_msgs[0].tool_call_id == calls[0].id
    assert native.input.startswith("Fix the bug in fix-add.py")
    metrics = log.results.scores[0].metrics
    assert metrics["accuracy"].value == pytest.approx(3 / 5)  # 3 solved of 5 scored (the error is left out)


def test_inspect_dataframes_read_it(run, tmp_path):
    from inspect_ai.analysis import samples_df

    from results.export.inspect_log import export_inspect

    path, n = export_inspect(run, tmp_path / "logs" / "run.eval")
    df = samples_df(str(path))
    assert len(df) == n == 6
    assert sorted(json.loads(json.dumps(df["id"].tolist()))) == sorted(["fix-add"] * 3 + ["sum"] * 3)
