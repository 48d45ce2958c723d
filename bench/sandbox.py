"""Sandbox latency, side by side with plain `docker` CLI calls measured in the same run.

    .venv/bin/python bench/sandbox.py [--n 40] [--smoke]

Prints p50/p95 of: warm-pool acquire, cold start, exec round trip of `true`, and containers
created+destroyed per second; each beside the CLI equivalent, as a ratio (CLI / harness). The argv exec
is measured on one sandbox both with the pool idle and while it refills (a warm container being created
and one removed, as after every acquire and release of a run), in alternating blocks, and the two are
printed side by side with their ratio (refilling / idle).
Then the exec round trip in a Python-less image (Debian minbase, served by the static helper of
agent/sandbox/backends/docker/native.py) beside today's Python server in the base image, measured
interleaved in one run: the target is a ratio within 2x. --smoke: a few iterations only (seconds), for
tests/tasks/test_harbor.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.sandbox import SandboxPool, SandboxSpec
from agent.sandbox.backends.docker.images import ensure_base_image
from agent.sandbox.backends.docker.pool import DockerPool
from agent.sandbox.backends.docker.sandbox import create_sandbox


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def timed(fn, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def docker(*args) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def pool_busy(pool: SandboxPool) -> bool:
    """Whether the pool has engine work in flight (a warm container being created, one being removed)."""
    return bool(pool._tasks)


async def quiesce(pool: SandboxPool):
    for _ in range(3000):  # a refill is a create+start: seconds at most, even on a loaded machine
        if not pool_busy(pool):
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the pool's refill did not finish in 30 s")


async def exec_idle_vs_refilling(pool: SandboxPool, sb, image: str, limits: SandboxSpec, rounds: int) -> dict:
    """exec `true` (argv) round trips on one sandbox, in alternating blocks: while the pool refills (another
    sandbox taken and released, so a warm container is being created and one removed, as after each
    acquire and release of a run), then as many with nothing in flight. Interleaved round by round, so the
    machine's load (other processes) falls on both alike."""
    res: dict = {"idle": [], "refilling": []}
    for _ in range(rounds):
        await quiesce(pool)
        other = await pool.acquire(image, limits)  # the warm one: its replacement is created now
        await pool.release(other)  # and this one is removed
        block = 0
        while pool_busy(pool) and block < 5000:
            t = time.perf_counter()
            await sb.exec(["true"], 10)
            dt = time.perf_counter() - t
            if pool_busy(pool):  # still refilling when it answered: the whole round trip overlapped
                res["refilling"].append(dt)
                block += 1
        await quiesce(pool)
        for _ in range(block):
            t = time.perf_counter()
            await sb.exec(["true"], 10)
            res["idle"].append(time.perf_counter() - t)
    if not res["refilling"]:
        raise RuntimeError("no exec overlapped a refill: the pool refilled before the first reply")
    return res


async def harness_side(image: str, n: int) -> dict:
    res = {}
    limits = SandboxSpec()
    async with DockerPool(run_id="bench", warm=1, max_containers=4) as pool:
        acquires = []
        for _ in range(n // 2):
            for _ in range(200):  # let the pool refill: we time the warm path
                if pool._ready.get((image, limits)):
                    break
                await asyncio.sleep(0.02)
            t = time.perf_counter()
            sb = await pool.acquire(image, limits)
            acquires.append(time.perf_counter() - t)
            await pool.release(sb)
        res["acquire"] = acquires
        sb = await pool.acquire(image, limits)
        both = await exec_idle_vs_refilling(pool, sb, image, limits, rounds=max(2, n // 2))
        res["exec_argv_idle"], res["exec_argv_refilling"] = both["idle"], both["refilling"]
        await quiesce(pool)
        xs = []
        for _ in range(n * 5):
            t = time.perf_counter()
            await sb.exec("true", 10)
            xs.append(time.perf_counter() - t)
        res["exec_shell"] = xs
        await pool.release(sb)
    cold, cycle = [], []
    for _ in range(n // 4):
        t = time.perf_counter()
        sb = await asyncio.to_thread(create_sandbox, image, limits, "bench")
        cold.append(time.perf_counter() - t)
        await asyncio.to_thread(sb.kill)
        cycle.append(time.perf_counter() - t)
    res["cold"], res["cycle"] = cold, cycle
    return res


def create_destroy_rate(image: str, n: int = 8) -> float:
    """Containers created, started (command server answering) and destroyed per second, one after another
    (the median cycle): the engine's churn that bounds graded attempts on one machine (bench/loop.py)."""
    cycle = []
    for _ in range(max(1, n)):
        t = time.perf_counter()
        sb = create_sandbox(image, SandboxSpec(), "bench")
        sb.kill()
        cycle.append(time.perf_counter() - t)
    return 1 / statistics.median(cycle)


def cli_side(image: str, n: int) -> dict:
    res = {}
    label = ["--label", "harness.run=bench", "--label", f"harness.pid={os.getpid()}"]
    cid = docker("run", "-d", "--network", "none", *label, image, "sleep", "infinity")
    try:
        res["exec"] = timed(lambda: docker("exec", cid, "true"), n * 2)
    finally:
        docker("rm", "-f", cid)
    cold, cycle = [], []
    for _ in range(n // 4):
        t = time.perf_counter()
        c = docker("run", "-d", "--network", "none", *label, image, "sleep", "infinity")
        cold.append(time.perf_counter() - t)
        docker("rm", "-f", c)
        cycle.append(time.perf_counter() - t)
    res["cold"], res["cycle"] = cold, cycle
    return res


async def python_less_side(image: str, minbase: str, n: int) -> dict:
    """exec `true` round trips: the Python server (base image) and the static helper (no Python),
    interleaved."""
    from agent.sandbox import NativeSpec

    native = SandboxSpec(native=NativeSpec(user="nobody"))
    res: dict = {"python": [], "native": []}
    async with DockerPool(run_id="bench", warm=0, max_containers=4) as pool:
        async with pool.sandbox(image, SandboxSpec()) as py, pool.sandbox(minbase, native) as nat:
            probe = await nat.exec("command -v python3 || echo none", 10)
            assert probe.stdout.strip() == "none", "the minbase image has a python3"
            for _ in range(n * 5):
                for key, sb in (("python", py), ("native", nat)):
                    t = time.perf_counter()
                    await sb.exec(["true"], 10)
                    res[key].append(time.perf_counter() - t)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--smoke", action="store_true", help="a few iterations only")
    args = ap.parse_args()
    n = 4 if args.smoke else args.n
    image = ensure_base_image(log=lambda m: None)
    from agent.sandbox.backends.docker.images import ensure_minbase_image

    minbase = ensure_minbase_image(log=lambda m: print(m, file=sys.stderr))
    nat = asyncio.run(python_less_side(image, minbase, n))
    ratio = pct(nat["native"], 0.5) / pct(nat["python"], 0.5)
    print(
        f"exec `true` in a Python-less image (static helper): p50 {pct(nat['native'], 0.5):.2f}ms, "
        f"p95 {pct(nat['native'], 0.95):.2f}ms; "
        f"Python server in the base image: p50 {pct(nat['python'], 0.5):.2f}ms, "
        f"p95 {pct(nat['python'], 0.95):.2f}ms; ratio {ratio:.2f}x "
        f"(target <= 2x: {'yes' if ratio <= 2 else 'NO'})"
    )
    ours = asyncio.run(harness_side(image, n))
    cli = cli_side(image, n)
    idle, busy = ours["exec_argv_idle"], ours["exec_argv_refilling"]
    rows = [
        ("acquire (warm pool) vs docker run -d", ours["acquire"], cli["cold"]),
        ("cold start vs docker run -d", ours["cold"], cli["cold"]),
        ("exec `true` (argv, pool idle) vs docker exec", idle, cli["exec"]),
        ("exec `true` (argv, pool refilling) vs docker exec", busy, cli["exec"]),
        ("exec `true` (bash -c, pool idle) vs docker exec", ours["exec_shell"], cli["exec"]),
        ("create+destroy cycle vs run -d + rm -f", ours["cycle"], cli["cycle"]),
    ]
    print(f"{'measure':<50} {'harness p50':>11} {'p95':>8} {'CLI p50':>9} {'p95':>8} {'ratio':>7}")
    for name, a, b in rows:
        print(
            f"{name:<50} {pct(a, 0.5):9.2f}ms {pct(a, 0.95):6.1f}ms "
            f"{pct(b, 0.5):7.1f}ms {pct(b, 0.95):6.1f}ms "
            f"{pct(b, 0.5) / pct(a, 0.5):6.1f}x"
        )
    print(
        f"exec `true` (argv), one sandbox, interleaved: pool idle p50 {pct(idle, 0.5):.2f}ms "
        f"p95 {pct(idle, 0.95):.2f}ms ({len(idle)} calls); pool refilling p50 {pct(busy, 0.5):.2f}ms "
        f"p95 {pct(busy, 0.95):.2f}ms ({len(busy)} calls); refilling / idle: "
        f"p50 {pct(busy, 0.5) / pct(idle, 0.5):.2f}x, p95 {pct(busy, 0.95) / pct(idle, 0.95):.2f}x"
    )
    print(
        f"containers created+destroyed per second: harness {1 / statistics.median(ours['cycle']):.2f}, "
        f"CLI {1 / statistics.median(cli['cycle']):.2f}"
    )


if __name__ == "__main__":
    main()
