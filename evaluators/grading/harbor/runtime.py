"""A Harbor task's agent sandbox under Harbor's runtime contract (the package docstring): its limits, its
/logs folders and healthcheck, its oracle, reviving a sandbox whose command server the agent killed, the
artifacts collected after the agent, the capture of its changes, and running the task's scripts as Harbor
does."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Optional

import docker.errors

from agent.sandbox import Changes, ExecResult, NativeSpec, SandboxDied, SandboxSpec
from agent.sandbox.backends.docker.native import HELPER_IN_CONTAINER, FileOpError, NativeSandbox
from results.errors import InfraError, OracleFailed

REWARD_DIR = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"
OUTPUT_CAP = (
    1 << 20
)  # of a script's output (stdout and stderr together), head and tail, kept in the run folder
UNTRACED = b'{"e":"untraced"}\n{"e":"end"}\n'  # what the tracer says where it cannot trace (trace.c)
TRACE_CAP = 128 << 20  # of a traced run's streams: the tracer writes at most 64 MiB of trace (trace.c)
KEEP_FILES, KEEP_FILE_BYTES, KEEP_BYTES = 200, 1 << 20, 8 << 20  # what one attempt keeps of each folder


def limits(task, network: Optional[bool] = None) -> SandboxSpec:
    """The sandbox of a Harbor task: our resource limits, Harbor's working folder, users and writable root;
    processes the agent starts live on between its commands (Harbor: one persistent shell session)."""
    spec = task.harbor
    base = SandboxSpec.for_task(task.environment)
    return SandboxSpec(
        memory_mb=base.memory_mb,
        cpus=base.cpus,
        pids=base.pids,
        workspace_mb=base.workspace_mb,
        network=base.network if network is None else network,
        read_only=False,
        native=NativeSpec(workdir=spec.workdir, user=spec.agent_user, env=spec.env, keep_processes=True),
    )


def verifier_limits(task) -> SandboxSpec:
    spec = task.harbor
    return limits(task, network=spec.verifier_network)


# ----------------------------------------------------------------------------------------- before the agent


async def prepare(task, sb: NativeSandbox):
    """/logs/agent, /logs/verifier and /logs/artifacts, as Harbor mounts them (0777); then the environment's
    healthcheck, as Docker runs one."""
    await sb.mkdirs("/logs/agent", REWARD_DIR, ARTIFACTS_DIR, mode=0o777)
    hc = task.harbor.healthcheck
    if hc is None:
        return
    started = time.monotonic()
    failures, last = 0, ""
    while True:
        r = await sb.exec(["sh", "-c", hc.command], timeout=hc.timeout_sec)
        if r.exit_code == 0 and not r.timed_out:
            return
        last = r.output[-200:]
        in_start_period = time.monotonic() - started < hc.start_period_sec
        if not in_start_period:
            failures += 1
            if failures >= hc.retries:
                raise InfraError(f"[environment.healthcheck] never passed ({hc.retries} tries): {last}")
        await asyncio.sleep(hc.start_interval_sec if in_start_period else hc.interval_sec)


async def oracle(task, sb: NativeSandbox):
    """Harbor's oracle agent: the solution folder at /solution, solve.sh run in the working folder as the
    agent's user, with DEBIAN_FRONTEND=noninteractive and [solution.env] on top. Its output is kept as
    agent/oracle.txt (Harbor's /logs/agent/oracle.txt)."""
    await sb.mkdirs("/solution", fresh=True)
    await sb.put_files(
        task.solution_files, dest="/solution", user="root", executable=scripts(task.solution_files)
    )
    env = {"DEBIAN_FRONTEND": "noninteractive", **dict(task.harbor.solution_env)}
    r, output = await run_script(sb, "/solution/solve.sh", task.agent.timeout_sec, env=env, user="agent")
    kept_files(sb)["agent/oracle.txt"] = output
    if r.exit_code != 0:
        raise OracleFailed(f"solve.sh exited {r.exit_code}: {output[-300:].decode('utf-8', 'replace')}")


def kept_files(sb) -> dict[str, bytes]:
    """Files an attempt keeps from its agent's sandbox (the oracle's output, artifacts)."""
    if not hasattr(sb, "kept_files"):
        sb.kept_files = {}
    return sb.kept_files


# ------------------------------------------------------------------------------------------- after the agent


KILLED = "helper killed by the agent"  # the command server died or stopped answering (the agent is root)


async def revive(sb: NativeSandbox) -> bool:
    """A sandbox whose command server the agent killed or stopped goes on from its filesystem in a new
    container (NativeSandbox.revive), as README "Harbor tasks" promises; False when nothing is left to go on
    from (the container is gone). The engine failing stays an infrastructure error."""
    if not sb.dead:
        return True
    try:
        await asyncio.to_thread(sb.revive)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as e:
        raise InfraError(f"could not go on from the agent's container: {e}") from None
    return True


async def after_agent(task, sb: NativeSandbox, end: bool = True) -> dict[str, bytes]:
    """When the agent is done, in its own container: its processes end (except in shared mode, where Harbor
    keeps them for the verifier), and /logs/artifacts plus the task's declared artifacts are collected, as
    Harbor collects them before verifying. Returns the files the attempt keeps. A command server the agent
    killed or stopped is revived first (revive)."""
    files = kept_files(sb)
    if not await revive(sb):
        return files
    try:
        if task.harbor.verifier_mode != "shared" and end:
            try:
                await sb.kill_all()
            except SandboxDied:  # a process of the agent's killed or stopped the server meanwhile
                if not await revive(sb):
                    raise
        budget = [KEEP_BYTES]
        for source in (ARTIFACTS_DIR, *task.harbor.artifacts):
            path = source if source.startswith("/") else f"{sb.workdir.rstrip('/')}/{source}"
            files.update(await collect(sb, path, "artifacts" + path, budget))
    except (SandboxDied, FileOpError) as e:  # the agent's doing (it ended its container, filled the disk)
        files["artifacts/NOT-COLLECTED.txt"] = f"artifacts could not be collected: {e}\n".encode()
    return files


async def capture(sb: NativeSandbox) -> Changes:
    """The working folder's changes. A process the agent left running may end the container meanwhile:
    then the attempt goes on without them (verified from the container's filesystem), never an error. A
    command server the agent killed or stopped is revived first (revive), once more if it dies meanwhile."""
    for _ in range(2):
        if not await revive(sb):
            return Changes(rejected=[f"{KILLED}: its container was gone before its changes were captured"])
        try:
            return await sb.changes(links=True)  # Harbor's separate verifier keeps links: so does fresh
        except SandboxDied as e:
            why = e
    return Changes(rejected=[f"the sandbox stopped while its changes were captured: {why}"])


async def run_script(
    sb: NativeSandbox, script: str, timeout: float, env: dict, user: str
) -> tuple[ExecResult, bytes]:
    """Runs a task script as Harbor does (`bash -c "(script) > log 2>&1"`: by its #! line, bash for one
    without), with stdout and stderr together; `sh` where the image has no bash. Returns the result and its
    output (head and tail, bytes)."""
    r, out, _ = await _run(sb, script, timeout, env, user, traced=False)
    return r, out


async def run_traced(
    sb: NativeSandbox, script: str, timeout: float, env: dict, user: str
) -> tuple[ExecResult, bytes, bytes]:
    """run_script under the static helper's tracer (agent/sandbox/trace.c): also returns the trace of what
    the script's whole process tree executed, opened and looked up (JSON lines, read by traced.Trace)."""
    return await _run(sb, script, timeout, env, user, traced=True)


async def _run(sb, script, timeout, env, user, traced: bool) -> tuple[ExecResult, bytes, bytes]:
    if traced and os.environ.get("HARNESS_TRACE") == "0":  # off (a comparison, a machine without ptrace)
        r, out, _ = await _run(sb, script, timeout, env, user, traced=False)
        return r, out, UNTRACED
    prefix = [HELPER_IN_CONTAINER, "trace", "--"] if traced else []
    cap = TRACE_CAP if traced else OUTPUT_CAP  # the trace comes back whole; the output is cut here below
    for shell in ("bash", "sh"):
        r = await sb.exec([*prefix, shell, "-c", f"{script} 2>&1"], timeout, cap=cap, user=user, env=env)
        if traced and r.exit_code == 127 and b'"e":"x"' not in r.err.data and shell == "bash":
            continue  # no bash in the image: the tracer said so (exit 127, nothing executed)
        if not (r.spawn_error and r.exit_code == 127 and shell == "bash"):
            break
    head, tail, dropped = r.out.head, r.out.tail, r.out.dropped
    if traced and len(head) + len(tail) > OUTPUT_CAP:  # the same head and tail as an untraced run keeps
        whole = head + tail
        dropped += len(whole) - OUTPUT_CAP
        head, tail = whole[: OUTPUT_CAP // 2], whole[-(OUTPUT_CAP // 2) :]
    cut = f"\n[... {dropped} bytes of output cut here ...]\n".encode() if dropped else b""
    if traced:
        return r, head + cut + tail, r.err.data
    return r, head + cut + tail + r.err.data, b""


async def collect(sb: NativeSandbox, path: str, prefix: str, budget: list[int]) -> dict[str, bytes]:
    """A file or a folder's regular files (no links followed), bounded (KEEP_*), as prefix/relative path."""
    out: dict[str, bytes] = {}
    kind = (await sb.kinds(path))[0]
    if kind == "f":
        entries = {"": ["f", 0]}
    elif kind == "d":
        entries = await sb.list_files(path, max_files=KEEP_FILES)
        if entries is None:
            return {f"{prefix}/NOT-COLLECTED.txt": f"{path} holds more than {KEEP_FILES} files\n".encode()}
    else:
        return out
    for rel, info in sorted(entries.items()):
        if info[0] != "f" or budget[0] <= 0:
            continue
        try:
            data, size, more = await sb.read_file(
                f"{path}/{rel}" if rel else path, min(KEEP_FILE_BYTES, budget[0])
            )
        except FileOpError:
            continue
        if more:
            data += f"\n[... cut at {len(data)} of {size} bytes ...]\n".encode()
        budget[0] -= len(data)
        out[f"{prefix}/{rel}" if rel else prefix] = data
    return out


def scripts(files: dict[str, bytes]) -> list[str]:
    """Which files get the executable bit (task folders are read as bytes, without modes): scripts by name or
    by a #! line, as they would be in a checkout."""
    return [p for p, d in files.items() if p.endswith(".sh") or d.startswith(b"#!")]
