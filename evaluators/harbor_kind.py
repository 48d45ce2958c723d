"""Harbor tasks: their runtime contract and their verifier (tests/test.sh writing /logs/verifier/reward.*).

The agent works in the image's WORKDIR as the task's user, on a writable root filesystem
(agent/sandbox/native.py). When it is done, tests/test.sh runs with the hidden tests at /tests, as the
verifier's user, with [verifier] env, in one of three isolation modes ([verifier] isolation, or Harbor's
environment_mode):

  fresh     a new container of the task's image (or the verifier's own environment) plus the captured
            changes of the working folder. Changes outside it are lost. Harbor's `separate`; the default
            for our own tasks.
  snapshot  a new container from a `docker commit` of the agent's container: every filesystem change is kept,
            no agent process survives. The default for Harbor tasks here.
  shared    the agent's own container, after every process in it was killed. Harbor's own default.

In every mode the hidden tests enter a container only after the agent has finished, and /tests and
/logs/verifier are emptied and recreated (root-owned; /logs/verifier writable by the verifier's user only)
just before test.sh runs, so no reward file the agent planted survives. Remaining limits (Harbor's
contract, documented in README): in snapshot and shared modes test.sh runs on the filesystem the agent
(root by default) left, so an agent that replaces system programs (bash, python, curl) can change what the
verifier does; `fresh` avoids that.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Optional

import docker.errors

from agent.sandbox import Changes, Limits, SandboxPool
from agent.sandbox.native import NativeSandbox, NativeSpec, commit, create_native, remove_image
from results.errors import InfraError, OracleFailed

REWARD_DIR = "/logs/verifier"
MAX_REWARD_BYTES = 1 << 20


def limits(task, network: Optional[bool] = None) -> Limits:
    """The sandbox of a Harbor task: our resource limits, Harbor's working folder, users and writable root."""
    spec = task.harbor
    base = Limits.for_task(task.environment)
    return Limits(
        memory_mb=base.memory_mb,
        cpus=base.cpus,
        pids=base.pids,
        workspace_mb=base.workspace_mb,
        network=base.network if network is None else network,
        read_only=False,
        native=NativeSpec(workdir=spec.workdir, user=spec.agent_user, env=spec.env, keep_processes=True),
    )


def verifier_limits(task) -> Limits:
    spec = task.harbor
    return limits(task, network=spec.verifier_network)


# ----------------------------------------------------------------------------------------- before the agent


async def prepare(task, sb: NativeSandbox):
    """/logs/agent for the agent's logs; then the environment's healthcheck, as Docker runs one."""
    await _root(sb, "mkdir -p /logs/agent && chmod 0777 /logs/agent")
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
    """Harbor's oracle: the solution folder at /solution, solve.sh run in the working folder as the agent's
    user."""

    await _root(sb, "rm -rf /solution && mkdir -p /solution")
    await sb.put_files(
        task.solution_files, dest="/solution", user="root", executable=_scripts(task.solution_files)
    )
    env = {"DEBIAN_FRONTEND": "noninteractive", **dict(task.harbor.solution_env)}  # as Harbor's oracle agent
    shell = "bash" if await _has_bash(sb) else "sh"
    r = await sb.exec([shell, "/solution/solve.sh"], timeout=task.agent.timeout_sec, env=env)
    if r.exit_code != 0:
        raise OracleFailed(f"solve.sh exited {r.exit_code}: {r.output[-300:]}")


# ---------------------------------------------------------------------------------------------- verification


async def verify_in_place(task, sb: NativeSandbox, pool: SandboxPool):
    """snapshot and shared modes, while the agent's container still exists. Returns a grade.Verdict."""
    from evaluators.grade import Verdict

    t0 = time.monotonic()
    mode = task.harbor.verifier_mode
    if mode == "shared" and not sb.dead:
        await sb.kill_all()
        v = await run_verifier(task, sb)
    else:  # snapshot (or shared after the agent ended its own container: its filesystem is all that is left)
        if not sb.dead:
            await sb.kill_all()
        try:
            image = await asyncio.to_thread(commit, sb, pool.run_id, pool.pool_id)
        except docker.errors.NotFound:  # removed: its server stopped answering (a root agent can stop it)
            return Verdict(
                0.0,
                False,
                "no_report",
                detail="the agent's container was gone before verification "
                "(its command server stopped answering)",
            )
        try:
            vb = await asyncio.to_thread(
                create_native, image, verifier_limits(task), pool.run_id, task.id, pool.pool_id
            )
            vb.image_user = sb.image_user  # the commit's USER is the container's 0:0, not the image's
            try:
                v = await run_verifier(task, vb)
            finally:
                await asyncio.to_thread(vb.kill)
        finally:
            await asyncio.to_thread(remove_image, image)
    v.seconds = time.monotonic() - t0
    return v


async def grade_fresh(task, changes: Changes, pool: SandboxPool, image: str):
    """fresh mode: a new container of the verifier's image with the working folder's captured changes."""
    from agent.sandbox.images import harbor_verifier_image

    vimage = await asyncio.to_thread(harbor_verifier_image, task) or image
    async with pool.sandbox(vimage, verifier_limits(task), task=task.id) as sb:
        files = {p: d for p, d in task.workspace_files.items() if p not in changes.deleted}
        files.update(changes.files)
        await sb.put_files(
            files, executable=(set(task.executable_files) - set(changes.files)) | changes.executable
        )
        if changes.deleted:
            await sb.exec(["rm", "-f", "--", *changes.deleted], timeout=60, user="root")
        return await run_verifier(task, sb)


async def run_verifier(task, sb: NativeSandbox):
    """Empties /tests and /logs/verifier, copies the hidden tests in, runs test.sh, reads the reward."""
    from evaluators.grade import Verdict

    spec = task.harbor
    user = spec.verifier_user or sb.image_user
    owner = "" if user in ("root", "0", "0:0") else f" && chown {user} {REWARD_DIR}"
    await _root(
        sb,
        f"rm -rf /tests {REWARD_DIR} && mkdir -p /tests {REWARD_DIR} /logs/agent "
        f"&& chmod 0755 /tests && chmod 0700 {REWARD_DIR}{owner}",
    )
    await sb.put_files(task.test_files, dest="/tests", user="root", executable=_scripts(task.test_files))
    env = dict(spec.verifier_env)  # on top of the container's environment, as docker exec -e
    timeout = task.verifier_timeout_sec
    run = await sb.exec(
        ["bash", "/tests/test.sh"] if await _has_bash(sb) else ["sh", "/tests/test.sh"],
        timeout=timeout,
        user=user,
        env=env,
        cap=16 << 10,
    )
    tail = run.output[-400:]
    if run.timed_out:
        return Verdict(0.0, False, "timeout", detail=f"test.sh ran out of time ({timeout:.0f}s)")
    files = await _reward_files(sb)
    return verdict(files.get("reward.txt"), files.get("reward.json"), tail)


def verdict(reward_txt: Optional[bytes], reward_json: Optional[bytes], tail: str = ""):
    """The verdict from Harbor's reward files: reward.json (named numbers) wins over reward.txt (one
    number), as in Harbor's verifier.
    Every named reward is recorded in the detail; the task's reward is "reward" when present, else the only
    value, else the mean of them all. Solved means a task reward of at least 1."""
    from evaluators.grade import Verdict

    rewards: dict[str, float] = {}
    if reward_json is not None:
        try:
            data = json.loads(reward_json)
        except ValueError:
            return Verdict(0.0, False, "no_report", detail="reward.json is not JSON")
        data = data if isinstance(data, dict) else {"reward": data}
        if not data or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in data.values()
        ):
            return Verdict(0.0, False, "no_report", detail="reward.json must map names to numbers")
        rewards = {str(k): float(v) for k, v in data.items()}
    elif reward_txt is not None:
        try:
            value = float(reward_txt.decode().strip())
        except (ValueError, UnicodeDecodeError):
            return Verdict(0.0, False, "no_report", detail=f"reward.txt is not a number: {reward_txt[:40]!r}")
        rewards = {"reward": value}
    else:
        return Verdict(
            0.0,
            False,
            "no_report",
            detail=f"test.sh wrote neither {REWARD_DIR}/reward.txt nor reward.json; output: {tail}",
        )
    if not all(math.isfinite(v) for v in rewards.values()):
        return Verdict(0.0, False, "no_report", detail=f"non-finite reward in {rewards}")
    key = "reward" if "reward" in rewards else (next(iter(rewards)) if len(rewards) == 1 else None)
    value = rewards[key] if key else sum(rewards.values()) / len(rewards)
    reward = min(max(value, 0.0), 1.0)
    which = f"task reward = {key!r}" if key else "task reward = mean of all"
    detail = f"rewards {json.dumps(rewards, sort_keys=True)}; {which}"
    return Verdict(reward, reward >= 1.0, "pass" if reward >= 1.0 else "fail", detail=detail)


async def _reward_files(sb: NativeSandbox) -> dict[str, bytes]:
    present = await sb.exec(["ls", "-A", REWARD_DIR], timeout=30, user="root")
    names = [n for n in ("reward.txt", "reward.json") if n in present.stdout.split()]
    if not names:
        return {}
    try:
        return await sb.get_files(names, root=REWARD_DIR, max_bytes=MAX_REWARD_BYTES)
    except InfraError:
        return {}


def _scripts(files: dict[str, bytes]) -> list[str]:
    """Which files get the executable bit (task folders are read as bytes, without modes): scripts by name or
    by a #! line, as they would be in a checkout."""
    return [p for p, d in files.items() if p.endswith(".sh") or d.startswith(b"#!")]


async def _has_bash(sb: NativeSandbox) -> bool:
    r = await sb.exec(["sh", "-c", "command -v bash"], timeout=30, user="root")
    return r.exit_code == 0


async def _root(sb: NativeSandbox, script: str):
    r = await sb.exec(["sh", "-c", script], timeout=60, user="root", cwd="/")
    if r.exit_code != 0:
        raise InfraError(f"preparing the Harbor sandbox failed ({script[:60]}...): {r.output[-300:]}")
