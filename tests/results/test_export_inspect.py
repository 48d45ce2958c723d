"""`harness export --format inspect`: written by inspect_ai's own writer, read back by inspect_ai."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from results.run_writer import RunStore
from results.store import open_run
from results.synthetic import make_attempt, make_run

pytest.importorskip("inspect_ai")  # an optional extra; .ci/setup --test installs it

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.slow
def test_inspect_dataframes_read_it(run, tmp_path):
    from inspect_ai.analysis import samples_df

    from results.export.inspect_log import export_inspect

    path, n = export_inspect(run, tmp_path / "logs" / "run.eval")
    df = samples_df(str(path))
    assert len(df) == n == 6
    assert sorted(json.loads(json.dumps(df["id"].tolist()))) == sorted(["fix-add"] * 3 + ["sum"] * 3)


def test_inspect_dataframes_read_the_transcript_and_usage(run, tmp_path):
    """messages_df and events_df read the transcript Inspect records (model and tool events); token usage
    is per model call, per sample and for the eval, as Inspect writes it."""
    from inspect_ai.analysis import events_df, messages_df
    from inspect_ai.log import read_eval_log

    from results.export.inspect_log import export_inspect

    path, _ = export_inspect(run, tmp_path / "run.eval")
    attempts = {(a.task_id, a.sample + 1): a for a in open_run(run).iter_attempts()}
    log = read_eval_log(str(path))
    native = next(s for s in log.samples if (s.id, s.epoch) == ("fix-add", 1))
    a = attempts["fix-add", 1]
    kinds = [e.event for e in native.events]
    assert kinds[0] == "sample_init" and kinds[-1] == "score"
    models = [e for e in native.events if e.event == "model"]
    tools = [e for e in native.events if e.event == "tool"]
    assert len(models) == len(a.steps) and len(tools) == len(a.steps)  # one call per step here
    assert [m.output.usage.input_tokens for m in models] == [s.prompt_tokens for s in a.steps]
    assert [m.output.usage.output_tokens for m in models] == [s.completion_tokens for s in a.steps]
    assert tools[0].function == "bash" and tools[0].arguments == {"command": "ls -la"}
    assert tools[0].result == a.steps[0].observation
    assert models[1].input[-1].id == tools[0].message_id  # the tool result feeds the next model call
    usage = native.model_usage["test/model"]
    assert (usage.input_tokens, usage.output_tokens) == (a.prompt_tokens, a.completion_tokens)
    total = sum(x.prompt_tokens for x in attempts.values())
    assert log.stats.model_usage["test/model"].input_tokens == total

    messages = messages_df(str(path))
    assert messages["message_id"].notna().all()
    mine = messages[messages["sample_id"] == native.uuid]
    assert list(mine["role"][:4]) == ["system", "user", "assistant", "tool"]
    assert "ls -la" in str(mine[mine["role"] == "assistant"]["tool_calls"].iloc[0])
    events = events_df(str(path))
    assert set(events["event"]) == {"sample_init", "model", "tool", "score"}
    assert events["event_id"].is_unique
    text = next(s for s in log.samples if (s.id, s.epoch) == ("fix-add", 3))  # the text-protocol attempt
    assert [e.event for e in text.events].count("model") == len(attempts["fix-add", 3].steps)
    again, _ = export_inspect(run, tmp_path / "again.eval")  # ids are stable across exports
    assert [m.id for m in read_eval_log(str(again)).samples[0].messages] == [
        m.id for m in log.samples[0].messages
    ]


@pytest.mark.slow
def test_inspect_cli_runs():
    """The `inspect` command itself starts in this environment (its viewer imports the S3 client)."""
    proc = subprocess.run([str(INSPECT), "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import inspect_ai

    assert proc.stdout.strip() == inspect_ai.__version__


INSPECT = Path(sys.executable).with_name("inspect")
CHROMIUM = Path("/usr/bin/chromium")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _render(url: str, shot: Path, profile: Path, wanted: list[str]) -> str:
    """The page's text once every `wanted` string shows (or after ~60 s), and a screenshot, from headless
    Chromium driven over its DevTools protocol (the viewer is a script-built page: --dump-dom is early)."""
    import aiohttp

    port = _free_port()
    browser = subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--remote-debugging-port={port}",
            "--remote-debugging-address=127.0.0.1",
            "--window-size=1400,1000",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(profile)},
    )
    try:
        async with aiohttp.ClientSession() as http:
            targets = None
            for _ in range(300):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/json") as r:
                        targets = await r.json()
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.2)
            assert targets, "chromium's DevTools endpoint never answered"
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                ids = iter(range(1, 10**6))

                async def call(method: str, **params: object) -> dict:
                    n = next(ids)
                    await ws.send_json({"id": n, "method": method, "params": params})
                    while True:
                        msg = await ws.receive_json()
                        if msg.get("id") == n:
                            return msg.get("result", {})

                await call("Page.navigate", url=url)
                text = ""
                for _ in range(120):
                    await asyncio.sleep(0.5)
                    got = await call(
                        "Runtime.evaluate", expression="document.body.innerText", returnByValue=True
                    )
                    text = got.get("result", {}).get("value") or ""
                    if all(w in text for w in wanted):
                        break
                shot.write_bytes(
                    base64.b64decode((await call("Page.captureScreenshot", format="png"))["data"])
                )
                return text
    finally:
        browser.terminate()
        browser.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (Debian package 'chromium')")
def test_inspect_view_renders_our_log_in_chromium(run, tmp_path):
    """`inspect view`, as `harness export --format inspect` says to run it, serves our log; headless
    Chromium shows the sample list, the sample's messages with its tool call, and the transcript."""
    from results.export.inspect_log import export_inspect

    logs = tmp_path / "logs"
    export_inspect(run, logs / "run.eval")
    port = _free_port()
    view = subprocess.Popen(
        [str(INSPECT), "view", "--log-dir", str(logs), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    assert "Inspect View" in r.read().decode()
                    break
            except OSError:
                assert view.poll() is None, view.stdout.read()
                time.sleep(0.5)
        base = f"http://127.0.0.1:{port}/#/logs/run.eval"
        keep = Path(os.environ.get("HARNESS_INSPECT_SCREENSHOTS") or tmp_path)
        keep.mkdir(parents=True, exist_ok=True)
        shots = {}
        for name, url, wanted in [
            ("samples", f"{base}", ["fix-add", "sum", "InfraError"]),
            ("messages", f"{base}/samples/sample/fix-add/1/messages", ["ASSISTANT", "ls -la", "Submitted."]),
            ("transcript", f"{base}/samples/sample/fix-add/1/transcript", ["MODEL CALL", "TOOL: BASH"]),
        ]:
            shots[name] = keep / f"inspect-view-{name}.png"
            text = asyncio.run(_render(url, shots[name], tmp_path / f"profile-{name}", wanted))
            missing = [w for w in wanted if w not in text]
            assert not missing, f"{name}: {missing} not on the page; it shows: {text[:1500]}"
        assert "Fix the bug in fix-add.py" in text and "Step 1: I will bash next." in text
        from PIL import Image  # matplotlib depends on Pillow

        for shot in shots.values():
            image = Image.open(shot).convert("RGB")
            assert image.width == 1400 and image.height > 600  # the window, less headless chrome's own bar
            assert len(image.resize((350, 250)).getcolors(maxcolors=350 * 250)) > 20  # drawn, not blank
    finally:
        view.terminate()
        view.wait(timeout=30)
