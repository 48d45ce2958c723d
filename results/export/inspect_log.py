"""`harness export RUN --format inspect`: the run as an Inspect AI eval log, written by inspect_ai's own
log writer, so `inspect view`, `read_eval_log` and Inspect's dataframe functions (samples_df, evals_df)
open it. inspect_ai is an optional extra (pip install 'harness[inspect]').

Mapping: the run is one eval (task = the suite, model = the run's model); each attempt is a sample with
id = task id and epoch = sample + 1, its conversation as Inspect chat messages (tool calls kept), one
score "harness" (value = reward; answer = status; explanation = the evaluator's reason and detail) and
the attempt's columns as metadata. Infra errors are samples with an `error`. Results hold accuracy
(solved rate over scored attempts) and mean reward.

Each sample also carries the transcript Inspect itself records (what `inspect view`'s transcript tab,
messages_df and events_df read): a sample_init event, one model event per model reply (its input
messages, the tools offered, the reply and that step's token usage and time), one tool event per tool
call (its result message), and the score event; `model_usage` holds the attempt's token totals. Message,
event and sample ids are derived from the attempt's key, so exporting a run twice gives the same ids.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

from results.attempts import is_solved
from results.errors import UserError
from results.export.messages import call_arguments, checked, content_text, demonstration_turns, tool_call
from results.schema import Attempt, Step
from results.store import open_run


def _import() -> Any:
    try:
        import inspect_ai.dataset as dataset
        import inspect_ai.event as event
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
        import inspect_ai.tool as tool
    except ImportError:
        raise UserError("--format inspect needs inspect_ai: pip install 'harness[inspect]'") from None
    return dataset, event, log, model, scorer, tool


def _id(*parts: Any) -> str:
    """A stable id (Inspect's are 22-character short uuids; any unique string is accepted)."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:22]


def _messages(attempt: Attempt, model: Any, tool: Any) -> list[Any]:
    out, names = [], {}
    for i, m in enumerate(attempt.messages):
        role, text, mid = m.get("role"), content_text(m.get("content")), _id(attempt.key, "message", i)
        if role == "system":
            out.append(model.ChatMessageSystem(id=mid, content=text, source="input"))
        elif role == "user":
            out.append(model.ChatMessageUser(id=mid, content=text, source="input"))
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
                model.ChatMessageAssistant(
                    id=mid, content=text, tool_calls=calls or None, model=attempt.model, source="generate"
                )
            )
        elif role == "tool":
            call_id = str(m.get("tool_call_id") or "")
            out.append(
                model.ChatMessageTool(id=mid, content=text, tool_call_id=call_id, function=names.get(call_id))
            )
    return out


def _tool_infos(tools: Any, tool: Any) -> list[Any]:
    """The tools offered (OpenAI format, from the run manifest) as Inspect ToolInfo; a schema Inspect's
    model cannot hold is left out of the transcript rather than failing the export."""
    out = []
    for t in tools or []:
        fn = t.get("function", t) if isinstance(t, dict) else {}
        try:
            out.append(
                tool.ToolInfo.model_validate(
                    {
                        "name": fn["name"],
                        "description": fn.get("description") or fn["name"],
                        "parameters": fn.get("parameters") or {},
                    }
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _time(start: Optional[datetime], seconds: float) -> Any:
    return (start + timedelta(seconds=seconds)).isoformat() if start else None


def _usage(model: Any, prompt: int, completion: int, cost: float = 0.0) -> Any:
    return model.ModelUsage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
        total_cost=cost or None,
    )


def _events(
    attempt: Attempt, messages: list[Any], sample: Any, score: Any, offered: list[Any], mods: tuple
) -> tuple[list[Any], Optional[Any]]:
    """(the sample's transcript as Inspect records it, the last model output). Model replies are paired
    with the attempt's steps in order (the worked example's replies were not generated: no event)."""
    event, model = mods
    try:
        start: Optional[datetime] = datetime.fromisoformat(attempt.started_at) if attempt.started_at else None
    except ValueError:
        start = None
    demo = demonstration_turns(attempt.messages)
    replies = [i for i, m in enumerate(messages) if m.role == "assistant" and i not in demo]
    steps: list[Optional[Step]] = list(attempt.steps[: len(replies)])
    steps += [None] * (len(replies) - len(steps))
    results = {m.tool_call_id: m for m in messages if m.role == "tool"}
    n = 0

    def stamp(at: float) -> dict[str, Any]:
        """Each event's id (numbered in order), its time and its offset into the attempt's work."""
        nonlocal n
        n += 1
        return {
            "uuid": _id(attempt.key, "event", n),
            "working_start": at,
            "timestamp": _time(start, at) or _now(),
        }

    out: list[Any] = [event.SampleInitEvent(**stamp(0.0), sample=sample, state={})]
    output, clock = None, 0.0
    for i, step in zip(replies, steps):
        model_event, output, spent = _model_event(
            attempt, messages, i, step, offered, start, clock, stamp, mods
        )
        out.append(model_event)
        clock += spent
        calls = messages[i].tool_calls or []
        for call in calls:
            result = results.get(call.id)
            spent = (step.tool_seconds / len(calls)) if step else 0.0
            out.append(
                event.ToolEvent(
                    **stamp(clock),
                    id=call.id,
                    function=call.function,
                    arguments=call.arguments,
                    result=result.text if result is not None else "",
                    completed=_time(start, clock + spent),
                    working_time=spent,
                    message_id=result.id if result is not None else None,
                )
            )
            clock += spent
        if not calls and step:
            clock += step.tool_seconds
    if score is not None:
        out.append(event.ScoreEvent(**stamp(clock), score=score, target=""))
    return out, output


def _model_event(
    attempt: Attempt,
    messages: list[Any],
    i: int,
    step: Optional[Step],
    offered: list[Any],
    start: Optional[datetime],
    clock: float,
    stamp: Any,
    mods: tuple,
) -> tuple[Any, Any, float]:
    """(the ModelEvent for reply messages[i], its ModelOutput, the model seconds it took)."""
    event, model = mods
    reply = messages[i]
    spent = step.model_seconds if step else 0.0
    output = model.ModelOutput(
        model=attempt.model,
        choices=[
            model.ChatCompletionChoice(
                message=reply, stop_reason="tool_calls" if reply.tool_calls else "stop"
            )
        ],
        usage=_usage(model, step.prompt_tokens, step.completion_tokens, step.cost) if step else None,
        time=spent or None,
    )
    model_event = event.ModelEvent(
        **stamp(clock),
        model=attempt.model,
        input=messages[:i],
        tools=offered if reply.tool_calls else [],
        tool_choice="auto",
        config=model.GenerateConfig(temperature=attempt.temperature),
        output=output,
        completed=_time(start, clock + spent),
        working_time=spent,
    )
    return model_event, output, spent


def _now() -> str:
    return datetime.now().astimezone().isoformat()


def _instruction(attempt: Attempt) -> str:
    """The task's instruction: the first user message that is not part of the worked example."""
    demo = demonstration_turns(attempt.messages)
    users = [m for i, m in enumerate(attempt.messages) if m.get("role") == "user" and i not in demo]
    return content_text(users[0].get("content")) if users else ""


def export_inspect(run_dir: str | Path, out: Optional[str | Path] = None) -> tuple[Path, int]:
    """Write the run as an Inspect log (.eval, or .json by the file name); returns (path, samples)."""
    dataset, event, log, model, scorer, tool = _import()
    run = open_run(run_dir, verify=True)
    path = Path(out) if out else run.dir / f"{run.run_id or run.dir.name}.eval"
    if path.suffix not in (".eval", ".json"):
        raise UserError(f"{path}: an Inspect log file ends in .eval or .json")
    offered = _tool_infos(run.manifest.config.get("tools"), tool)
    samples, scored, solved, rewards, epochs = [], 0, 0, [], 1
    usage: dict[str, Any] = {}
    for a in checked(run.iter_attempts(), run.attempts_path):
        epochs = max(epochs, a.sample + 1)
        if a.status != "error":  # an infrastructure error has no score: it counts in no metric
            scored += 1
            solved += is_solved(a)
            rewards.append(float(a.reward))
        sample = _sample(a, offered, (dataset, event, log, model, scorer, tool))
        if sample.model_usage:
            totals = sample.model_usage[a.model]
            usage[a.model] = usage[a.model] + totals if a.model in usage else totals
        samples.append(sample)
    if not samples:
        raise UserError(f"{run.dir}: no attempts to export")
    metrics = {
        "accuracy": log.EvalMetric(name="accuracy", value=solved / scored if scored else 0.0),
        "mean": log.EvalMetric(name="mean", value=sum(rewards) / len(rewards) if rewards else 0.0),
    }
    eval_log = _eval_log(run, samples, scored, epochs, metrics, usage, log)
    path.parent.mkdir(parents=True, exist_ok=True)
    log.write_eval_log(eval_log, str(path))
    return path, len(samples)


def _sample(a: Attempt, offered: list[Any], mods: tuple) -> Any:
    """One attempt as an Inspect EvalSample: its messages, score, metadata, events and usage."""
    dataset, event, log, model, scorer, tool = mods
    error = None
    if a.status == "error":
        error = log.EvalError(message=a.error or "infrastructure error", traceback="", traceback_ansi="")
    messages = _messages(a, model, tool)
    score = (
        None
        if error
        else scorer.Score(
            value=float(a.reward),
            answer=a.status,
            explanation=" ".join(x for x in (a.reason, a.detail) if x),
            metadata={"solved": a.solved},
        )
    )
    metadata = _sample_metadata(a)
    instruction = _instruction(a)
    events, output = _events(
        a,
        messages,
        dataset.Sample(input=instruction, target="", id=a.task_id, metadata=metadata),
        score,
        offered,
        (event, model),
    )
    totals = _usage(model, a.prompt_tokens, a.completion_tokens, a.cost)
    return log.EvalSample(
        id=a.task_id,
        epoch=a.sample + 1,
        uuid=_id(a.key, "sample"),
        input=instruction,
        target="",
        messages=messages,
        output=output or model.ModelOutput(model=a.model),
        scores=None if score is None else {"harness": score},
        metadata=metadata,
        events=events,
        model_usage={a.model: totals} if a.prompt_tokens or a.completion_tokens else {},
        error=error,
        started_at=a.started_at or None,
        completed_at=a.finished_at or None,
        total_time=a.durations.total or None,
        working_time=(a.durations.model + a.durations.sandbox) or None,
        turn_count=len([e for e in events if e.event == "model"]),
    )


def _sample_metadata(a: Attempt) -> dict[str, Any]:
    """The attempt's figures that Inspect has no field for, kept as sample metadata."""
    return {
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
    }


def _eval_log(
    run: Any, samples: list[Any], scored: int, epochs: int, metrics: dict, usage: dict, log: Any
) -> Any:
    """The EvalLog around the samples: the run's spec (suite, model, config), results and stats."""
    manifest = run.manifest
    suite = str(manifest.config.get("suite") or "harness")
    return log.EvalLog(
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
        stats=log.EvalStats(
            started_at=manifest.started_at or "",
            completed_at=manifest.finished_at or "",
            model_usage=usage,
        ),
        samples=samples,
    )
