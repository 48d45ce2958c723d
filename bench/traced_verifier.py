"""What tracing the verifier costs: graded attempts per minute of Harbor tasks with the traced verifier
(the tamper rule over the trace and the task's load map) against HARNESS_TRACE=0 (the verifier untraced,
the static model of the image judging: the mechanism before), interleaved in the same run, at each
concurrency; and the trace's own cost on one test.sh run in one container.

    .venv/bin/python bench/traced_verifier.py [--tasks 6] [--concurrency 1 4] [--rounds 2] [--smoke]

The tasks are the attack matrix's Harbor task (evaluators/selftest/harbor_cases.py: test.sh runs pytest,
a Perl check, a verification-time install) in each verifier mode, solved by a scripted agent. The load maps
are made in an untimed first pass (once per task and image, cached on disk): their cost is printed apart.
Per-attempt data: bench/figures/traced_verifier.json (recompute the ratios from it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.run.config import EvalConfig  # noqa: E402
from evaluators.run.runner import run_eval  # noqa: E402
from evaluators.selftest.harbor_cases import MODES, RIGHT, harbor_task, solve  # noqa: E402


def _tasks(folder: Path, n: int, tag: str):
    return [harbor_task(folder, f"{tag}-{MODES[i % 3]}-{i:02d}", MODES[i % 3]) for i in range(n)]


def _eval(folder: Path, tasks, concurrency: int, traced: bool) -> tuple[float, list[dict]]:
    script = folder / "replay.json"
    reply = f"```bash\n{solve(RIGHT)}\n```"
    script.write_text(json.dumps({t.id: [reply, "```bash\nsubmit\n```"] for t in tasks}))
    out = folder / f"run-{'traced' if traced else 'static'}-{concurrency}-{time.monotonic_ns()}"
    os.environ["HARNESS_TRACE"] = "1" if traced else "0"
    t0 = time.monotonic()
    asyncio.run(
        run_eval(
            EvalConfig(model=f"replay:{script}", out=out, concurrency=concurrency), tasks, progress=False
        )
    )
    wall = time.monotonic() - t0
    recs = [json.loads(x) for x in (out / "attempts.jsonl").read_text().splitlines()]
    return wall, recs


def _trace_cost(folder: Path, repeats: int) -> dict:
    """test.sh alone, traced and untraced, alternating in one container of the matrix image."""
    from agent.sandbox.backends.docker.pool import DockerPool
    from evaluators.grading.harbor import environment, runtime

    task = harbor_task(folder, "cost", "snapshot")
    image = environment.task_image(task, log=lambda m: None)

    async def go():
        out = {"traced": [], "untraced": [], "events": []}
        async with DockerPool(run_id="bench-trace", warm=0) as pool:
            async with pool.sandbox(image, runtime.verifier_limits(task), task="cost") as sb:
                await sb.mkdirs("/tests", "/logs/verifier", mode=0o777)
                await sb.put_files(task.test_files, dest="/tests", user="root", executable=["test.sh"])
                await sb.exec(["sh", "-c", solve(RIGHT)], 30, user="root")
                for _ in range(repeats):
                    for traced in (True, False):
                        t = time.monotonic()
                        if traced:
                            _, _, trace = await runtime.run_traced(sb, "/tests/test.sh", 120, {}, "root")
                            out["events"].append(trace.count(b"\n"))
                        else:
                            await runtime.run_script(sb, "/tests/test.sh", 120, {}, "root")
                        out["traced" if traced else "untraced"].append(time.monotonic() - t)
        return out

    os.environ.pop("HARNESS_TRACE", None)
    return asyncio.run(go())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10, help="test.sh runs each way for the trace's own cost")
    ap.add_argument("--smoke", action="store_true", help="3 tasks, concurrency 1, one round, 2 repeats")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "figures" / "traced_verifier.json")
    a = ap.parse_args()
    if a.smoke:
        a.tasks, a.concurrency, a.rounds, a.repeats = 3, [1], 1, 2
    data: dict = {"tasks": a.tasks, "rounds": a.rounds, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tasks = _tasks(folder / "tasks", a.tasks, "bench")
        t0 = time.monotonic()
        _eval(folder, tasks, max(a.concurrency), traced=True)  # fills the load maps (untimed)
        data["first_pass_s"] = time.monotonic() - t0
        for r in range(a.rounds):
            for c in a.concurrency:
                for traced in (True, False) if r % 2 == 0 else (False, True):  # interleaved, order swapped
                    wall, recs = _eval(folder, tasks, c, traced)
                    data["runs"].append(
                        {
                            "traced": traced,
                            "concurrency": c,
                            "round": r,
                            "wall_s": wall,
                            "attempts": [
                                {
                                    "task": x["task_id"],
                                    "status": x["status"],
                                    "reason": x["reason"],
                                    "grading_s": (x.get("durations") or {}).get("grading"),
                                }
                                for x in recs
                            ],
                        }
                    )
        data["trace_cost"] = _trace_cost(folder, a.repeats)
    os.environ.pop("HARNESS_TRACE", None)
    if not a.smoke:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(data, indent=1) + "\n")
    print(report(data))


def report(data: dict) -> str:
    """The table, from the kept data alone."""
    lines = [f"first pass (load maps made for {data['tasks']} tasks): {data['first_pass_s']:.1f} s", ""]
    head = "| concurrency | static att/min | traced att/min | ratio | solved (static, traced) |"
    lines.append(head)
    lines.append("|---|---|---|---|---|")
    for c in sorted({r["concurrency"] for r in data["runs"]}):
        per = {}
        for traced in (False, True):
            runs = [r for r in data["runs"] if r["concurrency"] == c and r["traced"] == traced]
            n = sum(len(r["attempts"]) for r in runs)
            per[traced] = (
                60 * n / sum(r["wall_s"] for r in runs),
                sum(x["status"] == "solved" for r in runs for x in r["attempts"]),
                n,
            )
        lines.append(
            f"| {c} | {per[False][0]:.1f} | {per[True][0]:.1f} | {per[True][0] / per[False][0]:.2f} | "
            f"{per[False][1]}/{per[False][2]}, {per[True][1]}/{per[True][2]} |"
        )
    tc = data["trace_cost"]
    t, u = statistics.median(tc["traced"]), statistics.median(tc["untraced"])
    lines.append("")
    lines.append(
        f"test.sh alone (pytest + a Perl check), median of {len(tc['traced'])}: untraced {u:.3f} s, traced "
        f"{t:.3f} s (+{t - u:.3f} s, {t / u:.2f}x); trace lines {statistics.median(tc['events']):.0f}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--recompute":
        print(report(json.loads(Path(sys.argv[2]).read_text())))
    else:
        main()
