"""End to end: eval over HTTP against an OpenAI-compatible server, the real local model, `run`."""

import json

import pytest

from agent.config import LoopConfig
from agent.serve import start_server
from agent.workflow import apply_changes, run_workflow
from evaluators.run.config import EvalConfig
from evaluators.run.runner import run_eval
from tasks.loader import load_suite
from tests.conftest import run
from tests.helpers import SUBMIT, WRITE_CORRECT, harness, make_task


def test_eval_against_an_openai_compatible_server(image, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [WRITE_CORRECT, SUBMIT]}))
    server = start_server(f"replay:{script}")
    try:
        out = tmp_path / "run"
        model = f"openai-compat:{server.base_url}/{server.name}"
        run(run_eval(EvalConfig(model=model, out=out), [make_task()], progress=False))
    finally:
        server.stop()
    rec = json.loads((out / "attempts.jsonl").read_text())
    assert rec["solved"] and rec["model"] == model and rec["n_steps"] == 2
    assert rec["prompt_tokens"] > 0  # usage came back over HTTP


@pytest.mark.slow
def test_cli_eval_runs_builtin_tasks_with_a_replay_model(image, tmp_path):
    script = tmp_path / "s.json"
    # create-file-01's oracle action, replayed: the CLI path from arguments to report.
    task = next(t for t in load_suite("builtin") if t.id == "create-file-01")
    cmd = task.solution_files["solve.sh"].decode().strip().splitlines()[-1]
    script.write_text(json.dumps({"create-file-01": [f"```bash\n{cmd}\n```", SUBMIT]}))
    out = tmp_path / "run"
    p = harness(
        "eval",
        "--model",
        f"replay:{script}",
        "--tasks",
        "builtin",
        "--glob",
        "create-file-01",
        "--out",
        str(out),
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"run folder: {out}" in p.stdout
    rec = json.loads((out / "attempts.jsonl").read_text())
    assert (rec["task_id"], rec["solved"], rec["reason"], rec["n_steps"]) == (
        "create-file-01",
        True,
        "pass",
        2,
    ), rec["detail"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["tasks"] == ["create-file-01"]  # --glob selected exactly the one task


def test_run_workflow_returns_a_patch_and_applies_it(image, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "solution.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [WRITE_CORRECT, SUBMIT]}))
    result = run(
        run_workflow(
            f"replay:{script}",
            repo,
            "implement add",
            verify=["python3 -c 'from solution import add; assert add(2, 3) == 5'"],
        )
    )
    assert result.verified and result.loop.exit_reason == "submitted"
    assert "+    return a + b" in result.diff
    assert "NotImplementedError" in (repo / "solution.py").read_text()  # untouched until applied
    apply_changes(repo, result.changes)
    assert "return a + b" in (repo / "solution.py").read_text()


@pytest.mark.model
@pytest.mark.slow
def test_local_model_completes_an_eval_of_easy_tasks(image, tmp_path):
    tasks = [t for t in load_suite("builtin:easy") if t.id in ("create-file-01", "rename-file-01")]
    out = tmp_path / "run"
    run(
        run_eval(
            EvalConfig(
                model="local:smollm2-135m", out=out, loop=LoopConfig(max_steps=2, max_reply_tokens=96)
            ),
            tasks,
            progress=False,
        )
    )
    recs = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in recs) == ["create-file-01", "rename-file-01"]
    for r in recs:
        assert r["status"] in ("solved", "failed") and r["n_steps"] >= 1
        step = r["steps"][0]
        assert step["prompt_ids"] and step["completion_ids"]  # what post-training trains on
        assert r["reason"] in ("pass", "fail", "no_answer", "wrong_answer", "no_report")
