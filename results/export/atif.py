"""`harness export RUN --format atif`: each attempt as a trajectory in Harbor's Agent Trajectory Interchange
Format (ATIF-v1.7, harbor-framework/harbor rfcs/0001-trajectory-format.md), the format Harbor, NeMo and
other harnesses and trainers read.

One trajectory per attempt (a JSON array of them in one file; `replay:FILE` reads it back):
  root        schema_version, session_id (the run id), trajectory_id (the attempt key), agent {name
              "harness", version, model_name}, final_metrics, extra {task_id, sample, verdict, ...}
  prompt      the conversation before the first model reply: system and user steps; the worked example's
              turns are marked is_copied_context (context, never a training target)
  agent step  one per Step: message = the model's reply exactly as produced, tool_calls (native tool
              calling), observation {results: [{source_call_id, content}]}, metrics {prompt_tokens,
              completion_tokens, cost_usd, prompt_token_ids, completion_token_ids} and llm_call_count 1;
              extra {actions, exit_code, timed_out} (the actions as parsed here)
Infra errors (status error) are left out, as in every export.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from results.export.messages import checked, content_text, demonstration_turns
from results.manifest import current_harness_version
from results.schema import Attempt, Step
from results.store import open_run

SCHEMA_VERSION = "ATIF-v1.7"


def _prompt_messages(a: Attempt) -> list[dict[str, Any]]:
    """The messages before the first step's reply (each step adds one assistant message)."""
    assistants = [i for i, m in enumerate(a.messages) if m.get("role") == "assistant"]
    first = len(assistants) - len(a.steps)
    end = assistants[first] if 0 <= first < len(assistants) else len(a.messages)
    return a.messages[:end]


def _tool_call(tc: dict[str, Any], index: int, step: int) -> dict[str, Any]:
    fn = tc.get("function") or tc
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {"_raw": args}
    if not isinstance(args, dict):
        args = {"_value": args}
    return {
        "tool_call_id": str(tc.get("id") or f"call_{step}_{index}"),
        "function_name": str(fn.get("name") or ""),
        "arguments": args,
    }


def to_atif(a: Attempt) -> dict[str, Any]:
    """One attempt as an ATIF trajectory (a dict ready for json.dumps)."""
    steps = _prompt_steps(a)
    for s in a.steps:
        steps.append(_agent_step(a, s, step_id=len(steps) + 1))
    if not steps:  # ATIF needs one step at least
        steps.append({"step_id": 1, "source": "system", "message": ""})
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": a.run_id,
        "trajectory_id": a.key,
        "agent": {"name": "harness", "version": current_harness_version(), "model_name": a.model},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": a.prompt_tokens,
            "total_completion_tokens": a.completion_tokens,
            "total_cost_usd": a.cost,
            "total_steps": len(steps),
        },
        "extra": {
            "task_id": a.task_id,
            "sample": a.sample,
            "status": a.status,
            "solved": a.solved,
            "reward": a.reward,
            "reason": a.reason,
            "exit_reason": a.exit_reason,
            "flags": [f.model_dump() for f in a.flags],
            "impossible": a.impossible,
        },
    }


def _prompt_steps(a: Attempt) -> list[dict[str, Any]]:
    """The prompt's system, user and worked-example turns as steps (the example marked copied context)."""
    steps: list[dict[str, Any]] = []
    prompt = _prompt_messages(a)
    demo = demonstration_turns(prompt)
    for i, m in enumerate(prompt):
        role = m.get("role")
        source = {"system": "system", "user": "user", "assistant": "agent"}.get(str(role))
        if source is None:
            continue
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "source": source,
            "message": content_text(m.get("content")),
        }
        if i in demo:
            step["is_copied_context"] = True
            if source == "agent":
                step["llm_call_count"] = 0  # not a call of this attempt's model
        steps.append(step)
    return steps


def _agent_step(a: Attempt, s: Step, step_id: int) -> dict[str, Any]:
    """One of the attempt's steps: the model's reply, its tool calls, token metrics and observation."""
    calls = [_tool_call(tc, k, s.index) for k, tc in enumerate(s.tool_calls)]
    metrics: dict[str, Any] = {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "cost_usd": s.cost,
    }
    if s.prompt_ids is not None:
        metrics["prompt_token_ids"] = list(s.prompt_ids)
    if s.completion_ids is not None:
        metrics["completion_token_ids"] = list(s.completion_ids)
    step: dict[str, Any] = {
        "step_id": step_id,
        "source": "agent",
        "model_name": a.model,
        "message": s.raw_output,
        "metrics": metrics,
        "llm_call_count": 1,
        "extra": {
            "actions": [x.model_dump(exclude_none=True) for x in s.actions],
            "exit_code": s.exit_code,
            "timed_out": s.timed_out,
        },
    }
    if calls:
        step["tool_calls"] = calls
    if s.observation or calls:
        # one result: our observation answers the step's calls together (the first one names it)
        result: dict[str, Any] = {"content": s.observation}
        if calls:
            result["source_call_id"] = calls[0]["tool_call_id"]
        step["observation"] = {"results": [result]}
    return step


def export_atif(run_dir: str | Path, out: Optional[str | Path] = None) -> tuple[Path, int]:
    """Writes RUN's attempts as a JSON array of ATIF trajectories (the file appears whole); returns the
    path and how many were written."""
    run = open_run(run_dir, verify=True)
    path = Path(out) if out else run.dir / f"{run.run_id}.atif.json"
    trajectories = [
        to_atif(a) for a in checked(run.iter_attempts(), run.attempts_path) if a.status != "error"
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(trajectories, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path, len(trajectories)
