#!/usr/bin/env python3
"""How well `harness tasks validate` and `harness tasks audit` find broken tasks (issue 41 item 3): writes the
planted set (tasks/broken.py: each built-in task with one defect of a known class, and unchanged built-in
tasks as clean controls), validates it as `harness tasks validate --repeats N` does, audits the oracle and
null attempts that validate made (results.task_audit.audit_tasks), and prints the confusion table.

    python bench/broken_tasks.py                      # the full set (41 planted, 53 controls), --repeats 5
    python bench/broken_tasks.py --small --repeats 3  # one per class and four controls

A task is flagged when validate reports a problem or audit a verdict that names a class (tasks.broken.
found_classes); a flagged control is a false positive. Recall = flagged planted / planted; precision =
flagged planted / flagged; "right class" = the finding names the planted class (validate cannot tell a
wrong test, an impossible spec and a failing oracle apart: all three read as "oracle-fails").
Per-task data goes to bench/figures/broken-tasks/tasks.json and the table to summary.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluators.validate import validate
from results.task_audit import audit_tasks
from tasks.broken import CLASSES, CLEAN, found_classes, right_class, write_broken_set
from tasks.loader import load_suite

FIGURES = Path(__file__).resolve().parent / "figures" / "broken-tasks"


def measure(folder: Path, repeats: int, concurrency: int, small: bool) -> list[dict]:
    """One dict per task: its label, what validate and audit said, and the classes that names."""
    labels = write_broken_set(folder, load_suite("builtin"), small=small)
    tasks = load_suite(folder)
    rows = asyncio.run(validate(tasks, repeats=repeats, concurrency=concurrency))
    audits = {a.rate.task_id: a.verdicts for a in audit_tasks(a for r in rows for a in r.attempts)}
    out = []
    for r in rows:
        label, verdicts = labels[r.task], audits.get(r.task, [])
        found = found_classes(r.problems, r.flaky, verdicts)
        out.append(
            {
                "task": r.task,
                **label,
                "oracle": r.oracle,
                "null": r.null,
                "flaky": r.flaky,
                "problems": r.problems,
                "audit": verdicts,
                "found": found,
                "flagged": bool(found),
                "right_class": right_class(label["class"], found),
                "seconds": round(r.seconds, 1),
            }
        )
    return out


def table(per_task: list[dict]) -> dict:
    """Per planted class: n, flagged, right class, recall; overall recall and precision."""
    classes = {}
    for cls in [*CLASSES, CLEAN]:
        mine = [t for t in per_task if t["class"] == cls]
        if not mine:
            continue
        flagged = sum(t["flagged"] for t in mine)
        classes[cls] = {
            "n": len(mine),
            "flagged": flagged,
            "right_class": sum(bool(t["right_class"]) for t in mine),
            "recall": flagged / len(mine) if cls != CLEAN else None,
            "found": dict(Counter(f for t in mine for f in t["found"] or ["none"])),
        }
    planted = [t for t in per_task if t["class"] != CLEAN]
    tp = sum(t["flagged"] for t in planted)
    fp = sum(t["flagged"] for t in per_task if t["class"] == CLEAN)
    return {
        "classes": classes,
        "planted": len(planted),
        "controls": len(per_task) - len(planted),
        "recall": tp / len(planted) if planted else None,
        "right_class_recall": sum(bool(t["right_class"]) for t in planted) / len(planted)
        if planted
        else None,
        "precision": tp / (tp + fp) if tp + fp else None,
        "false_positives": [t["task"] for t in per_task if t["class"] == CLEAN and t["flagged"]],
        "missed": [t["task"] for t in planted if not t["flagged"]],
    }


def show(summary: dict) -> None:
    print(f"{'class':<17} {'n':>3} {'flagged':>7} {'right':>5} {'recall':>6}  found as")
    for cls, c in summary["classes"].items():
        recall = f"{c['recall']:.0%}" if c["recall"] is not None else "-"
        found = ", ".join(f"{k} {v}" for k, v in sorted(c["found"].items()))
        print(f"{cls:<17} {c['n']:>3} {c['flagged']:>7} {c['right_class']:>5} {recall:>6}  {found}")
    print(
        f"overall: recall {summary['recall']:.1%} ({summary['planted']} planted), right class "
        f"{summary['right_class_recall']:.1%}, precision {summary['precision']:.1%} "
        f"({summary['controls']} clean controls, {len(summary['false_positives'])} flagged)"
    )
    for name in ("missed", "false_positives"):
        if summary[name]:
            print(f"{name}: {', '.join(summary[name])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="oracle runs per task (flakiness needs several)")
    ap.add_argument("--concurrency", type=int, default=2, help="tasks validated at the same time")
    ap.add_argument("--small", action="store_true", help="one task per class and four controls")
    ap.add_argument("--figures", type=Path, default=FIGURES, help="where tasks.json and summary.json go")
    args = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="broken-tasks-") as tmp:
        per_task = measure(Path(tmp) / "set", args.repeats, args.concurrency, args.small)
    summary = table(per_task)
    summary.update(
        wall_seconds=round(time.monotonic() - t0),
        repeats=args.repeats,
        concurrency=args.concurrency,
        small=args.small,
        machine=f"{platform.machine()}, {platform.node()}",
        when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    show(summary)
    print(f"wall time {summary['wall_seconds']}s (repeats {args.repeats}, concurrency {args.concurrency})")
    args.figures.mkdir(parents=True, exist_ok=True)
    (args.figures / "tasks.json").write_text(json.dumps(per_task, indent=1) + "\n")
    (args.figures / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
