"""The CLI exactly as the README writes it, run as a subprocess: `eval --resume DIR` (no --tasks), bare
`harness eval`, `images build`, `sandbox prune --orphans`, and every `eval` flag reaching the run's
manifest."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from agent.sandbox import LABEL_PID, LABEL_RUN
from agent.sandbox.backends.docker.cleanup import prune
from tests.helpers import GOOD_TOML, ROOT, SUBMIT, harness, write_task


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()]


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


@pytest.mark.slow
def test_resume_without_tasks_uses_the_runs_own_suite(image, tmp_path):
    suite = tmp_path / "suite"
    for name in ("t1", "t2", "t3"):
        write_task(suite, name, toml=GOOD_TOML)
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps({"*": ["```bash\necho ok > answer.txt\n```", SUBMIT]}))
    run = tmp_path / "run"
    first = harness("eval", "--model", f"replay:{replies}", "--tasks", str(suite), "--out", str(run))
    assert first.returncode == 0, first.stderr[-2000:]
    lines = (run / "attempts.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 3
    (run / "attempts.jsonl").write_text(lines[0])  # as if interrupted after the first attempt

    resumed = harness("eval", "--resume", str(run))  # the README's form: no --tasks, no --model
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"run folder: {run}" in resumed.stdout
    recs = records(run)
    assert (run / "attempts.jsonl").read_text().startswith(lines[0])  # the finished attempt is kept as it was
    assert sorted(r["task_id"] for r in recs) == ["t1", "t2", "t3"]
    assert all(r["solved"] for r in recs)


# What run_eval recorded in manifest.json before EvalConfig (the keys, in order): such runs still resume.
OLD_CONFIG_KEYS = (
    "model suite tasks samples temperature model_options loop tools concurrency model_concurrency filters "
    "batch_grading"
).split()


@pytest.mark.slow
def test_a_run_written_before_the_eval_config_resumes_and_reports(image, tmp_path):
    suite = tmp_path / "suite"
    for name in ("t1", "t2"):
        write_task(suite, name, toml=GOOD_TOML)
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps({"*": ["```bash\necho ok > answer.txt\n```", SUBMIT]}))
    run = tmp_path / "run"
    first = harness(
        "eval", "--model", f"replay:{replies}", "--tasks", str(suite), "--samples", "2", "--out", str(run)
    )
    assert first.returncode == 0, first.stderr[-2000:]
    lines = (run / "attempts.jsonl").read_text().splitlines(keepends=True)
    (run / "attempts.jsonl").write_text(lines[0])  # as if interrupted after the first attempt
    m = manifest(run)
    m["config"] = {k: m["config"][k] for k in OLD_CONFIG_KEYS}  # the manifest as the older harness wrote it
    m["finished_at"] = None
    (run / "manifest.json").write_text(json.dumps(m))

    resumed = harness("eval", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "skipping 1 recorded attempts; running 3" in resumed.stderr
    recs = records(run)
    assert sorted((r["task_id"], r["sample"]) for r in recs) == [("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)]
    assert all(r["solved"] for r in recs)
    assert list(manifest(run)["config"]) == OLD_CONFIG_KEYS  # the run keeps its own manifest
    report = harness("report", str(run))
    assert report.returncode == 0, report.stderr[-2000:]


@pytest.mark.slow
def test_every_eval_flag_reaches_the_manifest(image, tmp_path):
    from agent.serve import start_server

    replies = tmp_path / "r.json"
    replies.write_text(json.dumps({"*": [SUBMIT] * 20}))
    server = start_server(f"replay:{replies}")
    run = tmp_path / "run"
    try:
        p = harness(
            "eval",
            "--model",
            f"openai-compat:{server.name}",
            "--base-url",
            server.base_url,
            "--tasks",
            "builtin",
            "--domain",
            "data",
            "--difficulty",
            "1",
            "--split",
            "train",
            "--tag",
            "count",
            "--samples",
            "1",
            "--concurrency",
            "2",
            "--model-concurrency",
            "1",
            "--temperature",
            "0.5",
            "--max-steps",
            "7",
            "--max-reply-tokens",
            "99",
            "--token-budget",
            "5000",
            "--cost-limit",
            "0.25",
            "--protocol",
            "text",
            "--seed",
            "3",
            "--out",
            str(run),
        )
    finally:
        server.stop()
    assert p.returncode == 0, p.stderr[-2000:]
    m = manifest(run)
    cfg = m["config"]
    assert m["model"] == f"openai-compat:{server.name}" and m["seed"] == 3
    assert cfg["suite"] == "builtin" and cfg["samples"] == 1 and cfg["temperature"] == 0.5
    # --domain data --difficulty 1 --split train --tag count select exactly these (a literal, read off the
    # suite)
    assert cfg["tasks"] == [
        *(f"count-lines-0{i}" for i in range(1, 5)),
        *(f"count-lines-{i}" for i in range(11, 17)),
    ]
    assert [t["id"] for t in m["task_suite"]] == cfg["tasks"]
    assert cfg["model_options"] == {"base_url": server.base_url}
    loop = cfg["loop"]
    assert (
        loop["max_steps"],
        loop["max_reply_tokens"],
        loop["token_budget"],
        loop["cost_limit"],
        loop["protocol"],
    ) == (7, 99, 5000, 0.25, "text")
    assert (loop["temperature"], loop["seed"]) == (0.5, 3)
    assert len(records(run)) == 10


@pytest.mark.slow
def test_concurrency_and_filters_are_recorded_in_the_manifest(image, tmp_path):
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps({"*": [SUBMIT]}))
    run = tmp_path / "run"
    p = harness(
        "eval",
        "--model",
        f"replay:{replies}",
        "--tasks",
        "builtin",
        "--glob",
        "count-lines-01",
        "--domain",
        "data",
        "--split",
        "train",
        "--tag",
        "count",
        "--concurrency",
        "2",
        "--model-concurrency",
        "1",
        "--out",
        str(run),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    cfg = manifest(run)["config"]
    assert (cfg.get("concurrency"), cfg.get("model_concurrency")) == (2, 1)
    assert cfg.get("filters") == {
        "domain": "data",
        "difficulty": None,
        "split": "train",
        "tags": ["count"],
        "glob": "count-lines-01",
    }


@pytest.mark.docker
def test_images_build_prints_the_tag_and_the_engines_image_id():
    p = harness("images", "build", timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    tag, image_id = p.stdout.strip().splitlines()[-1].split()
    assert re.fullmatch(r"[a-z0-9./_-]+:[0-9a-f]+", tag), tag
    assert docker.from_env().images.get(tag).id == image_id  # the engine itself agrees


ORPHAN = """
import asyncio, os, sys
from agent.sandbox import SandboxSpec, SandboxPool
from agent.sandbox.backends.docker.pool import DockerPool
async def main():
    pool = DockerPool(run_id=sys.argv[2], warm=0)
    await pool.acquire(sys.argv[1], SandboxSpec(memory_mb=256, pids=64, workspace_mb=32, tmp_mb=16))
    print("created", flush=True)
asyncio.run(main())
os._exit(0)  # dies without cleaning up: its container is an orphan
"""


@pytest.mark.slow
def test_sandbox_prune_orphans_removes_only_containers_of_dead_processes(image, tmp_path):
    def ours(run_id):
        return docker.from_env().api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})

    orphan_run, live_run = f"orphan-{os.getpid()}-{time.time_ns()}", f"live-{os.getpid()}-{time.time_ns()}"
    live = subprocess.Popen(
        [sys.executable, "-c", ORPHAN.replace("os._exit(0)", "sys.stdin.read()"), image, live_run],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout.readline().strip() == "created"
        child = subprocess.run(
            [sys.executable, "-c", ORPHAN, image, orphan_run],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert "created" in child.stdout, child.stderr[-2000:]
        [alive] = ours(live_run)
        assert alive["Labels"][LABEL_PID] == str(live.pid)

        p = harness("sandbox", "prune", "--orphans")
        assert p.returncode == 0, p.stderr[-2000:]
        # every backend whose sandboxes live on this machine, each with its own prune (Docker's first)
        lines = p.stdout.strip().splitlines()
        assert re.fullmatch(r"docker: removed \d+ containers", lines[0]), p.stdout
        # (On a shared machine another harness process may prune the orphan first: every eval prunes orphans.)
        assert ours(orphan_run) == []
        assert [c["Id"] for c in ours(live_run)] == [alive["Id"]]  # its process lives: kept
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()
        prune(live_run)
        prune(orphan_run)


@pytest.mark.slow
@pytest.mark.model
def test_bare_eval_runs_the_embedded_default(image, tmp_path):
    """`harness eval` with no arguments (the demo): the embedded SmolLM2 on builtin:easy. Real, but bounded:
    the test stops it once its first attempt is recorded (the whole suite takes long on a CPU)."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "harness.py"), "eval"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    run = None
    try:
        deadline = time.monotonic() + 1500  # a bound on waiting, not a speed assertion
        while time.monotonic() < deadline and proc.poll() is None:
            runs = list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").is_dir() else []
            if (
                runs
                and (runs[0] / "attempts.jsonl").is_file()
                and (runs[0] / "attempts.jsonl").read_text().endswith("\n")
            ):
                run = runs[0]
                break
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGKILL)
        out = proc.communicate()[0]
        if run is not None:
            prune(run.name)
    assert run is not None, out[-3000:]
    assert run.name.endswith("smollm2-135m")
    m = manifest(run)
    assert (m["model"], m["config"]["suite"], len(m["config"]["tasks"])) == (
        "local:smollm2-135m",
        "builtin:easy",
        215,
    )
    [first, *_] = records(run)
    assert first["model"] == "local:smollm2-135m" and first["n_steps"] >= 1
    assert first["steps"][0]["completion_ids"]  # tokens from the real local model
