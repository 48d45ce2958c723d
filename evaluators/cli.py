"""Subcommands of the evaluators package: `harness eval` (run and grade a suite) and `harness selftest`."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from pathlib import Path

from agent.config import add_loop_options
from agent.models import DEFAULT_MODEL, add_model_option
from results import telemetry
from results.errors import UserError

DEFAULT_SUITE = "builtin:easy"

EVAL_EXAMPLE = (
    "examples:\n"
    "  harness eval                                            # the embedded local model on builtin:easy\n"
    "  harness eval --model openai/gpt-4o-mini --tasks builtin --samples 5 --concurrency 8 --limit 20\n"
    "  harness eval --model openai-compat:http://127.0.0.1:8000/v1/tuned "
    "-M supports_tools=true -M context_window=8192"
)


def register(sub):
    p = sub.add_parser(
        "eval",
        help="evaluate a model on a task suite (no arguments: the embedded default)",
        description="Run the agent on every selected task (x samples) in sandboxes, grade each "
        "attempt with hidden tests, append it to the run folder and print a "
        "summary. Exits 1 when every attempt ended in an infrastructure error.",
        epilog=EVAL_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", help=f"model string (default {DEFAULT_MODEL}); see README 'Model strings'")
    add_model_option(p)
    p.add_argument(
        "--tasks",
        default=DEFAULT_SUITE,
        help=f"suite: folder, builtin, builtin:easy (default {DEFAULT_SUITE})",
    )
    p.add_argument("--domain", help="only tasks of this domain (coding, data, ops, documents, science)")
    p.add_argument("--difficulty", type=int, help="only tasks of this difficulty (1-5)")
    p.add_argument("--split", help="only family instances of this split (train or heldout)")
    p.add_argument(
        "--tag", action="append", dest="tags", help="only tasks with this tag (repeatable: all must match)"
    )
    p.add_argument("--glob", help="only task ids matching this glob")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N selected tasks (in suite order)")
    p.add_argument("--samples", type=int, help="attempts per task (default 1)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="attempts in flight (a local model decodes concurrent requests as one batch; default 4)",
    )
    p.add_argument("--model-concurrency", type=int, help="concurrent model requests (default: --concurrency)")
    p.add_argument(
        "--batch-grading",
        type=int,
        metavar="N",
        help="up to N attempts of one image take turns in one fresh grading container, each as its own user "
        "(pytest tasks with the candidate proxy; others keep a container each; default 0: one per attempt)",
    )
    add_loop_options(
        p, "temperature", defaults={"temperature": (None, "{default:g}")}
    )  # None: 0, or the run's
    add_loop_options(
        p,
        "max_steps",
        "max_reply_tokens",
        "token_budget",
        "cost_limit",
        "protocol",
    )
    p.add_argument("--adapter", help="LoRA adapter folder for a local model (same as -M adapter=DIR)")
    p.add_argument(
        "--base-url", help="OpenAI-compatible endpoint (with --model NAME; same as -M base_url=URL)"
    )
    add_loop_options(p, "seed", defaults={"seed": (0, 0)})  # eval's runs are seeded (LoopConfig's None: not)
    p.add_argument("--out", type=Path, help="run folder (default runs/<time>-<model>)")
    p.add_argument(
        "--no-internet",
        action="store_true",
        help="Harbor tasks: no network for any container (default: as each task says; Harbor's: on)",
    )
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue an interrupted run in DIR")
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="with --resume: also run again the attempts recorded as error (infrastructure or provider "
        "outage); their old records move to DIR/retried.jsonl",
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the attempts on a Ray cluster: ray://HOST:PORT, HOST:PORT or auto (needs harness[cluster])",
    )
    p.add_argument(
        "--sandbox",
        choices=["docker", "k8s"],
        default="docker",
        help="where sandboxes run: this machine's Docker (default) "
        "or Kubernetes via agent-sandbox (KUBECONFIG)",
    )
    p.add_argument(
        "--k8s-image", help="with --sandbox k8s: the base image in a registry the cluster pulls from"
    )
    p.add_argument("--k8s-namespace", help="with --sandbox k8s (default: the kubeconfig context's)")
    p.add_argument("--k8s-runtime-class", help="with --sandbox k8s: e.g. gvisor or kata-qemu")
    p.add_argument(
        "--k8s-connect",
        choices=["auto", "pod-ip", "exec"],
        default="auto",
        help="with --sandbox k8s: reach sandboxes by pod IP, or by one kubectl exec stream each",
    )
    telemetry.add_options(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "rescore",
        help="grade a run's kept changes again with the current task versions (no model calls)",
        description="Grade the stored final changes of every attempt of RUN again, with the current "
        "(or the given) version of each task's hidden tests, in fresh containers, without calling the "
        "model. Writes a new run folder whose manifest names the source run, the task versions before "
        "and after, and the verdicts that changed; `harness compare RUN NEW` shows the flips.",
        epilog="example:\n  harness rescore runs/A --out runs/A-rescored\n"
        "  harness compare runs/A runs/A-rescored",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", type=Path, metavar="RUN", help="the run folder to grade again")
    p.add_argument("--tasks", help="suite to take the tasks from (default: the run's own suite)")
    p.add_argument("--out", type=Path, required=True, help="the new run folder")
    p.add_argument("--concurrency", type=int, default=4, help="gradings in flight (default 4)")
    p.set_defaults(func=cmd_rescore)

    p = sub.add_parser(
        "selftest", help="attack the installed harness with a scripted agent and check it holds"
    )
    p.add_argument("--only", metavar="NAME", help="run only these cases (comma-separated names or globs)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.set_defaults(func=cmd_selftest)


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
    out = asyncio.run(rescore_run(args.run, args.out, suite=args.tasks, concurrency=args.concurrency))
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
    from agent.config import LoopConfig
    from evaluators.runner import run_eval
    from tasks.loader import load_suite

    resume_dir = args.resume
    if args.retry_errors and resume_dir is None:
        raise UserError("--retry-errors needs --resume DIR (the run whose errored attempts to run again)")
    if resume_dir is not None:
        from results.manifest import resume_settings

        manifest, recorded = resume_settings(
            resume_dir, model=args.model, samples=args.samples, temperature=args.temperature
        )  # the run's own settings win
        cfg = manifest.config
        args.model, args.samples, args.temperature = (
            recorded["model"],
            recorded["samples"],
            recorded["temperature"],
        )
        tasks = [
            t
            for t in load_suite(
                args.tasks if args.tasks != DEFAULT_SUITE else cfg.get("suite", DEFAULT_SUITE)
            )
            if t.id in set(cfg.get("tasks", []))
        ]
    else:
        args.model = args.model or DEFAULT_MODEL
        args.samples = 1 if args.samples is None else args.samples
        args.temperature = 0.0 if args.temperature is None else args.temperature
        tasks = load_suite(
            args.tasks,
            domain=args.domain,
            difficulty=args.difficulty,
            tags=args.tags,
            split=args.split,
            glob=args.glob,
        )
    if args.samples < 1 or args.concurrency < 1:
        raise UserError("--samples and --concurrency must be at least 1")
    from agent.models import parse_model_options

    if args.limit is not None:
        if args.limit < 1:
            raise UserError("--limit must be at least 1")
        tasks = tasks[: args.limit]
    from tasks import harbor

    if getattr(args, "no_internet", False):
        tasks = harbor.offline(tasks)
    if harbor.network_line(tasks):
        print(harbor.network_line(tasks), file=sys.stderr)
    options = parse_model_options(args.model, getattr(args, "model_option", []))
    if args.adapter:
        options["adapter"] = args.adapter
    if args.base_url:
        options["base_url"] = args.base_url
    loop = LoopConfig(
        max_steps=args.max_steps,
        token_budget=args.token_budget,
        cost_limit=args.cost_limit,
        protocol=args.protocol,
        max_reply_tokens=args.max_reply_tokens,  # None: default_reply_tokens, picked by run_eval
    )
    telemetry.apply_options(args, "harness-eval")
    if not telemetry.json_logs():
        print(f"harness eval: {args.model} on {len(tasks)} tasks x {args.samples} samples", file=sys.stderr)
    from results.store import default_run_dir

    out_dir = resume_dir or args.out or default_run_dir(args.model)
    try:
        run_dir = asyncio.run(
            run_eval(
                args.model,
                tasks,
                samples=args.samples,
                temperature=args.temperature,
                out_dir=out_dir,
                concurrency=args.concurrency,
                resume=resume_dir is not None,
                retry_errors=args.retry_errors,
                seed=args.seed,
                model_options=options,
                loop=loop,
                model_concurrency=args.model_concurrency,
                batch_grading=(
                    args.batch_grading
                    if args.batch_grading is not None
                    else (cfg.get("batch_grading", 0) if resume_dir is not None else 0)
                ),
                suite=args.tasks,
                cluster=args.cluster,
                sandbox=args.sandbox,
                sandbox_options={
                    "image": args.k8s_image,
                    "namespace": args.k8s_namespace,
                    "runtime_class": args.k8s_runtime_class,
                    "connect": args.k8s_connect,
                },
                filters={
                    "domain": args.domain,
                    "difficulty": args.difficulty,
                    "split": args.split,
                    "tags": args.tags,
                    "glob": args.glob,
                },
            )
        )
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
    prog = "harness" if Path(sys.argv[0]).name == "harness" else f"python {sys.argv[0]}"
    return " ".join([prog, *map(shlex.quote, kept), "--resume", shlex.quote(str(out_dir))])


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
