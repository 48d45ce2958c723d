"""Agent-loop throughput with a zero-latency scripted model, beside mini-swe-agent in the same run.

    .venv/bin/python bench/loop.py [--tasks 50] [--concurrency 1 2 4 8] [--no-mini] [--smoke]

--smoke: 2 tasks at concurrency 1 and 2, 2 overhead repetitions, 2 grading attempts per mode, without
mini-swe-agent (which needs installing): seconds; tests/test_bench_smoke.py runs it so it cannot rot.

1. Harness overhead per step: the loop's wall time per step minus the sandbox's own exec time
   (measured by the command server), on one warm sandbox.
2. Grading through the candidate proxy against importing the candidate into the test process (as before
   issue 11): attempts per minute of tasks whose hidden tests call the candidate, both ways, interleaved.
3. Attempts per minute for N tasks x 1 sample at each concurrency: harness (`run_eval`: fresh
   sandbox, the loop, capture, grading in a fresh container, a durable record) and, on the same image
   with the same scripted commands, mini-swe-agent (its DockerEnvironment + DeterministicModel; no
   grading). mini-swe-agent is installed into .venv-bench on first use (benchmark only).
4. Tracing (results/telemetry.py): attempts per minute and loop overhead per step with tracing off, on to
   a local file (--trace), and on to a live OTLP/HTTP receiver (Arize Phoenix from .venv-phoenix when
   there, else a minimal local receiver that accepts and drops), interleaved in the same run; and what the
   switched-off hooks cost per step (timed directly: they are too cheap to see in attempts per minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import LoopConfig  # noqa: E402
from agent.loop import run_loop  # noqa: E402
from agent.models import get_model  # noqa: E402
from agent.sandbox import Limits, SandboxPool  # noqa: E402
from agent.sandbox.images import ensure_base_image  # noqa: E402
from evaluators.runner import run_eval  # noqa: E402
from results import telemetry  # noqa: E402
from tasks.model import EvaluatorConfig, Task  # noqa: E402

COMMANDS = ["ls -la", "echo hello > out.txt", "cat out.txt", "wc -c out.txt"]
HIDDEN = (
    b"import os\n\ndef test_out():\n    assert open('/workspace/out.txt').read() == 'hello\\n'\n\n"
    b"def test_canary_out():\n    assert open('/workspace/out.txt').read() == 'bye\\n'\n"
)
BENCH_VENV = ROOT / ".venv-bench"


def reply(cmd: str) -> str:
    return f"Next step.\n```bash\n{cmd}\n```"


def make_tasks(n: int) -> list[Task]:
    return [
        Task(
            id=f"bench-{i:03d}",
            path=None,
            instruction="Write hello to out.txt.",
            workspace_files={"data.txt": b"x\n" * 10},
            test_files={"test_out.py": HIDDEN},
            solution_files={"solve.sh": b"echo hello > out.txt\n"},
        )
        for i in range(n)
    ]


async def overhead_per_step(image: str, reps: int = 30) -> tuple[float, float]:
    """(loop wall time per step, sandbox exec time per step), in ms."""
    script = Path(tempfile.mkdtemp()) / "s.json"
    script.write_text(json.dumps({"*": [reply(c) for c in COMMANDS] + [reply("submit")]}))
    model = get_model(f"replay:{script}")
    wall = execs = steps = 0.0
    async with SandboxPool(warm=0) as pool:
        async with pool.sandbox(image, Limits()) as sb:
            for _ in range(reps):
                t = time.perf_counter()
                res = await run_loop(model.for_task("x"), sb, "bench", LoopConfig())
                wall += time.perf_counter() - t
                execs += res.tool_seconds
                steps += len(res.steps)
    return wall / steps * 1000, execs / steps * 1000


LAST_CPU_MS = [0.0]  # this process's CPU time per attempt in the last harness_rate (all its threads)


async def harness_rate(tasks: list[Task], concurrency: int, commands: list[str] = COMMANDS) -> float:
    """Attempts per minute of run_eval with the scripted commands; every attempt must be solved."""
    cpu = time.process_time()
    script = Path(tempfile.mkdtemp()) / "s.json"
    script.write_text(json.dumps({"*": [reply(c) for c in commands] + [reply("submit")]}))
    out = Path(tempfile.mkdtemp()) / "run"
    t = time.perf_counter()
    await run_eval(f"replay:{script}", tasks, out_dir=out, concurrency=concurrency, progress=False)
    wall = time.perf_counter() - t
    LAST_CPU_MS[0] = (time.process_time() - cpu) / len(tasks) * 1000
    solved = sum(json.loads(line)["solved"] for line in (out / "attempts.jsonl").read_text().splitlines())
    assert solved == len(tasks), f"bench tasks must all be solved, got {solved}/{len(tasks)}"
    return len(tasks) / wall * 60


class _Receiver:
    """An OTLP/HTTP endpoint for the live mode: Phoenix when installed (its venv), else a local sink."""

    def __init__(self, phoenix_ok: bool = True):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc, self.work = None, Path(tempfile.mkdtemp())
        phoenix = Path(os.environ.get("HARNESS_PHOENIX") or ROOT / ".venv-phoenix" / "bin" / "phoenix")
        if phoenix_ok and os.access(phoenix, os.X_OK):
            self.name = "Arize Phoenix"
            env = {
                **os.environ,
                "PHOENIX_WORKING_DIR": str(self.work),
                "PHOENIX_HOST": "127.0.0.1",
                "PHOENIX_PORT": str(self.port),
                "PHOENIX_GRPC_PORT": "0",
                "PHOENIX_TELEMETRY_ENABLED": "false",
            }
            log = (self.work / "log").open("w")
            self.proc = subprocess.Popen([str(phoenix), "serve"], env=env, stdout=log, stderr=log)
            self._wait(f"http://127.0.0.1:{self.port}/healthz")
        else:
            import threading
            from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

            class Sink(BaseHTTPRequestHandler):
                def do_POST(self):
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

                def log_message(self, *a):
                    pass

            self.name = "a local OTLP/HTTP sink"
            self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Sink)
            threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _wait(self, url: str) -> None:
        import urllib.request

        for _ in range(360):
            try:
                urllib.request.urlopen(url, timeout=2).read()
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the trace receiver did not start: {(self.work / 'log').read_text()[-2000:]}")

    def close(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        else:
            self.httpd.shutdown()


def _tracing(mode: str, receivers: dict, trace_file: Path) -> None:
    telemetry.shutdown_tracing()
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if mode == "file":
        telemetry.configure_tracing(str(trace_file))
    elif mode in receivers:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receivers[mode].url
        telemetry.configure_tracing()


def off_hook_cost_ns(reps: int = 200_000) -> float:
    """Nanoseconds the switched-off hooks of one loop step take: the chat span, the tool span, the
    capture check and the two metric calls."""
    telemetry.shutdown_tracing()
    t = time.perf_counter()
    for _ in range(reps):
        with telemetry.span("chat m", None) as sp:
            telemetry.capture_content()
            sp.set({})
        telemetry.record_chat("m", 0.0, 1, 1)
        telemetry.tracing()
        telemetry.record_tool("bash", 0.0)
    return (time.perf_counter() - t) / reps * 1e9


def tracing_comparison(image: str, n: int, concurrency: int, rounds: int, reps: int, phoenix: bool = True):
    """Attempts per minute and loop overhead per step per tracing mode, interleaved `rounds` times."""
    # live: Phoenix when installed (it shares this machine's cores: its ingest is in the figure);
    # sink: a receiver that costs nothing, so the difference is the receiver's own work
    receivers = {"live": _Receiver(phoenix)}
    if receivers["live"].proc:
        receivers["sink"] = _Receiver(False)
    trace_file = Path(tempfile.mkdtemp()) / "trace.jsonl"
    modes = ("off", "file", *receivers)
    rate: dict[str, list[float]] = {m: [] for m in modes}
    over: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for _ in range(rounds):
            for mode in modes:
                _tracing(mode, receivers, trace_file)
                rate[mode].append(asyncio.run(harness_rate(make_tasks(n), concurrency)))
                cpu[mode].append(LAST_CPU_MS[0])
                wall, execs = asyncio.run(overhead_per_step(image, reps=reps))
                over[mode].append(wall - execs)
                telemetry.shutdown_tracing()  # flushes: the export's cost lands in its own mode
    finally:
        _tracing("off", receivers, trace_file)
        for r in receivers.values():
            r.close()

    def median(xs):
        return sorted(xs)[len(xs) // 2]

    med, ovh, cpu_ms = ({m: median(d[m]) for m in modes} for d in (rate, over, cpu))
    hook = off_hook_cost_ns()
    print(
        f"tracing, {n} attempts at concurrency {concurrency}, {rounds} interleaved rounds (median); "
        f"live receiver: {receivers['live'].name}"
        + (", sink: a local OTLP/HTTP sink" if "sink" in receivers else "")
    )
    print(
        f"{'tracing':>8} {'att/min':>8} {'vs off':>7} {'overhead/step ms':>17} {'CPU ms/attempt':>15} "
        f"{'vs off':>7}  att/min of each round"
    )
    for m in modes:
        each = " ".join(f"{x:.1f}" for x in rate[m])
        print(
            f"{m:>8} {med[m]:8.1f} {med[m] / med['off']:6.2f}x {ovh[m]:17.2f} {cpu_ms[m]:15.1f} "
            f"{cpu_ms[m] - cpu_ms['off']:+7.1f}  {each}"
        )
    share = hook / 1e6 / max(ovh["off"], 1e-9) * 100
    print(f"off: the hooks of one step take {hook:.0f} ns ({share:.3f}% of the loop's overhead per step)")
    return med, ovh, hook


def grading_tasks(n: int, calls: int, import_mode: str) -> list[Task]:
    """Tasks whose hidden tests import the candidate and call it `calls` times (issue 11's process
    boundary)."""
    hidden = (
        f"from solution import add\n\ndef test_many():\n    for i in range({calls}):\n"
        f"        assert add(i, 1) == i + 1\n\ndef test_canary_add():\n    assert add(2, 2) == 5\n"
    ).encode()
    return [
        Task(
            id=f"grade-{import_mode}-{i:03d}",
            path=None,
            instruction="Implement add.",
            workspace_files={"solution.py": b"def add(a, b):\n    return a + b\n"},
            test_files={"test_add.py": hidden},
            evaluator=EvaluatorConfig(kind="pytest", import_mode=import_mode),
            solution_files={"solve.sh": b"true\n"},
        )
        for i in range(n)
    ]


def grading_comparison(n: int, calls: int, concurrency: int = 2):
    """Attempts per minute when hidden tests call the candidate through the proxy (the default since
    issue 11) and imported into the test process (import_mode = "direct", as before), interleaved."""
    rates = {"direct": [], "proxy": []}
    for mode in ("direct", "proxy", "direct", "proxy"):
        rates[mode].append(asyncio.run(harness_rate(grading_tasks(n, calls, mode), concurrency, [])))
    direct, proxy = (sum(rates[m]) / len(rates[m]) for m in ("direct", "proxy"))
    per_attempt_ms = (60_000 / proxy - 60_000 / direct) * concurrency
    print(
        f"grading, {n} attempts x {calls} calls to the candidate, concurrency {concurrency}: "
        f"direct (in-process, before) {direct:.1f} att/min, proxy (after) {proxy:.1f} att/min, "
        f"ratio {proxy / direct:.2f}x; the boundary costs ~{per_attempt_ms:.0f} ms per attempt, "
        f"~{per_attempt_ms / calls * 1000:.0f} us per call"
    )


MINI = r"""
import sys, time, json
from concurrent.futures import ThreadPoolExecutor
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments.docker import DockerEnvironment
from minisweagent.models.test_models import DeterministicModel, make_output
image, n, conc, commands = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
cfg = dict(system_template="You are an agent.", instance_template="{{task}}", step_limit=0, cost_limit=0)
def one(i):
    outputs = [make_output("Next step.", [{"command": c}]) for c in commands]
    outputs.append(make_output("Done.", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]))
    env = DockerEnvironment(image=image, cwd="/tmp", run_args=["--rm", "--network", "none"])
    try:
        DefaultAgent(DeterministicModel(outputs=outputs), env, **cfg).run("Write hello to out.txt.")
    finally:
        subprocess.run(["docker", "rm", "-f", env.container_id], capture_output=True)
import subprocess
t = time.perf_counter()
with ThreadPoolExecutor(conc) as ex:
    list(ex.map(one, range(n)))
print(n / (time.perf_counter() - t) * 60)
"""


def mini_rate(image: str, n: int, concurrency: int) -> float:
    py = BENCH_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "mini-swe-agent"], check=True)
    out = subprocess.run(
        [str(py), "-c", MINI, image, str(n), str(concurrency), json.dumps(COMMANDS)],
        capture_output=True,
        text=True,
        env={**os.environ, "MSWEA_SILENT_STARTUP": "1"},
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--no-mini", action="store_true")
    ap.add_argument(
        "--grading-tasks",
        type=int,
        default=12,
        help="attempts per mode for the proxy/direct grading comparison (0: skip)",
    )
    ap.add_argument(
        "--grading-calls", type=int, default=1000, help="calls to the candidate per graded attempt"
    )
    ap.add_argument(
        "--tracing-tasks", type=int, default=24, help="attempts per tracing mode and round (0: skip)"
    )
    ap.add_argument(
        "--tracing-rounds", type=int, default=3, help="interleaved rounds of the three tracing modes"
    )
    ap.add_argument("--only-tracing", action="store_true", help="run only the tracing comparison")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny run without mini-swe-agent: checks the benchmark works"
    )
    args = ap.parse_args()
    if args.smoke:
        args.tasks, args.concurrency, args.no_mini, args.grading_tasks, args.grading_calls = (
            2,
            [1, 2],
            True,
            2,
            50,
        )
        args.tracing_tasks, args.tracing_rounds = 2, 1
    image = ensure_base_image(log=lambda m: None)
    if args.tracing_tasks:
        reps = 2 if args.smoke else 10
        tracing_comparison(image, args.tracing_tasks, 2, args.tracing_rounds, reps, phoenix=not args.smoke)
    if args.only_tracing:
        return
    tasks = make_tasks(args.tasks)
    wall, execs = asyncio.run(overhead_per_step(image, reps=2 if args.smoke else 30))
    print(
        f"per step: loop {wall:.2f} ms, sandbox exec {execs:.2f} ms, harness overhead {wall - execs:.2f} ms"
    )
    if args.grading_tasks:
        grading_comparison(args.grading_tasks, args.grading_calls)
    print(f"{'concurrency':>11} {'harness att/min':>16} {'mini-swe-agent att/min':>23} {'ratio':>6}")
    for c in args.concurrency:
        ours = asyncio.run(harness_rate(tasks, c))
        mini = None if args.no_mini else mini_rate(image, args.tasks, c)
        ratio = f"{ours / mini:5.1f}x" if mini else "-"
        print(f"{c:>11} {ours:16.1f} {mini if mini else float('nan'):23.1f} {ratio:>6}", flush=True)
    print(
        "harness attempts include grading in a fresh container and a durable record; mini-swe-agent's do not."
    )


if __name__ == "__main__":
    main()
