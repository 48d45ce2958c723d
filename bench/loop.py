"""Agent-loop throughput with a zero-latency scripted model, beside mini-swe-agent in the same run.

    .venv/bin/python bench/loop.py [--tasks 50] [--concurrency 1 2 4 8] [--batch 16 32] [--repeats 3]
        [--no-mini] [--smoke]

--smoke: 2 tasks at concurrency 1 and 2, 2 overhead repetitions, 2 grading attempts per mode, without
mini-swe-agent (which needs installing): seconds; tests/bench/test_bench_smoke.py runs it so it cannot rot.

1. Harness overhead per step: the loop's wall time per step minus the sandbox's own exec time
   (measured by the command server), on one warm sandbox.
2. Grading through the candidate proxy against importing the candidate into the test process (as before
   issue 11): attempts per minute of tasks whose hidden tests call the candidate, both ways, interleaved.
3. Attempts per minute for N tasks x 1 sample at each concurrency: harness (`run_eval`: fresh
   sandbox, the loop, capture, grading in a fresh container, a durable record) and, on the same image
   with the same scripted commands, mini-swe-agent (its DockerEnvironment + DeterministicModel; no
   grading). mini-swe-agent is installed into .venv-bench on first use (benchmark only).
4. Tracing (results/telemetry.py; the spans come from results/telemetry_hooks.py): attempts per minute and
   loop overhead per step with tracing off, on to a local file (--trace), and on to a live OTLP/HTTP
   receiver (Arize Phoenix from .venv-phoenix when there, else a minimal local receiver that accepts and
   drops), interleaved in the same run; and what the loop's announcements cost per step with nobody
   listening (results/hooks.py; timed directly: they are too cheap to see in attempts per minute).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import statistics
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
from agent.models.base import Completion  # noqa: E402
from agent.sandbox import SandboxSpec  # noqa: E402
from agent.sandbox.backends.docker.images import ensure_base_image  # noqa: E402
from agent.sandbox.backends.docker.pool import DockerPool  # noqa: E402
from evaluators.grading.pytest_kind import PytestSettings  # noqa: E402
from evaluators.run.config import EvalConfig  # noqa: E402
from evaluators.run.runner import run_eval  # noqa: E402
from results import hooks, telemetry  # noqa: E402
from results.schema import Action  # noqa: E402
from tasks.model import EvaluatorConfig, Task  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from sandbox import create_destroy_rate  # noqa: E402  (bench/sandbox.py)

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
    async with DockerPool(warm=0) as pool:
        async with pool.sandbox(image, SandboxSpec()) as sb:
            for _ in range(reps):
                t = time.perf_counter()
                res = await run_loop(model.for_task("x"), sb, "bench", LoopConfig())
                wall += time.perf_counter() - t
                execs += res.tool_seconds
                steps += len(res.steps)
    return wall / steps * 1000, execs / steps * 1000


LAST_CPU_MS = [0.0]  # this process's CPU time per attempt in the last harness_rate (all its threads)


async def harness_rate(
    tasks: list[Task],
    concurrency: int,
    commands: list[str] = COMMANDS,
    breakdown: bool = False,
    batch: int = 0,
) -> float:
    """Attempts per minute of run_eval with the scripted commands; every attempt must be solved.
    With `breakdown`, prints where an attempt's time went (the phase probes above)."""
    global PHASES
    cpu = time.process_time()
    script = Path(tempfile.mkdtemp()) / "s.json"
    script.write_text(json.dumps({"*": [reply(c) for c in commands] + [reply("submit")]}))
    out = Path(tempfile.mkdtemp()) / "run"
    if breakdown:
        install_phase_probes()
        PHASES = Phases()
        stop = asyncio.Event()
        lag = asyncio.ensure_future(_loop_lag(stop))
        cpu0, daemons0, machine0 = sum(os.times()[:4]), daemons_cpu(), machine_cpu()
    t = time.perf_counter()
    await run_eval(
        EvalConfig(model=f"replay:{script}", out=out, concurrency=concurrency, batch_grading=batch),
        tasks,
        progress=False,
    )
    wall = time.perf_counter() - t
    LAST_CPU_MS[0] = (time.process_time() - cpu) / len(tasks) * 1000
    records = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    solved = sum(r["solved"] for r in records)
    assert solved == len(tasks), f"bench tasks must all be solved, got {solved}/{len(tasks)}"
    if breakdown:
        own, daemons = sum(os.times()[:4]) - cpu0, daemons_cpu() - daemons0
        machine = [b - a for a, b in zip(machine0, machine_cpu())]
        stop.set()
        await lag
        latency = sum(r["durations"]["total"] for r in records) / len(records)
        mode = f"concurrency {concurrency}, batch grading {batch if batch > 1 else 'off'}"
        print_breakdown(PHASES, len(tasks), wall, own, daemons, latency, mode, machine)
        PHASES = None
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
    """Nanoseconds the loop's announcements of one step take with nobody listening (results/hooks.py): its
    model call and its tool call, each told the outcome."""
    telemetry.shutdown_tracing()
    reply, action, messages = Completion(content="x"), Action(kind="bash", command="true"), [{}]
    observer = hooks.observer()  # as the loop does, once an attempt
    t = time.perf_counter()
    for _ in range(reps):
        with observer.model_call("m", 0, 0.0, 1, messages) as call:
            call.answered(reply, 0.0)
        with observer.tool_call(action) as tool:
            tool.ran("", 0, False, 0.0)
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
            evaluator=EvaluatorConfig(kind="pytest", settings=PytestSettings(import_mode=import_mode)),
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


# ------------------------------------------------------------------ where an attempt's time goes (issue 25)
#
# Wrappers installed in this benchmark's process only (the product is not touched): each phase's wall time
# per attempt, the CPU of the harness process's own threads where a phase runs on one (engine calls), the
# CPU of every container (its cgroup, read just before it is removed) and of its containerd shim (with the
# runc calls it reaped), and the Docker daemons' CPU over the run (dockerd + containerd: shared with
# whatever else uses the engine meanwhile). Waiting is what remains of an attempt's wall time.

_ROLE: contextvars.ContextVar[str] = contextvars.ContextVar("bench_role", default="agent")


def _proc_cpu(pid: int) -> float:
    """utime+stime+cutime+cstime of a process, in seconds (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _pids_named(*names: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                comm = Path(f"/proc/{d}/comm").read_text().strip()
            except OSError:
                continue
            if comm in names:
                out.append(int(d))
    return out


def _shim_of(cid: str) -> int | None:
    for pid in _pids_named("containerd-shim", "containerd-shim-runc-v2"):
        try:
            if cid.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


def _container_cpu(cid: str) -> float:
    """CPU seconds of a container's processes (cgroup v1 cpuacct or v2 cpu.stat), 0 when unreadable."""
    for path in (
        f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage",
        f"/sys/fs/cgroup/docker/{cid}/cpu.stat",
        f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat",
    ):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpuacct.usage"):
            return int(text) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e6
    return 0.0


class Phases:
    """Per-phase totals: wall seconds, calls, thread CPU seconds; container and shim CPU by role."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.thread_cpu: dict[str, float] = {}
        self.container_cpu: dict[str, float] = {}
        self.shim_cpu: dict[str, float] = {}
        self.containers: dict[str, int] = {}
        self.roles: dict[str, str] = {}  # container id -> role
        self.lag: list[float] = []

    def add(self, phase: str, seconds: float, cpu: float = 0.0):
        self.wall[phase] = self.wall.get(phase, 0.0) + seconds
        self.calls[phase] = self.calls.get(phase, 0) + 1
        self.thread_cpu[phase] = self.thread_cpu.get(phase, 0.0) + cpu


PHASES: Phases | None = None


def _timed_async(fn, phase):
    async def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return await fn(*a, **kw)
        finally:
            if PHASES is not None:
                PHASES.add(phase() if callable(phase) else phase, time.perf_counter() - t)

    return wrapper


def _timed_thread(fn, phase):
    """A blocking function run on a thread: its wall time and that thread's CPU time."""

    def wrapper(*a, **kw):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **kw)
        finally:
            if PHASES is not None:
                PHASES.add(
                    phase() if callable(phase) else phase, time.perf_counter() - t, time.thread_time() - c
                )

    return wrapper


def install_phase_probes():
    """Wraps the product's phase functions (once per process)."""
    import agent.sandbox.backends.docker.pool as pool_mod
    import agent.sandbox.backends.docker.sandbox as sandbox_mod
    import evaluators.grading.grade as grade_mod
    import evaluators.run.attempt as attempt_mod
    from agent.sandbox.served import ServedSandbox as Sandbox
    from results.run_writer import RunStore

    if getattr(install_phase_probes, "done", False):
        return
    install_phase_probes.done = True
    role = _ROLE.get

    orig_create = sandbox_mod.create_sandbox

    def create(*a, **kw):
        sb = _timed_thread(orig_create, "container create+start (pool refill, thread)")(*a, **kw)
        return sb

    pool_mod.create_sandbox = create

    orig_kill = Sandbox.kill

    def kill(self):
        if PHASES is not None and not getattr(self, "_bench_measured", False):
            self._bench_measured = True
            r = PHASES.roles.get(self.id, "warm, never used")
            PHASES.container_cpu[r] = PHASES.container_cpu.get(r, 0.0) + _container_cpu(self.id)
            shim = _shim_of(self.id)
            PHASES.shim_cpu[r] = PHASES.shim_cpu.get(r, 0.0) + (_proc_cpu(shim) if shim else 0.0)
            PHASES.containers[r] = PHASES.containers.get(r, 0) + 1
        return _timed_thread(orig_kill, "container destroy (background, thread)")(self)

    Sandbox.kill = kill

    orig_acquire = pool_mod.DockerPool.acquire

    async def acquire(self, *a, **kw):
        t = time.perf_counter()
        sb = await orig_acquire(self, *a, **kw)
        if PHASES is not None:
            PHASES.add(f"{role()}: sandbox acquire", time.perf_counter() - t)
            PHASES.roles[sb.id] = role()
        return sb

    pool_mod.DockerPool.acquire = acquire

    def put_phase():
        return "agent: starting files" if role() == "agent" else "grading: workspace rebuild + grader files"

    Sandbox.put_files = _timed_async(Sandbox.put_files, put_phase)
    Sandbox.mark_baseline = _timed_async(Sandbox.mark_baseline, "agent: baseline listing")
    Sandbox.changes = _timed_async(Sandbox.changes, "agent: change capture")
    Sandbox.exec = _timed_async(Sandbox.exec, lambda: f"{role()}: each command (exec)")
    grade_mod.run = _timed_async(grade_mod.run, "grading: verifier + candidate proxy")
    grade_mod.read = _timed_async(grade_mod.read, "grading: verdict read")
    grade_mod.mkdirs = _timed_async(grade_mod.mkdirs, "grading: grader folders")
    grade_mod.pids_events = _timed_async(grade_mod.pids_events, "grading: pid-limit counters")
    grade_mod.GradingStations._wipe = _timed_async(
        grade_mod.GradingStations._wipe, "grading: wipe between turns (batch, after the verdict)"
    )
    # an attempt whose grading finds every grading container busy waits here for a turn
    grade_mod.GradingStations._station = _timed_async(
        grade_mod.GradingStations._station, "grading: waiting for a turn (batch)"
    )
    orig_release = pool_mod.DockerPool.release
    pool_mod.DockerPool.release = _timed_async(orig_release, lambda: f"{role()}: release (hand-off)")

    orig_grade = attempt_mod.grade

    async def grade(*a, **kw):
        token = _ROLE.set("grading")
        t = time.perf_counter()
        try:
            return await orig_grade(*a, **kw)
        finally:
            _ROLE.reset(token)
            if PHASES is not None:
                PHASES.add("grading: total", time.perf_counter() - t)

    attempt_mod.grade = grade
    RunStore.append = _timed_thread(RunStore.append, "record (append + fsync)")


async def _loop_lag(stop: asyncio.Event, every: float = 0.01):
    """How late the event loop wakes up: time it spent blocked by synchronous work (or starved of CPU)."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(every)
        if PHASES is not None:
            PHASES.lag.append(time.perf_counter() - t - every)


def daemons_cpu() -> float:
    return sum(_proc_cpu(p) for p in _pids_named("dockerd", "containerd"))


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far (/proc/stat: every process and the kernel; busy
    is all but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, sum(ticks) / hz


def print_breakdown(
    ph: Phases,
    attempts: int,
    wall: float,
    own_cpu: float,
    daemon_cpu: float,
    latency: float,
    mode: str,
    machine: list[float],
):
    """The per-phase table of one run, per attempt."""
    print(f"per-phase breakdown, {mode}, {attempts} attempts (ms per attempt; wall = summed over calls):")
    print(f"  {'phase':<52} {'calls/att':>9} {'wall ms':>9} {'thread CPU ms':>14}")
    for phase in sorted(ph.wall):
        print(
            f"  {phase:<52} {ph.calls[phase] / attempts:9.1f} {ph.wall[phase] / attempts * 1000:9.1f} "
            f"{ph.thread_cpu[phase] / attempts * 1000:14.1f}"
        )
    cont = sum(ph.container_cpu.values())
    shims = sum(ph.shim_cpu.values())
    per = lambda x: x / attempts * 1000  # noqa: E731
    for r in sorted(ph.container_cpu):
        print(
            f"  containers ({r}): {ph.containers[r] / attempts:.2f}/attempt, their processes "
            f"{per(ph.container_cpu[r]):.1f} ms CPU, their shims + runc {per(ph.shim_cpu[r]):.1f} ms CPU"
        )
    cpu = own_cpu + daemon_cpu + cont + shims
    lag = sorted(ph.lag) or [0.0]
    print(
        f"  CPU per attempt: harness process {per(own_cpu):.1f} ms, "
        f"dockerd+containerd {per(daemon_cpu):.1f} ms "
        f"(shared engine), containers {per(cont):.1f} ms, shims+runc {per(shims):.1f} ms: "
        f"{per(cpu):.1f} ms in all = {cpu / wall / (os.cpu_count() or 1):.0%} of the machine's "
        f"{os.cpu_count()} cores over the run"
    )
    # what the processes above leave out: the kernel's own threads, processes outside the containers' groups
    print(
        f"  the whole machine (/proc/stat): {per(machine[0]):.1f} ms of CPU per attempt, "
        f"{machine[0] / max(machine[1], 1e-9):.0%} busy over the run"
    )
    print(
        f"  attempt latency {latency * 1000:.0f} ms, of which waiting (not CPU on its behalf) "
        f"~{max(0.0, latency * 1000 - per(cpu)):.0f} ms; "
        f"event loop late by p50 {lag[len(lag) // 2] * 1000:.1f} ms, "
        f"p99 {lag[int(len(lag) * 0.99)] * 1000:.1f} ms, max {lag[-1] * 1000:.1f} ms"
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


def verdicts_unchanged(suite: str, repeats: int, concurrency: int, batch: int) -> bool:
    """The suite's validation (oracle and untouched workspace, evaluators/validate.py) graded with batch
    grading off and on: every verdict (reason and reward) must be the same."""
    from evaluators.grading.grade import batchable
    from evaluators.validate import validate
    from tasks.loader import load_suite

    everything = load_suite(suite)
    tasks = [t for t in everything if batchable(t)]  # the others are graded as before, batch grading or not
    print(f"  {len(tasks)} of the {len(everything)} tasks of {suite} can be batch graded", flush=True)
    ways = {}
    for b in (0, batch):
        t = time.perf_counter()
        rows = asyncio.run(validate(tasks, repeats=repeats, concurrency=concurrency, batch_grading=b))
        ways[b] = {r.task: sorted(r.verdicts) or r.problems for r in rows}
        print(f"  validation with batch grading {b or 'off'}: {time.perf_counter() - t:.0f}s", flush=True)
    changed = [tid for tid in ways[0] if ways[0][tid] != ways[batch][tid]]
    n = sum(len(v) for v in ways[0].values())
    print(
        f"validation of {suite} ({len(tasks)} tasks, {n} verdicts), batch grading {batch} against off: "
        + ("every verdict unchanged" if not changed else f"{len(changed)} tasks changed")
    )
    for tid in changed[:20]:
        print(f"  {tid}: off {ways[0][tid]} / batch {ways[batch][tid]}")
    return not changed


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
    ap.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=[16, 32],
        help="attempts per grading container with batch grading (a column each)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="interleaved runs of each mode per concurrency; the table gives their medians",
    )
    ap.add_argument(
        "--no-breakdown",
        dest="breakdown",
        action="store_false",
        help="skip the per-phase breakdown at the top concurrency",
    )
    ap.add_argument(
        "--verdicts",
        metavar="SUITE",
        help="only: validate SUITE (e.g. builtin) with batch grading off and on and compare every verdict",
    )
    args = ap.parse_args()
    if args.verdicts:
        sys.exit(0 if verdicts_unchanged(args.verdicts, 1, 4, args.batch[0]) else 1)
    if args.smoke:
        args.tasks, args.concurrency, args.no_mini, args.grading_tasks, args.grading_calls = (
            2,
            [1, 2],
            True,
            2,
            50,
        )
        args.repeats, args.batch = 1, args.batch[:1]
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
    top = max(args.concurrency)
    modes = [0, *args.batch]  # batch grading off, then each batch size
    if args.breakdown:  # probed runs of their own: the probes' cost stays out of the table
        for b in modes:
            asyncio.run(harness_rate(tasks, top, breakdown=True, batch=b))
    rows = []
    for c in args.concurrency:  # the modes interleaved, `repeats` times, and mini-swe-agent beside them
        runs = {b: [] for b in modes}
        for _ in range(args.repeats):
            for b in modes:
                runs[b].append(asyncio.run(harness_rate(tasks, c, batch=b)))
        mini = None if args.no_mini else mini_rate(image, args.tasks, c)
        rows.append((c, runs, mini))
        spread = "; ".join(f"{b or 'off'}: " + ", ".join(f"{r:.0f}" for r in runs[b]) for b in modes)
        print(f"  (concurrency {c} measured; att/min per run, batch grading {spread})", flush=True)
    rate = create_destroy_rate(image, 4 if args.smoke else 10)
    ceiling = rate * 60 / 2
    print(
        f"container ceiling, measured in this run: {rate:.2f} containers created+destroyed per second "
        f"(bench/sandbox.py's cycle) / 2 per graded attempt = {ceiling:.1f} graded attempts/min"
    )
    head = f"{'concurrency':>11} {'harness att/min':>16} {'% of ceiling':>13}"
    for b in args.batch:
        head += f" {f'batch {b} att/min':>17} {'batch/plain':>12}"
    print(head + f" {'mini-swe-agent att/min':>23} {'harness/mini':>13}")
    for c, runs, mini in rows:
        plain = statistics.median(runs[0])
        line = f"{c:>11} {plain:16.1f} {plain / ceiling:12.0%}"
        for b in args.batch:
            batch = statistics.median(runs[b])
            line += f" {batch:17.1f} {batch / plain:11.2f}x"
        vs_mini = f"{plain / mini:12.1f}x" if mini else f"{'-':>13}"
        print(line + f" {mini if mini else float('nan'):23.1f} {vs_mini}", flush=True)
    print(
        f"harness: the median of {args.repeats} runs per mode; its attempts include grading in a fresh "
        "container and a durable record; mini-swe-agent's do not. Batch grading B: up to B attempts of one "
        "image take turns in one fresh grading container (run_eval batch_grading / harness eval "
        "--batch-grading)."
    )


if __name__ == "__main__":
    main()
