"""Graded attempts per minute on a local Ray cluster of 1 and 2 nodes, beside the single-machine path.

    .venv/bin/python bench/cluster.py [--tasks 40] [--concurrency 4] [--repeats 1] [--smoke]

All nodes run on this machine (a loopback-only network namespace, tests/ray_cluster.py) and share its
cores and its Docker engine, so more nodes cannot be faster here: the table shows the cost of going
through Ray (actors, object transfer, the driver writing every record) at equal total concurrency.
Each row is one `run_eval` of the same N scripted tasks (4 commands and submit, graded in a fresh
container): "whole" is N / wall time including start-up (Ray connection, actors, warm pools), "steady"
is the rate between the first and the last record. Then the driver's own ceiling: RunStore.append
(one fsync'd line per attempt) records per second, with records the size this run wrote.
Needs root (unshare, nsenter) and ray (pip install 'harness[cluster]').
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _bench_loop():
    spec = importlib.util.spec_from_file_location("bench_loop", ROOT / "bench" / "loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(mode: str, address: str, n: int, concurrency: int) -> dict:
    """One run_eval (in this process); prints and returns its rates."""
    from evaluators.run.config import EvalConfig
    from evaluators.run.runner import run_eval

    bl = _bench_loop()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    script = tmp / "s.json"
    script.write_text(json.dumps({"*": [bl.reply(c) for c in bl.COMMANDS] + [bl.reply("submit")]}))
    out = tmp / "run"
    stamps: list[float] = []
    stop = threading.Event()

    def watch():  # when each record landed: the steady rate excludes start-up
        seen = 0
        while not stop.is_set():
            p = out / "attempts.jsonl"
            k = p.read_bytes().count(b"\n") if p.exists() else 0
            stamps.extend([time.perf_counter()] * (k - seen))
            seen = k
            time.sleep(0.02)

    w = threading.Thread(target=watch, daemon=True)
    t0 = time.perf_counter()
    w.start()
    asyncio.run(
        run_eval(
            EvalConfig(
                model=f"replay:{script}",
                out=out,
                concurrency=concurrency,
                cluster=address if mode == "ray" else None,
            ),
            bl.make_tasks(n),
            progress=False,
        )
    )
    wall = time.perf_counter() - t0
    time.sleep(0.1)
    stop.set()
    w.join()
    recs = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert len(recs) == n and all(r["solved"] for r in recs), "bench tasks must all be solved"
    steady = (
        (len(stamps) - 1) / (stamps[-1] - stamps[0]) * 60
        if len(stamps) > 1 and stamps[-1] > stamps[0]
        else 0.0
    )
    res = {
        "records": str(out / "attempts.jsonl"),
        "whole": n / wall * 60,
        "steady": steady,
        "startup": stamps[0] - t0 if stamps else wall,
        "nodes": len({r["node"] for r in recs}),
        "record_bytes": statistics.mean(
            len(line) + 1 for line in (out / "attempts.jsonl").read_text().splitlines()
        ),
        "attempt_s": statistics.mean(r["durations"]["total"] for r in recs),
        "grading_s": statistics.mean(r["durations"]["evaluation"] for r in recs),
    }
    print("RESULT " + json.dumps(res), flush=True)
    return res


def _sample_records(path: Path, n: int) -> list[dict]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [lines[i % len(lines)] for i in range(n)]


def store_rate(sample: Path, n: int = 300) -> float:
    """RunStore.append records per second (each one write + fsync), with this run's real records."""
    from results.manifest import Manifest
    from results.run_writer import RunStore
    from results.schema import Attempt

    out = Path(tempfile.mkdtemp(prefix="bench-store-")) / "run"
    store = RunStore.create(out, Manifest.build("bench", {"bench": True}, []))
    recs = [
        Attempt.model_validate(
            {**r, "run_id": store.run_id, "key": f"{store.run_id}/{r['task_id']}/{i}", "sample": i}
        )
        for i, r in enumerate(_sample_records(sample, n))
    ]
    t = time.perf_counter()
    for r in recs:
        store.append(r)
    rate = n / (time.perf_counter() - t)
    store.close()
    return rate


def validate_rate(sample: Path, n: int = 300) -> float:
    """The driver's other work per record: rebuilding the Attempt a node sent (pydantic validation)."""
    from results.schema import Attempt

    raws = _sample_records(sample, n)
    t = time.perf_counter()
    for raw in raws:
        Attempt.model_validate(raw)
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument(
        "--repeats", type=int, default=1, help="paired runs per node count (the median ratio is printed)"
    )
    ap.add_argument("--smoke", action="store_true", help="a few attempts: checks that the benchmark runs")
    ap.add_argument("--inner", choices=["single", "ray"], help=argparse.SUPPRESS)
    ap.add_argument("--address", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        args.tasks, args.concurrency = 4, 2
    if args.inner:
        measure(args.inner, args.address, args.tasks, args.concurrency)
        return

    from agent.sandbox.backends.docker.images import ensure_base_image
    from tests.ray_cluster import LocalCluster, available

    why = available()
    if why:
        sys.exit(f"bench/cluster.py: {why}")
    ensure_base_image(log=lambda m: None)
    cluster = LocalCluster(cpus_per_node=1).start(workers=0)

    def inner(mode: str) -> dict:
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--inner",
            mode,
            "--address",
            cluster.address,
            "--tasks",
            str(args.tasks),
            "--concurrency",
            str(args.concurrency),
        ]
        p = subprocess.run(
            cluster.wrap(argv) if mode == "ray" else argv,
            env=cluster.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            raise RuntimeError(f"{mode} run failed: {p.stderr[-2000:]}")
        return json.loads(line[-1][7:])

    try:
        print(
            f"{args.tasks} attempts, total concurrency {args.concurrency}, "
            f"{os.cpu_count()} cores shared by all nodes",
            flush=True,
        )
        print(
            f"{'path':<20} {'nodes':>5} {'whole att/min':>14} {'steady att/min':>15} {'start-up s':>11} "
            f"{'vs single (steady)':>19}",
            flush=True,
        )
        ratios: dict[int, list[float]] = {1: [], 2: []}
        for nodes in (1, 2):
            if nodes == 2:
                cluster.add_worker()
            for rep in range(args.repeats):
                # Each Ray run is paired with a single-machine run next to it (order alternating): the
                # machine's load drifts, and on a shared machine it drifts a lot.
                order = ("single", "ray") if rep % 2 == 0 else ("ray", "single")
                got = {mode: inner(mode) for mode in order}
                single, r = got["single"], got["ray"]
                ratios[nodes].append(r["steady"] / single["steady"])
                print(
                    f"{'single machine':<20} {1:>5} {single['whole']:14.1f} {single['steady']:15.1f} "
                    f"{single['startup']:11.1f} {'1.00x':>19}",
                    flush=True,
                )
                print(
                    f"{'ray --cluster':<20} {r['nodes']:>5} {r['whole']:14.1f} {r['steady']:15.1f} "
                    f"{r['startup']:11.1f} {ratios[nodes][-1]:18.2f}x",
                    flush=True,
                )
        for nodes in (1, 2):
            print(
                f"ray, {nodes} node(s) / single machine, steady: "
                f"median {statistics.median(ratios[nodes]):.2f}x "
                f"of {len(ratios[nodes])} paired runs",
                flush=True,
            )
    finally:
        cluster.stop()
    rec_bytes = int(single["record_bytes"])
    sample = Path(single["records"])
    rate = store_rate(sample, 100 if args.smoke else 1000)
    print(
        f"per attempt (single machine): {single['attempt_s']:.2f} s in total, of which grading "
        f"{single['grading_s']:.2f} s; a record is {rec_bytes} bytes"
    )
    print(
        f"driver ceiling: RunStore.append {rate:.0f} records/s (write + fsync each) "
        f"= {rate * 60:.0f} attempts/min; "
        f"validating a node's record {validate_rate(sample):.0f}/s"
    )


if __name__ == "__main__":
    main()
