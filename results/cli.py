"""CLI commands of the results package: report, compare, export."""

from __future__ import annotations

import argparse
from pathlib import Path

from results import export, metrics, report
from results.commandline import add_command
from results.errors import UserError
from results.store import open_run


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_report(subparsers)
    _register_compare(subparsers)
    _register_show(subparsers)
    _register_export(subparsers)


def _register_report(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "report",
        help="tables, plots and a trajectory viewer for one or more runs",
        description="Print summary tables and write report.html, summary.csv, "
        "summary.parquet and summary.md.",
        examples=["harness report runs/base runs/tuned --out reports/round1"],
    )
    p.add_argument(
        "runs", nargs="+", metavar="RUN", help="run folder(s); the first is the baseline for comparisons"
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        help="output folder (default: the run folder for one run, reports/<timestamp>/ for several)",
    )
    _add_resampling(p, bootstrap=1000)
    p.set_defaults(func=cmd_report)


def _register_compare(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "compare",
        help="paired comparison of two runs, task by task",
        description="B against A on the tasks both scored: difference in solved rate with "
        "a bootstrap CI, a paired sign-flip permutation test, and flipped tasks.",
        examples=["harness compare runs/base runs/tuned"],
    )
    p.add_argument("run_a", metavar="RUN_A", help="baseline run folder")
    p.add_argument("run_b", metavar="RUN_B", help="run folder compared with the baseline")
    _add_resampling(p, bootstrap=2000)
    p.set_defaults(func=cmd_compare)


def _register_show(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "show",
        help="one attempt of a run: its steps, verdict and final diff",
        description="Print one recorded attempt: each step's action and observation, the verdict "
        "(reason, tests, flags) and the unified diff of its final changes against the starting files.",
        examples=["harness show runs/A fizzbuzz --sample 2"],
    )
    p.add_argument("run", metavar="RUN", help="run folder")
    p.add_argument("task", metavar="TASK", help="task id")
    p.add_argument("--sample", type=int, default=0, help="sample number (default 0)")
    p.set_defaults(func=cmd_show)


def _register_export(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "export",
        help="trajectories as fine-tuning data (JSONL) or Inspect AI logs",
        description="Export a run's conversations for fine-tuning (see results/export/formats.py "
        "for each format's fields). Infra errors are never exported; the worked "
        "example turns are never a training target.",
        examples=[
            "harness export runs/A --format hf-chat --only-solved --hf-dataset data/sft",
            "harness export runs/A --format kto",
        ],
    )
    p.add_argument("run", metavar="RUN", help="run folder")
    p.add_argument(
        "--format",
        required=True,
        choices=export.FORMATS + ("inspect", "atif"),
        metavar="FORMAT",
        help="openai | hf-chat (TRL SFT) | sharegpt | prompt-completion | kto (unpaired preference) | "
        "inspect (an Inspect AI eval log, for inspect view; needs harness[inspect]) | "
        "atif (Harbor's trajectory format, ATIF-v1.7; replay:FILE reads it back)",
    )
    p.add_argument(
        "--hf-dataset",
        metavar="DIR",
        type=Path,
        help="also write the records as a local Hugging Face datasets folder (load_from_disk(DIR))",
    )
    p.add_argument("--only-solved", action="store_true", help="only attempts that solved their task")
    p.add_argument(
        "--dedupe",
        action="store_true",
        help="drop attempts of the same task with the same sequence of actions",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        help="output file (default: RUN/export-<format>.jsonl; inspect: RUN/<run id>.eval)",
    )
    p.set_defaults(func=cmd_export)


def _add_resampling(p: argparse.ArgumentParser, bootstrap: int) -> None:
    p.add_argument(
        "--bootstrap",
        type=int,
        default=bootstrap,
        metavar="N",
        help=f"bootstrap resamples (default {bootstrap})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for bootstrap and permutation draws")


def cmd_report(args: argparse.Namespace) -> int:
    paths = report.build_report(args.runs, args.out, n_boot=args.bootstrap, seed=args.seed)
    print(f"\nwrote {paths['html']}, {paths['md'].name}, {paths['csv'].name}, {paths['parquet'].name}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    a, b = open_run(args.run_a), open_run(args.run_b)
    c = metrics.compare(a.read_attempts(), b.read_attempts(), n_boot=args.bootstrap, seed=args.seed)
    print(f"A = {a.run_id} ({a.manifest.model})\nB = {b.run_id} ({b.manifest.model})")
    print(
        report.format_table(c.per_task[c.per_task["diff"] != 0])
        if c.n_tasks
        else "  no task scored in both runs"
    )
    print(
        f"\n{c.n_tasks} shared tasks: solved rate A {c.rate_a:.3f}, B {c.rate_b:.3f}, "
        f"B - A = {c.diff:+.3f} (95% bootstrap CI {c.ci_low:+.3f} to {c.ci_high:+.3f}); "
        f"{c.test}: p = {c.p_value:.4f}"
    )
    print(f"improved (solved in B only): {report.id_list(c.improved, 30)}")
    print(f"regressed (solved in A only): {report.id_list(c.regressed, 30)}")
    if c.only_a or c.only_b:
        print(f"not compared: {len(c.only_a)} task(s) scored only in A, {len(c.only_b)} only in B")
    da, db = a.read_attempts(), b.read_attempts()
    changed = metrics.changed_tasks(da, db)
    if changed:
        print(f"tasks whose hidden tests, evaluator or environment differ: {report.id_list(changed, 30)}")
    flips = metrics.attempt_flips(da, db)
    print(f"attempts that flipped (same task and sample): {len(flips)}")
    for task_id, sample, before, after in flips[:50]:
        print(f"  {task_id} sample {sample}: {before} -> {after}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from results.report.show import format_attempt
    from results.store import kept_diff, verify_objects

    run = open_run(args.run)
    found = [a for a in run.iter_attempts() if a.task_id == args.task and a.sample == args.sample]
    if not found:
        samples = sorted({a.sample for a in run.iter_attempts() if a.task_id == args.task})
        hint = f"its samples: {samples}" if samples else "no attempt of that task is recorded"
        raise UserError(f"{args.run}: no attempt of task {args.task!r} sample {args.sample}; {hint}")
    attempt = found[-1]
    verify_objects(run.dir, [attempt])  # all its objects, not only the diff shown
    print(format_attempt(attempt, kept_diff(run.dir, attempt)))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if args.format == "atif":
        from results.export.atif import export_atif

        path, n = export_atif(args.run, args.out)
        print(f"wrote {n} ATIF trajectories to {path} (harness eval --model replay:{path} replays them)")
        return 0
    if args.format == "inspect":
        from results.export.inspect_log import export_inspect

        path, n = export_inspect(args.run, args.out)
        print(f"wrote an Inspect log of {n} samples to {path} (inspect view --log-dir {path.parent})")
        return 0
    result = export.export_run(
        args.run,
        args.format,
        args.out,
        only_solved=args.only_solved,
        dedupe=args.dedupe,
        hf_dataset=args.hf_dataset,
    )
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(result.skipped.items())) or "none"
    print(f"wrote {result.written} {args.format} records to {result.path} (skipped: {skipped})")
    if result.first_invalid:
        print(f"first invalid record: {result.first_invalid}")
    if args.hf_dataset:
        print(f"wrote the datasets folder {args.hf_dataset} (datasets.load_from_disk reads it)")
    return 0
