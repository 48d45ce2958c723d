"""Subcommands of the evaluators package: `harness eval` (run and grade a suite) and `harness selftest`."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

from agent.config import add_backend_options, add_field_options, backend_options, given_fields
from evaluators.run.config import (
    LOOP_OPTIONS,
    EvalConfig,
    TaskFilter,
    add_eval_options,
    eval_loop,
)
from results import telemetry
from results.commandline import actions_of, add_command, invocation
from results.errors import UserError

EVAL_EXAMPLES = [
    "harness eval                                            # the embedded local model on builtin:easy",
    "harness eval --model openai/gpt-4o-mini --tasks builtin --samples 5 --concurrency 8 --limit 20",
    "harness eval --model openai-compat:http://127.0.0.1:8000/v1/tuned "
    "-M supports_tools=true -M context_window=8192",
]


def register(sub):
    p = add_command(
        sub,
        "eval",
        help="evaluate a model on a task suite (no arguments: the embedded default)",
        description="Run the agent on every selected task (x samples) in sandboxes, grade each "
        "attempt with hidden tests, append it to the run folder and print a "
        "summary. Exits 1 when every attempt ended in an infrastructure error.",
        examples=EVAL_EXAMPLES,
    )
    add_eval_options(p)
    telemetry.add_options(p)
    p.set_defaults(func=cmd_eval)

    p = add_command(
        sub,
        "demo",
        help="the embedded model on a dozen tasks (what `make demo` runs)",
        description="Evaluate the embedded model on builtin:demo (12 tasks: every domain, difficulty 1-3) "
        "into a run folder of its own. Run again, it resumes an interrupted demo or shows the last one.",
        examples=["harness demo", "harness demo --out runs/demo-2"],
    )
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="its run folder (default runs/demo)")
    p.add_argument("--model", help="another model on the same tasks (default: the embedded one)")
    p.set_defaults(func=cmd_demo)

    p = add_command(
        sub,
        "rescore",
        help="grade a run's kept changes again with the current task versions (no model calls)",
        description="Grade the stored final changes of every attempt of RUN again, with the current "
        "(or the given) version of each task's hidden tests, in fresh containers, without calling the "
        "model. Writes a new run folder whose manifest names the source run, the task versions before "
        "and after, and the verdicts that changed; `harness compare RUN NEW` shows the flips.",
        examples=["harness rescore runs/A --out runs/A-rescored", "harness compare runs/A runs/A-rescored"],
    )
    p.add_argument("run", type=Path, metavar="RUN", help="the run folder to grade again")
    p.add_argument("--tasks", help="suite to take the tasks from (default: the run's own suite)")
    p.add_argument("--out", type=Path, required=True, help="the new run folder")
    p.add_argument("--concurrency", type=int, default=4, help="gradings in flight (default 4)")
    add_sandbox_options(p)
    p.set_defaults(func=cmd_rescore)

    p = sub.add_parser(
        "selftest", help="attack the installed harness with a scripted agent and check it holds"
    )
    p.add_argument("--only", metavar="NAME", help="run only these cases (comma-separated names or globs)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.set_defaults(func=cmd_selftest)


def extend(sub):
    """`harness tasks` actions whose code is here: they run sandboxes and graders (the rest of `harness
    tasks` is tasks/cli.py's)."""
    from tasks.cli import add_suite

    sub = actions_of(sub, "tasks")
    exp = sub.add_parser("export", help="write a suite in another harness's task format")
    exp.add_argument(
        "--format", choices=["harbor"], required=True, help="harbor: Harbor / Terminal-Bench 2 tasks"
    )
    exp.add_argument("out", type=Path, help="folder to write (one task folder per task)")
    add_suite(exp)
    exp.set_defaults(func=cmd_export)

    val = sub.add_parser("validate", help="run every task's oracle and a null agent in the sandbox")
    add_suite(val)
    val.add_argument(
        "--repeats", type=int, default=1, help="run each oracle this many times (flakiness check)"
    )
    val.add_argument("--concurrency", type=int, default=2, help="tasks checked at the same time")
    val.add_argument(
        "--no-internet",
        action="store_true",
        help="Harbor tasks: no network for any container (default: as each task says)",
    )
    val.add_argument(
        "--mutants",
        type=int,
        default=0,
        metavar="N",
        help="then run N mutants of each valid task's oracle through its hidden tests and print each "
        "task's kill rate; under 0.8 is weak (evaluators/mutants.py; one instance per family)",
    )
    val.add_argument("--mutants-out", type=Path, help="with --mutants: every mutant's outcome here (TSV)")
    val.add_argument("-v", "--verbose", action="store_true", help="with --mutants: list the survivors")
    add_sandbox_options(val)
    val.set_defaults(func=cmd_validate)

    che = sub.add_parser(
        "cheats",
        help="attack every task with scripted cheats (evaluators/cheats.py); exit 1 if any scores",
        description="Runs each cheat of evaluators/cheats.py on each task through the normal eval path "
        "(real sandbox, the task's verifier mode, real grader) and lists, per task, the cheats that scored "
        "> 0. One instance per family unless --every-instance.",
    )
    add_suite(che)
    che.add_argument("--cheat", action="append", metavar="NAME", help="only this cheat (repeatable)")
    che.add_argument("--concurrency", type=int, default=2, help="attempts at the same time")
    che.add_argument("--limit", type=int, default=None, help="only N tasks, spread over the suite")
    che.add_argument("--every-instance", action="store_true", help="every instance of each family")
    che.add_argument("--no-internet", action="store_true", help="Harbor tasks: no network for any container")
    add_sandbox_options(che)
    che.set_defaults(func=cmd_cheats)


def add_sandbox_options(parser) -> None:
    """--sandbox BACKEND (EvalConfig's field, its default) and every backend's options (--NAME-FIELD)."""
    add_field_options(parser, EvalConfig, "sandbox")
    add_backend_options(parser)


def cmd_export(args) -> int:
    from evaluators.harbor_export import export_suite
    from tasks.loader import load_suite

    written = export_suite(load_suite(args.suite), args.out)
    print(
        f"wrote {len(written)} Harbor tasks to {args.out} (images build FROM harness/base:latest: "
        "`harness images build` makes it)"
    )
    return 0


def cmd_validate(args) -> int:
    from evaluators.validate import main

    return main(args)


def cmd_cheats(args) -> int:
    from evaluators.cheats import main

    return main(args)


def cmd_selftest(args) -> int:
    from evaluators import selftest

    if args.list:
        cases = selftest.select(args.only)
        width = max(len(c.name) for c in cases)
        for c in cases:
            print(f"{c.name.ljust(width)}  {c.group:6}  {c.expected}")
        return 0
    cases = selftest.select(args.only)  # an unknown name fails here, before any container starts
    print(
        f"harness selftest: {len(cases)} cases (a scripted agent attacks real sandboxes; "
        f"about {2 * len(cases)} s)",
        file=sys.stderr,
    )
    rows = selftest.run_selftest(args.only, log=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    print(selftest.format_table(rows))
    return 0 if all(r.ok for r in rows) else 1


def cmd_rescore(args) -> int:
    from evaluators.rescore import rescore_run
    from results.store import open_run

    if args.concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    options = backend_options(args, args.sandbox)
    out = asyncio.run(
        rescore_run(
            args.run,
            args.out,
            suite=args.tasks,
            concurrency=args.concurrency,
            sandbox=args.sandbox,
            sandbox_options=options,
        )
    )
    info = open_run(out).manifest.config["rescore"]
    flips, kept = info["changed_verdicts"], info["not_regraded"]
    changed = info["tasks_changed"]
    print(f"tasks changed since the run (hidden tests, evaluator or environment): {len(changed)}")
    for tid in changed:
        print(f"  {tid}")
    print(f"verdicts changed: {len(flips)}")
    for f in flips:
        print(f"  {f['task_id']} sample {f['sample']}: {f['before']} -> {f['after']} ({f['reason_after']})")
    if kept:
        print(
            f"not re-graded (recorded verdict kept): {len(kept)}, e.g. {kept[0]['task_id']}: {kept[0]['why']}"
        )
    print(f"run folder: {out}")
    return 0


def cmd_eval(args) -> int:
    from evaluators.run.network import network_lines, offline
    from evaluators.run.runner import run_eval

    cfg, tasks = eval_config_from(args)
    if cfg.no_internet:
        tasks = offline(tasks)
    for line in network_lines(tasks):
        print(line, file=sys.stderr)
    telemetry.apply_options(args, "harness-eval")
    if not telemetry.json_logs():
        print(f"harness eval: {cfg.model} on {len(tasks)} tasks x {cfg.samples} samples", file=sys.stderr)
    out_dir = cfg.run_dir()
    if cfg.resume is None:
        cfg.out = out_dir  # named once: the interrupted run's resume command points at it
    try:
        run_dir = asyncio.run(run_eval(cfg, tasks))
    except KeyboardInterrupt:
        if (Path(out_dir) / "manifest.json").exists():
            print(
                f"harness eval: interrupted; resume with:\n  {resume_command(args, out_dir)}", file=sys.stderr
            )
        else:
            print("harness eval: interrupted before anything was recorded", file=sys.stderr)
        raise
    from results.report import print_summary

    print_summary(run_dir)
    print(f"run folder: {run_dir}")
    return 1 if all_errored(run_dir) else 0


DEMO_INTRO = (
    "harness demo: the embedded model (SmolLM2-135M, on this CPU) on the {n} tasks of builtin:demo, "
    "every domain, difficulty 1-3: about a minute on a 2-core machine (the first time also builds "
    "their images)"
)


def cmd_demo(args) -> int:
    """`make demo`: `eval --tasks builtin:demo` in its own folder; run again, it resumes an interrupted demo
    or shows the finished one, and it ends with what to try next."""
    from results.manifest import read_manifest
    from results.report import print_summary
    from tasks.loader import DEMO

    out = args.out
    argv = ["eval", "--tasks", "builtin:demo", "--out", str(out)]
    if args.model:
        argv += ["--model", args.model]
    if (out / "manifest.json").exists():
        if read_manifest(out).finished_at:
            print(f"harness demo: the demo has run already; its summary ({out}):", file=sys.stderr)
            print_summary(out)
            _next_steps(out)
            return 0
        argv = ["eval", "--resume", str(out)]
        print(f"harness demo: resuming the demo in {out}", file=sys.stderr)
    elif args.model:
        print(f"harness demo: {args.model} on the {len(DEMO)} tasks of builtin:demo", file=sys.stderr)
    else:
        print(DEMO_INTRO.format(n=len(DEMO)), file=sys.stderr)
    parser = argparse.ArgumentParser()
    add_eval_options(parser)
    telemetry.add_options(parser)
    eval_args = parser.parse_args(argv[1:])
    eval_args.argv = argv
    code = cmd_eval(eval_args)
    _next_steps(out)
    return code


def _next_steps(run: Path) -> None:
    h = invocation()
    print("next:")
    print(f"  {h} show {run} fizzbuzz       # one attempt, step by step, and its verdict")
    print(f"  {h} report {run}             # report.html: plots and every attempt's steps")
    print(f"  {h} eval --model openai/gpt-4o-mini --tasks builtin:demo   # a real model (OPENAI_API_KEY)")


def select_tasks(cfg: EvalConfig, only: Optional[set[str]] = None) -> list:
    """The suite's tasks that pass the filters (tasks.loader.load_suite), or those whose ids are `only`
    (a resumed run's), then cfg.limit of them spread over difficulties, domains and families."""
    from tasks.loader import load_suite, spread

    if only is None:
        tasks = load_suite(cfg.suite, **asdict(cfg.filters))
    else:
        tasks = [t for t in load_suite(cfg.suite) if t.id in only]
    return spread(tasks, cfg.limit)


def eval_config_from(args: argparse.Namespace) -> tuple[EvalConfig, list]:
    """The EvalConfig that `harness eval`'s options ask for (add_eval_options) and its tasks. An option not
    given takes the field's default; with --resume, the run's model, samples, temperature, suite, batch
    grading and tasks (results.manifest.resume_settings refuses other values asked for). Model options are
    parsed for the model's backend (-M, --adapter, --base-url)."""
    from agent.models import parse_model_options

    given = given_fields(args, EvalConfig)
    loop = {k: getattr(args, k) for k in LOOP_OPTIONS if getattr(args, k, None) is not None}
    if given.get("retry_errors") and "resume" not in given:
        raise UserError("--retry-errors needs --resume DIR (the run whose errored attempts to run again)")
    only = None
    if "resume" in given:
        from results.manifest import resume_settings

        manifest, _ = resume_settings(
            given["resume"],
            model=given.get("model"),
            samples=given.get("samples"),
            temperature=loop.get("temperature"),
        )  # the run's own settings win
        run = EvalConfig.from_record(manifest.model, manifest.config)
        given.update(model=run.model, samples=run.samples)
        given.setdefault("suite", run.suite)
        given.setdefault("batch_grading", run.batch_grading)
        loop["temperature"] = run.loop.temperature
        only = set(manifest.config.get("tasks", []))
    cfg = EvalConfig(
        **given,
        loop=replace(eval_loop(), **loop),
        filters=TaskFilter(**given_fields(args, TaskFilter)),
        sandbox_options=backend_options(args, given.get("sandbox", EvalConfig.sandbox)),
    )
    if cfg.samples < 1 or cfg.concurrency < 1:
        raise UserError("--samples and --concurrency must be at least 1")
    if cfg.limit is not None and cfg.limit < 1:
        raise UserError("--limit must be at least 1")
    tasks = select_tasks(cfg, only)
    cfg.model_options = parse_model_options(cfg.model, getattr(args, "model_option", None) or [])
    if getattr(args, "adapter", None):
        cfg.model_options["adapter"] = args.adapter
    if getattr(args, "base_url", None):
        cfg.model_options["base_url"] = args.base_url
    return cfg, tasks


def resume_command(args, out_dir: Path) -> str:
    """The exact command that continues this run: the same arguments, --resume for --out."""
    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--out", "--resume"):
            skip = True
        elif not a.startswith(("--out=", "--resume=")):
            kept.append(a)
    if not kept or kept[0] != "eval":
        kept.insert(0, "eval")  # `harness` alone runs eval
    return " ".join([invocation(), *map(shlex.quote, kept), "--resume", shlex.quote(str(out_dir))])


def all_errored(run_dir: Path) -> bool:
    """Whether the run has attempts and every one is an infrastructure error (nothing was evaluated)."""
    from results.store import open_run

    statuses = open_run(run_dir).read_attempts(["status"])["status"]
    if len(statuses) and (statuses == "error").all():
        print(
            "harness eval: every attempt ended in an infrastructure error; "
            "see the run folder's attempts.jsonl (error field)",
            file=sys.stderr,
        )
        return True
    return False
