"""Realistic synthetic attempts and run folders: for tests, and for trying `harness report` without a model.

An attempt here looks like one the agent loop writes: a system prompt and an instruction, then steps
that inspect files, write a fix, run the tests and submit, with either native tool calls (assistant
tool_calls + tool messages) or the text protocol (a ```bash block, the observation as a user message).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from results.manifest import Manifest, TaskEntry
from results.run_writer import RunStore
from results.schema import Action, Attempt, Durations, Step, TestOutcome, attempt_key

SYSTEM = (
    "You are a software engineer working in /workspace. "
    "Use the tools to inspect, edit and test; submit when done."
)


def _tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def make_attempt(
    run_id: str,
    task_id: str,
    sample: int = 0,
    *,
    solved: bool = True,
    model: str = "test/model",
    domain: str = "coding",
    difficulty: int = 1,
    n_steps: int = 3,
    native_tools: bool = True,
    status: Optional[str] = None,
    observation: Optional[str] = None,
    cost_per_step: float = 0.001,
    seed: int = 0,
) -> Attempt:
    """One attempt with `n_steps` steps (>= 1; the last one submits). status 'error' = an infra failure."""
    rng = random.Random(f"{seed}/{run_id}/{task_id}/{sample}")
    status = status or ("solved" if solved else "failed")
    solved = status == "solved"
    instruction = f"Fix the bug in {task_id}.py so that the hidden tests pass."
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": instruction},
    ]
    steps = _steps(messages, task_id, n_steps, native_tools, observation, cost_per_step, rng)
    tests, reason, exit_reason, error, reward = _grading(status, solved, task_id)
    total_model = sum(s.model_seconds for s in steps)
    total_tool = sum(s.tool_seconds for s in steps)
    return Attempt(
        key=attempt_key(run_id, task_id, sample),
        run_id=run_id,
        task_id=task_id,
        domain=domain,
        difficulty=difficulty,
        sample=sample,
        model=model,
        temperature=0.7,
        messages=messages,
        steps=steps,
        exit_reason=exit_reason,
        status=status,
        reward=reward,
        solved=solved,
        reason=reason,
        tests=tests,
        n_steps=n_steps,
        prompt_tokens=sum(s.prompt_tokens for s in steps),
        completion_tokens=sum(s.completion_tokens for s in steps),
        cost=sum(s.cost for s in steps),
        durations=Durations(
            model=total_model, sandbox=total_tool, evaluation=1.5, total=total_model + total_tool + 1.5
        ),
        image="sha256:" + "ab" * 32,
        error=error,
        patch_files=1 if n_steps > 2 else 0,
        started_at="2025-01-01T00:00:00Z",
        finished_at="2025-01-01T00:01:00Z",
    )


def _steps(
    messages: list[dict[str, Any]],
    task_id: str,
    n_steps: int,
    native_tools: bool,
    observation: Optional[str],
    cost_per_step: float,
    rng: random.Random,
) -> list[Step]:
    """The attempt's steps; each one's turns are appended to messages."""
    steps: list[Step] = []
    # The draws from rng stay in this order (call id, action, step figures): a seed gives the same run.
    for i in range(n_steps):
        call_id = f"call_{i}_{rng.randrange(10**6)}"
        last = i == n_steps - 1
        tool_call_id = call_id if native_tools else None
        action, args, obs, exit_code = _step_action(i, n_steps, task_id, tool_call_id, observation, rng)
        raw, tool_calls = _log_step(messages, i, action, args, obs, call_id, native_tools, last)
        pt, ct = 400 + 150 * i, 30 + rng.randrange(60)
        steps.append(
            Step(
                index=i,
                raw_output=raw,
                tool_calls=tool_calls,
                actions=[action],
                observation=obs,
                exit_code=exit_code,
                model_seconds=0.5 + rng.random(),
                tool_seconds=0.1 * rng.random(),
                prompt_tokens=pt,
                completion_tokens=ct,
                cost=cost_per_step,
            )
        )
    return steps


def _step_action(
    i: int,
    n_steps: int,
    task_id: str,
    tool_call_id: Optional[str],
    observation: Optional[str],
    rng: random.Random,
) -> tuple[Action, dict[str, Any], str, Optional[int]]:
    """Step i's action, its tool arguments, observation and exit code: the last submits, the one
    before writes the fix (with 3+ steps), the others run commands."""
    if i == n_steps - 1:
        return Action(kind="submit", tool_call_id=tool_call_id), {}, "Submitted.", None
    if i == n_steps - 2 and n_steps > 2:
        body = f"def solve(x):\n    return x + {rng.randrange(10)}\n"
        action = Action(kind="write", path=f"{task_id}.py", content=body, tool_call_id=tool_call_id)
        return action, {"path": action.path, "content": body}, f"wrote {len(body)} bytes to {task_id}.py", 0
    commands = (
        "ls -la",
        f"cat {task_id}.py",
        "python -m pytest -q tests/ 2>&1 | tail -5",
        "grep -n 'def ' *.py",
    )
    cmd = commands[i % len(commands)]
    action = Action(kind="bash", command=cmd, tool_call_id=tool_call_id)
    exit_code = 0 if rng.random() < 0.8 else 1
    obs = (
        observation
        if observation is not None and i == 0
        else f"$ {cmd}\n" + "\n".join(f"line {j}: output of {cmd}" for j in range(rng.randrange(1, 6)))
    )
    return action, {"command": cmd}, obs, exit_code


def _log_step(
    messages: list[dict[str, Any]],
    i: int,
    action: Action,
    args: dict[str, Any],
    obs: str,
    call_id: str,
    native_tools: bool,
    last: bool,
) -> tuple[str, list]:
    """Appends the step's reply and observation to the transcript, as native tool calls or as a
    fenced bash block; returns the step's raw output and tool calls."""
    thought = f"Step {i + 1}: I will {action.kind} next."
    if native_tools:
        call = _tool_call(call_id, action.kind, args)
        messages.append({"role": "assistant", "content": thought, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": obs})
        return thought, [call]
    block = "submit" if last else (action.command or f"cat > {action.path} <<'EOF'\n{action.content}EOF")
    raw = f"{thought}\n```bash\n{block}\n```"
    messages.append({"role": "assistant", "content": raw})
    messages.append({"role": "user", "content": f"Observation:\n{obs}"})
    return raw, []


def _grading(
    status: str, solved: bool, task_id: str
) -> tuple[list[TestOutcome], str, str, Optional[str], float]:
    """(tests, reason, exit reason, error, reward): an infra error has no tests; otherwise 3 tests,
    all passing when solved, else only the first."""
    if status == "error":
        return [], "", "sandbox_died", "InfraError: container exited (137) during exec", 0.0
    tests = [
        TestOutcome(
            id=f"tests/test_{task_id}.py::test_{j}",
            outcome="passed" if solved or j == 0 else "failed",
            message="" if solved or j == 0 else "assert 3 == 4",
        )
        for j in range(3)
    ]
    reward = 1.0 if solved else sum(t.outcome == "passed" for t in tests) / len(tests)
    return tests, ("pass" if solved else "fail"), "submitted", None, reward


TaskSpec = tuple[str, str, int]  # (task id, domain, difficulty)


def make_run(
    run_dir: str | Path,
    model: str,
    tasks: Sequence[TaskSpec],
    samples: int = 1,
    outcome: Callable[[str, int], str] = lambda task, sample: "solved",
    native_tools: bool = True,
    seed: int = 0,
) -> Path:
    """Write a complete run folder. `outcome(task_id, sample)` -> 'solved' | 'failed' | 'error'."""
    run_dir = Path(run_dir)
    manifest = Manifest(
        model=model,
        config={"model": model, "tasks": [t[0] for t in tasks], "samples": samples, "temperature": 0.7},
        task_suite=[TaskEntry(id=t[0], version="1", hash=f"h{t[0]}") for t in tasks],
        images={t[0]: "sha256:" + "ab" * 32 for t in tasks},
        harness_version="test",
        seed=seed,
    )
    rng = random.Random(seed)
    with RunStore.create(run_dir, manifest) as store:
        for task_id, domain, difficulty in tasks:
            for sample in range(samples):
                status = outcome(task_id, sample)
                store.append(
                    make_attempt(
                        store.run_id,
                        task_id,
                        sample,
                        status=status,
                        model=model,
                        domain=domain,
                        difficulty=difficulty,
                        n_steps=rng.randrange(2, 7),
                        native_tools=native_tools,
                        seed=seed,
                    )
                )
        store.finish()
    return run_dir
