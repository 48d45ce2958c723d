"""`harness tasks ...`: list suites, import HumanEval, validate tasks, audit them with cheats (sandbox)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tasks.loader import load_suite
from tasks.model import DOMAINS, SPLITS


def register(subparsers) -> None:
    parser = subparsers.add_parser("tasks", help="list, import and validate tasks")
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: _help(parser))

    ls = sub.add_parser("list", help="show the tasks of a suite")
    _add_suite_args(ls)
    ls.set_defaults(func=cmd_list)

    imp = sub.add_parser("import", help="write an external benchmark as task folders")
    imp.add_argument("source", choices=["humaneval"], help="what to import")
    imp.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder to write (default: tasks/humaneval, which `humaneval` as a suite refers to)",
    )
    imp.set_defaults(func=cmd_import)

    imp = sub.add_parser(
        "impossible",
        help="write an impossible variant of each pytest/script task (a pass is a cheat)",
        description="After ImpossibleBench: each variant keeps the instruction and changes one expected "
        "value of the hidden tests, so no solution that follows the instruction passes. `harness eval` on "
        "the folder reports the cheating rate; `harness tasks validate DIR` checks the oracle fails each.",
    )
    add_suite(imp, required=True)
    imp.add_argument("--out", type=Path, required=True, help="folder to write (one task folder per variant)")
    imp.set_defaults(func=cmd_impossible)

    aud = sub.add_parser(
        "audit",
        help="each task's measured solve rate across runs and models, and which tasks look broken",
        description="Reads the attempts of eval runs (folders holding attempts.jsonl, or train run "
        "folders, searched for them) and prints each task's solve rate with its 95%% interval, then "
        "what stands out: never solved, always solved, solved by the null agent, flaky between "
        "identical attempts, a high tamper or exploit-flag rate. The first three of those last mark "
        "a task broken: `harness train` leaves broken tasks out.",
    )
    aud.add_argument("runs", nargs="+", metavar="RUN", help="eval run folders or train run folders")
    aud.add_argument(
        "--hack-rate", type=float, default=0.25, help="tamper+flag share above which a task is suspect"
    )
    aud.add_argument("--broken", action="store_true", help="print only the tasks marked broken")
    aud.set_defaults(func=cmd_audit)


def add_suite(p: argparse.ArgumentParser, required: bool = False) -> None:
    what = 'a folder of tasks, a task folder, "builtin", "builtin:easy" or "humaneval"'
    if required:
        p.add_argument("suite", help=what)
    else:
        p.add_argument("suite", nargs="?", default="builtin", help=f"{what} (default: builtin)")


def _add_suite_args(p: argparse.ArgumentParser) -> None:
    add_suite(p)
    p.add_argument("--domain", choices=DOMAINS)
    p.add_argument("--difficulty", help="N or N-M, e.g. 2 or 1-2")
    p.add_argument("--split", choices=SPLITS, help="family instances of this split only")


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def cmd_list(args) -> int:
    tasks = load_suite(args.suite, domain=args.domain, difficulty=args.difficulty, split=args.split)
    if not tasks:
        print("no tasks match")
        return 0
    header = ("id", "domain", "difficulty", "split", "evaluator")
    rows = [(t.id, t.domain, str(t.difficulty), t.split or "-", t.evaluator.kind) for t in tasks]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    print(f"{len(tasks)} tasks")
    return 0


def cmd_import(args) -> int:
    from tasks.humaneval import import_humaneval

    out = import_humaneval(args.out)
    count = sum(1 for p in out.iterdir() if p.is_dir())
    print(f"wrote {count} tasks to {out}")
    return 0


def cmd_impossible(args) -> int:
    from tasks.impossible import write_impossible_suite

    tasks = load_suite(args.suite)
    written, skipped = write_impossible_suite(tasks, args.out)
    for task_id, why in skipped:
        print(f"  skipped {task_id}: {why}")
    print(
        f"wrote {len(written)} impossible variants of {len(tasks)} tasks to {args.out} "
        f"({len(skipped)} skipped)"
    )
    return 0


def cmd_audit(args) -> int:
    from results.store import find_attempt_files, iter_attempts
    from results.task_audit import audit_tasks

    attempts = [a for path in find_attempt_files(args.runs) for a in iter_attempts(path)]
    rows = audit_tasks(attempts, hack_rate=args.hack_rate)
    shown = [r for r in rows if r.broken] if args.broken else rows
    width = max([len(r.rate.task_id) for r in shown] + [4])
    print(
        f"{'task':<{width}}  {'n':>4}  {'solved':>6}  {'rate':>5}  {'95% CI':<11}  null  "
        "tamper  flags  verdict"
    )
    for r in shown:
        t = r.rate
        ci = f"{t.ci_low:.2f}-{t.ci_high:.2f}" if t.n else "-"
        rate = f"{t.rate:.2f}" if t.n else "-"
        null = f"{r.null_solved}/{r.null_n}" if r.null_n else "-"
        print(
            f"{t.task_id:<{width}}  {t.n:>4}  {t.solved:>6}  {rate:>5}  {ci:<11}  {null:<4}  "
            f"{t.tamper:>6}  {t.flagged:>5}  {'; '.join(r.verdicts) or '-'}"
        )
    broken = [r.rate.task_id for r in rows if r.broken]
    models = sorted({m for r in rows for m in r.models})
    print(
        f"{len(rows)} tasks, {len(attempts)} attempts from {len(models)} model(s); "
        f"{len(broken)} marked broken" + (f": {', '.join(broken)}" if broken else "")
    )
    return 0
