"""Helpers shared by the adversarial and fault-injection tests."""

import asyncio
import json
import uuid
from pathlib import Path

import docker
import docker.errors

from agent.sandbox import LABEL_RUN
from evaluators.run.config import EvalConfig
from evaluators.run.runner import run_eval
from evaluators.selftest import SUBMIT, answer_task, bash
from results.store import RunReader

ANSWER = "ok-fault"


def task(task_id: str, command_timeout: float = 10.0, **env):
    """A tiny answer task (graded on the host); env overrides its [environment] limits."""
    t = answer_task(task_id, ANSWER, command_timeout)
    if env:
        from dataclasses import replace

        t.environment = replace(t.environment, **env)
    return t


def script(*commands: str) -> list[str]:
    """The agent runs these commands, then writes the right answer and submits."""
    return [bash(c) for c in commands] + [bash(f"echo {ANSWER} > answer.txt"), SUBMIT]


def unique(name: str) -> str:
    """A run folder name no other process uses: the folder name is the run id on container labels."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def evaluate(tmp_path: Path, tasks, scripts: dict, name: str = "", **kw) -> tuple[dict, list[str], Path]:
    """run_eval with the replay model into the run folder tmp_path/name (default: a unique name);
    returns (records by task id, raw lines of attempts.jsonl, folder)."""
    name = name or unique("run")
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(scripts))
    out = tmp_path / name
    kw.setdefault("concurrency", 1)
    asyncio.run(run_eval(EvalConfig(model=f"replay:{path}", out=out, **kw), tasks, progress=False))
    return records(out), (out / "attempts.jsonl").read_text().splitlines(), out


def records(out: Path) -> dict:
    return {a.task_id: a for a in RunReader(out).iter_attempts()}


def containers_of(run_id: str) -> list[str]:
    """Names and states of the containers (any state) labeled with this run id."""
    raw = docker.from_env().api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    return [f"{c['Names'][0]} {c['State']} {c['Status']}" for c in raw]
