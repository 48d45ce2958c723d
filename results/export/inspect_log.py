"""`harness export RUN --format inspect`: the run as an Inspect AI eval log, written by inspect_ai's own
log writer, so `inspect view`, `read_eval_log` and Inspect's dataframe functions (samples_df, evals_df)
open it. inspect_ai is an optional extra (pip install 'harness[inspect]').

Mapping: the run is one eval (task = the suite, model = the run's model); each attempt is a sample with
id = task id and epoch = sample + 1, its conversation as Inspect chat messages (tool calls kept), one
score "harness" (value = reward; answer = status; explanation = the evaluator's reason and detail) and
the attempt's columns as metadata. Infra errors are samples with an `error`. Results hold accuracy
(solved rate over scored attempts) and mean reward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from results.attempts import is_solved
from results.errors import UserError
from results.export.messages import call_arguments, content_text, demonstration_turns, tool_call
from results.schema import Attempt
from results.store import open_run


def _import() -> Any:
    try:
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
        import inspect_ai.tool as tool
    except ImportError:
        raise UserError("--format inspect needs inspect_ai: pip install 'harness[inspect]'") from None
    return log, model, scorer, tool


def _messages(attempt: Attempt, model: Any, tool: Any) -> list[Any]:
    out, names = [], {}
    for m in attempt.messages:
        role, text = m.get("role"), content_text(m.get("content"))
        if role == "system":
            out.append(model.ChatMessageSystem(content=text))
        elif role == "user":
            out.append(model.ChatMessageUser(content=text))
        elif role == "assistant":
            calls = []
            for tc in m.get("tool_calls") or []:
                call = tool_call(tc)
                args = call_arguments(call)
                names[call["id"]] = call["function"]["name"]
                calls.append(
                    tool.ToolCall(
                        id=call["id"],
                        function=call["function"]["name"],
                        arguments=args if isinstance(args, dict) else {"_raw": args},
                    )
                )
            out.append(
                model.ChatMessageAssistant(content=text, tool_calls=calls or None, model=attempt.model)
            )
        elif role == "tool":
            call_id = str(m.get("tool_call_id") or "")
            out.append(model.ChatMessageTool(content=text, tool_call_id=call_id, function=names.get(call_id)))
    return out


def _instruction(attempt: Attempt) -> str:
    """The task's instruction: the first user message that is not part of the worked example."""
    demo = demonstration_turns(attempt.messages)
    users = [m for i, m in enumerate(attempt.messages) if m.get("role") == "user" and i not in demo]
    return content_text(users[0].get("content")) if users else ""


def export_inspect(run_dir: str | Path, out: Optional[str | Path] = None) -> tuple[Path, int]:
    """Write the run as an Inspect log (.eval, or .json by the file name); returns (path, samples)."""
    log, model, scorer, tool = _import()
    run = open_run(run_dir)
    path = Path(out) if out else run.dir / f"{run.run_id or run.dir.name}.eval"
    if path.suffix not in (".eval", ".json"):
        raise UserError(f"{path}: an Inspect log file ends in .eval or .json")
    manifest = run.manifest
    samples, scored, solved, rewards, epochs = [], 0, 0, [], 1
    for a in run.iter_attempts():
        epochs = max(epochs, a.sample + 1)
        error = None
        if a.status == "error":
            error = log.EvalError(message=a.error or "infrastructure error", traceback="", traceback_ansi="")
        else:
            scored += 1
            solved += is_solved(a)
            rewards.append(float(a.reward))
        messages = _messages(a, model, tool)
        last = next((m for m in reversed(messages) if m.role == "assistant"), None)
        samples.append(
            log.EvalSample(
                id=a.task_id,
                epoch=a.sample + 1,
                input=_instruction(a),
                target="",
                messages=messages,
                output=model.ModelOutput.from_content(model=a.model, content=last.text if last else ""),
                scores=None
                if error
                else {
                    "harness": scorer.Score(
                        value=float(a.reward),
                        answer=a.status,
                        explanation=" ".join(x for x in (a.reason, a.detail) if x),
                        metadata={"solved": a.solved},
                    )
                },
                metadata={
                    "domain": a.domain,
                    "difficulty": a.difficulty,
                    "split": a.split,
                    "status": a.status,
                    "reason": a.reason,
                    "exit_reason": a.exit_reason,
                    "n_steps": a.n_steps,
                    "cost": a.cost,
                    "prompt_tokens": a.prompt_tokens,
                    "completion_tokens": a.completion_tokens,
                    "solved": a.solved,
                    "key": a.key,
                },
                error=error,
                total_time=a.durations.total or None,
            )
        )
    if not samples:
        raise UserError(f"{run.dir}: no attempts to export")
    metrics = {
        "accuracy": log.EvalMetric(name="accuracy", value=solved / scored if scored else 0.0),
        "mean": log.EvalMetric(name="mean", value=sum(rewards) / len(rewards) if rewards else 0.0),
    }
    suite = str(manifest.config.get("suite") or "harness")
    eval_log = log.EvalLog(
        status="success",
        eval=log.EvalSpec(
            created=manifest.started_at or "1970-01-01T00:00:00+00:00",
            task=suite,
            task_id=run.run_id or run.dir.name,
            run_id=run.run_id or run.dir.name,
            dataset=log.EvalDataset(name=suite, samples=len({s.id for s in samples})),
            model=manifest.model,
            config=log.EvalConfig(epochs=epochs),
            metadata={"harness_config": manifest.config},
        ),
        results=log.EvalResults(
            total_samples=len(samples),
            completed_samples=scored,
            scores=[log.EvalScore(name="harness", scorer="harness", metrics=metrics)],
        ),
        stats=log.EvalStats(started_at=manifest.started_at or "", completed_at=manifest.finished_at or ""),
        samples=samples,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    log.write_eval_log(eval_log, str(path))
    return path, len(samples)
