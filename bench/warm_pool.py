"""Containers the warm pool makes and never hands out, with the attempts' demand told to it per image (today)
or only in all (before), side by side in one run: `harness tasks validate` (one oracle and one null attempt
a task) on built-in tasks exported to Harbor's format, where every task has its own image, as
Terminal-Bench's do.

    .venv/bin/python bench/warm_pool.py [--tasks 18] [--rounds 2] [--out FILE]

Prints per way: containers made, acquired, made but never acquired, and the wall time; then the ratio of
unused containers (before / today). The ways alternate, `--rounds` times each, after the task images are
built; the counts of every run are written to --out (JSON) to recompute the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.sandbox import DEFAULT, sandbox_backend
from agent.sandbox.backends.docker.pool import DockerPool
from agent.sandbox.warm import WarmPool
from evaluators.cheats import one_per_family
from evaluators.grading import loads
from evaluators.harbor_export import export_suite
from evaluators.run.task_images import sandbox_images
from evaluators.validate import validate
from tasks.loader import load_suite


def one_run(tasks, per_image: bool) -> dict:
    counts = {"made": 0, "acquired": 0}
    real_create = DockerPool.create  # the default backend's pool
    real_acquire, real_expect = WarmPool.acquire, WarmPool.expect

    def create(self, *a, **kw):
        counts["made"] += 1
        return real_create(self, *a, **kw)

    async def acquire(self, *a, **kw):
        counts["acquired"] += 1
        return await real_acquire(self, *a, **kw)

    def expect(self, acquires, by_image=None):
        return real_expect(self, acquires, by_image if per_image else None)

    DockerPool.create, WarmPool.acquire, WarmPool.expect = create, acquire, expect
    loads._CACHE.clear()  # each run probes its images afresh (a container each), as a new process does
    t0 = time.monotonic()
    try:
        rows = asyncio.run(validate(tasks, repeats=1, concurrency=4))
    finally:
        DockerPool.create, WarmPool.acquire, WarmPool.expect = real_create, real_acquire, real_expect
    bad = [r.task for r in rows if not r.ok]
    if bad:
        raise SystemExit(f"bench/warm_pool: validation failed on {bad}")
    return {**counts, "unused": counts["made"] - counts["acquired"], "seconds": time.monotonic() - t0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=18, help="exported built-in tasks (one per family, spread)")
    p.add_argument("--rounds", type=int, default=2, help="runs of each way, alternating")
    p.add_argument("--out", default=str(Path(__file__).parent / "figures" / "warm_pool.json"))
    args = p.parse_args(argv)

    picked = one_per_family(load_suite("builtin"))
    picked = picked[:: max(1, len(picked) // args.tasks)][: args.tasks]
    folder = Path(tempfile.mkdtemp(prefix="warm-pool-bench-"))
    export_suite(picked, folder / "suite")
    tasks = load_suite(str(folder / "suite"))
    asyncio.run(sandbox_images(sandbox_backend(DEFAULT), None, tasks, log=lambda m: None))  # built once

    runs = []
    for r in range(args.rounds):
        for way, per_image in (("before: total only", False), ("today: per image", True)):
            runs.append({"way": way, "round": r, **one_run(tasks, per_image)})
            print(f"round {r} {way:<20} {runs[-1]}", file=sys.stderr)

    print(f"\nbench/warm_pool: `tasks validate` on {len(tasks)} exported built-in tasks (an image each)")
    print(f"{'way':<20} {'made':>6} {'acquired':>9} {'unused':>7} {'seconds':>8}")
    sums = {}
    for way in ("before: total only", "today: per image"):
        mine = [x for x in runs if x["way"] == way]
        s = {k: sum(x[k] for x in mine) / len(mine) for k in ("made", "acquired", "unused", "seconds")}
        sums[way] = s
        print(f"{way:<20} {s['made']:>6.0f} {s['acquired']:>9.0f} {s['unused']:>7.0f} {s['seconds']:>8.1f}")
    before, today = sums["before: total only"], sums["today: per image"]
    print(
        f"unused containers, before / today = {before['unused'] / max(today['unused'], 1):.2f}x; "
        f"containers made {before['made'] / today['made']:.2f}x; "
        f"wall {before['seconds'] / today['seconds']:.2f}x"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"tasks": [t.id for t in tasks], "runs": runs}, indent=1) + "\n")
    print(f"per-run counts: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
