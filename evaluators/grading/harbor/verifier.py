"""A Harbor task's verifier: tests/test.sh run in one of the three isolation modes (the package docstring),
in the agent's container (shared), a commit of it (snapshot) or a new one with the captured changes (fresh),
and its verdict from /logs/verifier/reward.txt or reward.json."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Optional

import docker.errors

from agent.sandbox import Changes, SandboxDied, SandboxPool
from agent.sandbox.backends.docker.native import (
    FileOpError,
    NativeSandbox,
    commit,
    create_native,
    remove_image,
)
from evaluators.grading import verdict as rules
from evaluators.grading.harbor.environment import verifier_image
from evaluators.grading.harbor.runtime import (
    ARTIFACTS_DIR,
    KEEP_BYTES,
    KILLED,
    REWARD_DIR,
    collect,
    run_traced,
    scripts,
    verifier_limits,
)
from evaluators.grading.harbor.tamper import attempt_changes, fresh_changes, judge
from evaluators.grading.harbor.traced import Trace
from evaluators.grading.verdict import Verdict
from results.schema import clip

MAX_REWARD_BYTES = 1 << 20
RECORD_OUTPUT_CHARS = 8000  # of test.sh's output in the record itself, head and tail


async def verify_agent(task, sb: NativeSandbox, pool: SandboxPool, changes: Changes):
    """After the capture, before the agent's container is released: the tamper checks, then verification in
    snapshot and shared mode. None in fresh mode without tampering (graded after the release)."""
    if task.harbor.verifier_mode == "fresh":
        return None  # graded after the release (grade_fresh), from the working folder's changes alone
    original = set(sb.capture.baseline or {}) | set(task.workspace_files)
    seen = await attempt_changes(task, sb, changes, original)  # before test.sh changes anything itself
    if isinstance(seen, str):
        return Verdict(0.0, False, "tamper", detail=seen)
    v = await verify_in_place(task, sb, pool)
    return await judge(task, v, pool, sb.image, seen, original, sb, sb.workdir)


async def verify_in_place(task, sb: NativeSandbox, pool: SandboxPool):
    """snapshot and shared modes, while the agent's container still exists. Returns a grade.Verdict."""
    t0 = time.monotonic()
    mode = task.harbor.verifier_mode
    v = None
    if mode == "shared" and not sb.dead:
        try:
            v = await run_verifier(task, sb)
        except SandboxDied:
            pass
        if sb.dead and await asyncio.to_thread(sb.death_cause) == "helper":
            v = None  # a process the agent left running killed the server: verified from the filesystem
        elif sb.dead and v is None:
            v = Verdict(0.0, False, "no_report", detail="the agent's container stopped while test.sh ran")
    if v is None:  # snapshot (or shared after its server was killed: its filesystem is all that is left)
        if not sb.dead:
            with contextlib.suppress(SandboxDied):
                await sb.kill_all()
        try:
            image = await asyncio.to_thread(commit, sb, pool.run_id, pool.pool_id)
        except docker.errors.NotFound:  # removed: nothing is left to verify
            return Verdict(
                0.0, False, "no_report", detail=f"{KILLED}: its container was gone before verification"
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
        if mode == "shared" and sb.dead:
            v.detail = f"{KILLED} while test.sh ran: verified again from its filesystem\n" + v.detail
    v.seconds = time.monotonic() - t0
    return v


async def grade_fresh(task, changes: Changes, pool: SandboxPool, image: str, artifacts=None, judged=True):
    """fresh mode: a new container of the verifier's image with the working folder's captured changes (its
    symlinks too) and the collected artifacts at their own paths (as Harbor's separate verifier gets them)."""
    t0 = time.monotonic()
    vimage = await asyncio.to_thread(verifier_image, task) or image
    async with pool.sandbox(vimage, verifier_limits(task), task=task.id) as sb:
        files = {p: d for p, d in task.workspace_files.items() if p not in changes.deleted}
        files.update(changes.files)
        await sb.put_files(
            files, executable=(set(task.executable_files) - set(changes.files)) | changes.executable
        )
        if changes.deleted:
            await sb.remove(*[f"{sb.workdir.rstrip('/')}/{p}" for p in changes.deleted])
        for p, target in sorted(changes.links.items()):  # last: a link replaces what was at its path
            await sb.symlink(f"{sb.workdir.rstrip('/')}/{p}", target, owner="agent")
        for name, data in (artifacts or {}).items():
            if name.startswith("artifacts/") and not name.endswith("NOT-COLLECTED.txt"):
                await sb.write_file(name[len("artifacts") :], data)
        v = await run_verifier(task, sb)
        wd = sb.workdir
    v.seconds = time.monotonic() - t0
    if judged:
        seen = fresh_changes(task, changes, artifacts, wd)
        v = await judge(task, v, pool, image, seen, set(task.workspace_files), None, wd)
    return v


async def run_verifier(task, sb: NativeSandbox):
    """Empties /tests and /logs/verifier, copies the hidden tests in, runs test.sh, reads the reward; keeps
    its output and what it left in /logs/verifier. Everything here is done by the static helper itself
    (agent/sandbox/helper.c): whatever the agent did to the container's programs and folders, this either
    grades or says why not."""
    spec = task.harbor
    user = spec.verifier_user or sb.image_user
    try:
        await sb.mkdirs("/tests", fresh=True)
        await sb.mkdirs(REWARD_DIR, mode=0o700, owner=user, fresh=True)
        await sb.mkdirs("/logs/agent", ARTIFACTS_DIR, mode=0o777)
        await sb.put_files(task.test_files, dest="/tests", user="root", executable=scripts(task.test_files))
    except (FileOpError, SandboxDied) as e:
        return Verdict(
            0.0, False, "no_report", detail=f"the verifier could not be set up in the container: {e}"
        )
    timeout = task.verifier_timeout_sec
    refused = await pids_refused(sb)
    try:
        env = dict(spec.verifier_env)
        r, out, trace = await run_traced(sb, "/tests/test.sh", timeout, env=env, user=user)
    except SandboxDied as e:  # the code under test or a process the agent left ended the container
        if await asyncio.to_thread(sb.death_cause) == "oom":
            return Verdict(0.0, False, "oom", detail="the memory limit was used up while test.sh ran")
        return Verdict(
            0.0, False, "no_report", detail=f"the container stopped while test.sh ran ({e}); nothing was read"
        )
    files = {"verifier/test-stdout.txt": out}
    budget = [KEEP_BYTES]
    try:
        left = await collect(sb, REWARD_DIR, "verifier", budget)
    except FileOpError:
        left = {}
    files.update(left)
    text = out.decode("utf-8", "replace")
    if r.timed_out:
        note = await pid_limit_note(sb, refused, "the code under test")
        v = Verdict(0.0, False, "timeout", detail=f"test.sh ran out of time ({timeout:.0f}s){note}")
    elif r.spawn_error:
        v = Verdict(0.0, False, "no_report", detail=f"test.sh could not start: {text[-300:]}")
    else:
        v = verdict(left.get("verifier/reward.txt"), left.get("verifier/reward.json"), text[-400:])
    v.files = files
    v.output = clip(text, RECORD_OUTPUT_CHARS)
    v.trace = Trace.parse(trace)  # what test.sh's processes loaded and read: the tamper rule's evidence
    return v


PIDS_EVENTS = ("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events")  # cgroup v2, v1


async def pids_refused(sb: NativeSandbox) -> Optional[int]:
    """How many forks in the container its pid limit refused so far (the pids cgroup's `max` events), or
    None where the kernel does not say. Read by the helper itself: no program of the image, no fork (it
    works at the limit). grade.pids_events is the same count for our own sandboxes."""
    for path in PIDS_EVENTS:
        try:
            data, _, _ = await sb.read_file(path, max_bytes=4096)
        except (FileOpError, SandboxDied):
            continue
        for line in data.decode("ascii", "replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                return int(value)
    return None


async def pid_limit_note(sb: NativeSandbox, before: Optional[int], who: str) -> str:
    """For a command that timed out: "; meanwhile WHO reached the sandbox's limit of N processes (M forks
    refused)" when forks failed while it ran (the usual reason code that forks a lot never ends), else ""."""
    after = await pids_refused(sb) if before is not None else None
    if after is None or after <= before:
        return ""
    return (
        f"; meanwhile {who} reached the sandbox's limit of {sb.limits.pids} processes "
        f"({after - before} forks refused)"
    )


def verdict(reward_txt: Optional[bytes], reward_json: Optional[bytes], tail: str = ""):
    """The verdict from Harbor's reward files (evaluators/grading/verdict.py, reward_files_verdict)."""
    return rules.reward_files_verdict(reward_txt, reward_json, REWARD_DIR, tail, max_bytes=MAX_REWARD_BYTES)
