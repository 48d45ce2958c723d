"""Harbor tasks: their runtime contract and their verifier (tests/test.sh writing /logs/verifier/reward.*).

The agent works in the image's WORKDIR as the task's user, on a writable root filesystem, and what it starts
keeps running between its commands (agent/sandbox/backends/docker/native.py; a backend with the "harbor"
capability, and "diff" for snapshot and shared: sandbox_needs). When it is done, tests/test.sh runs with
the hidden tests at /tests, as the verifier's user, with [verifier] env, in one of three isolation modes
([verifier] isolation, or Harbor's environment_mode):

  shared    the agent's own container, its processes still running (services it started answer the
            tests). Harbor's default, and ours for a task that does not choose.
  snapshot  a new container from a `docker commit` of the agent's container: every filesystem change is
            kept, no agent process survives.
  fresh     a new container of the task's image (or the verifier's own environment) plus the captured
            changes of the working folder and the collected artifacts. Changes elsewhere are lost.
            Harbor's `separate`; the default for our own tasks.

In every mode the hidden tests enter a container only after the agent has finished, and /tests and
/logs/verifier are emptied and recreated (/logs/verifier writable by the verifier's user only) just before
test.sh runs, so no reward file the agent planted survives; every file operation is the static helper's own
(never the container's sh/tar/ls). Stricter than Harbor: an agent change that alters what the verifier
loads (tamper.loads_findings over the model loads.py probes from the pristine image; fresh: the working
folder's changes, snapshot/shared: every change docker diff lists) scores 0 as `tamper`. Remaining limits
(Harbor's contract, README "Harbor tasks"): in shared mode the agent's processes run alongside test.sh and
can change what it sees; in snapshot and shared modes test.sh runs on the filesystem the agent left.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import time
from typing import Optional

import docker.errors

from agent.sandbox import Changes, ExecResult, NativeSpec, SandboxDied, SandboxPool, SandboxSpec
from agent.sandbox.backends.docker import images
from agent.sandbox.backends.docker.native import (
    FileOpError,
    NativeSandbox,
    commit,
    create_native,
    remove_image,
)
from evaluators.grading import verdict as rules
from evaluators.grading.kind import Kind
from evaluators.grading.verdict import Verdict
from results.errors import InfraError, OracleFailed, UserError
from results.schema import clip
from tasks.tamper import dpkg_sums

REWARD_DIR = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"
MAX_REWARD_BYTES = 1 << 20
OUTPUT_CAP = (
    1 << 20
)  # of test.sh's output (stdout and stderr together), head and tail, kept in the run folder
RECORD_OUTPUT_CHARS = 8000  # of that output in the record itself, head and tail
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
        task.solution_files, dest="/solution", user="root", executable=_scripts(task.solution_files)
    )
    env = {"DEBIAN_FRONTEND": "noninteractive", **dict(task.harbor.solution_env)}
    r, output = await _run_script(sb, "/solution/solve.sh", task.agent.timeout_sec, env=env, user="agent")
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
            files.update(await _collect(sb, path, "artifacts" + path, budget))
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
            return await sb.changes()
        except SandboxDied as e:
            why = e
    return Changes(rejected=[f"the sandbox stopped while its changes were captured: {why}"])


async def check_tamper(
    task, sb: NativeSandbox, changes: Changes, original: set[str], pool=None
) -> Optional[str]:
    """Ours, stricter than Harbor: the agent's changes that alter what the verifier loads
    (tamper.loads_findings over the model loads.py probes from the pristine image). fresh: the working
    folder's captured changes (all that reaches its verifier); snapshot/shared: those plus every change the
    engine sees (docker diff). Findings that a package manager, the image's own bytes or the image's
    interpreter account for are cleared."""
    from evaluators.grading import loads
    from tasks.tamper import loads_findings, loads_reason

    mode = task.harbor.verifier_mode
    user = task.harbor.verifier_user or sb.image_user
    spec = dataclasses.replace(verifier_limits(task), network=False)
    image = (await asyncio.to_thread(verifier_image, task) if mode == "fresh" else None) or sb.image
    m = await loads.model(task, pool, image, user, spec)
    wd = m.workdir.rstrip("/")
    orig = {f"{wd}/{p}" for p in original}
    changed = {f"{wd}/{p}": ("C" if p in original else "A") for p in changes.files}
    changed.update({f"{wd}/{p}": "D" for p in changes.deleted})
    contents = {f"{wd}/{p}": d for p, d in changes.files.items()}
    plain = {f"{wd}/{p}" for p in changes.files if p not in changes.executable}
    if mode == "fresh":  # the collected artifacts reach its verifier too, at their own paths (grade_fresh)
        for name, data in kept_files(sb).items():
            path = name[len("artifacts") :]
            if name.startswith("artifacts/") and not name.endswith("NOT-COLLECTED.txt"):
                changed.setdefault(path, "A")
                contents.setdefault(path, data)
                plain.add(path)
        return loads_reason(loads_findings(changed, m, contents, orig, plain)) or None
    try:  # the agent's own container, also after a revival (revive)
        diff = await asyncio.to_thread((sb.agent_container or sb.container).diff)
    except docker.errors.NotFound:
        return None  # the container is gone: snapshot verification will say so
    except docker.errors.APIError as e:  # the engine cannot list what the agent made (paths over PATH_MAX)
        why = str(getattr(e, "explanation", None) or e)
        return (
            "the engine could not list the container's changes, so the verifier's toolchain cannot be "
            f"checked (docker diff: ...{why[-120:]})"
        )
    for d in diff or []:
        changed.setdefault(d.get("Path", ""), "CAD"[d.get("Kind", 0)] if d.get("Kind") in (0, 1, 2) else "C")
    changed.pop("", None)
    findings = loads_findings(changed, m, contents, orig, plain)
    if not findings or sb.dead:
        return loads_reason(findings) or None
    try:
        return await _clear(task, sb, pool, image, spec, m, changed, contents, orig, plain, findings) or None
    except (SandboxDied, FileOpError) as e:  # the agent ended its container meanwhile: nothing can clear
        return loads_reason(findings) + f" (not checked further: {e})"


async def _clear(task, sb, pool, image, spec, m, changed, contents, orig, plain, findings) -> str:
    """snapshot/shared: the findings, judged again with what only the agent's container can tell (folders
    are not files, .pth/entry-point/config contents, which added files are executable), then cleared where
    dpkg's records, a distribution's RECORD, the pristine image's bytes or its interpreter account for
    them."""
    import hashlib

    from evaluators.grading import loads
    from tasks.tamper import loads_findings, loads_reason

    paths = [p for p, _, _ in findings if changed[p] != "D"]
    for p, k in zip(paths, await sb.kinds(*paths) if paths else []):
        if k == "d":
            changed.pop(p)
        elif k == "f" and p not in contents:
            data, _, more = await sb.read_file(p, 1 << 20)
            if not more:
                contents[p] = data
    for folder in {p.rpartition("/")[0] for p in paths if changed.get(p) == "A"} & set(m.path_dirs):
        listing = await sb.list_files(folder, max_files=20000) or {}
        plain |= {f"{folder}/{n}" for n, info in listing.items() if info[0] == "f" and not info[3]}
    findings = loads_findings(changed, m, contents, orig, plain)
    flagged = {p: changed[p] for p, _, _ in findings}
    cleared: dict[str, set[str]] = {
        "dpkg": set(await _packaged(sb, [p for p, k in flagged.items() if k != "D"]))
    }
    # a distribution's RECORD (pip's installs and upgrades): its sha256 of each file it installed
    records: dict[str, str] = {}
    for rec in [p for p, k in changed.items() if k != "D" and p.endswith(".dist-info/RECORD")]:
        base = rec.rsplit("/", 2)[0]
        data = contents.get(rec) or (await sb.read_file(rec, 8 << 20))[0]
        for line in data.decode("utf-8", "replace").splitlines():
            rel, _, rest = line.partition(",")
            if rest.startswith("sha256="):
                records[os.path.normpath(f"{base}/{rel}")] = rest[7:].split(",")[0]
    # a deletion in a folder where a distribution was installed, upgraded or removed (pip -U drops old files)
    upgraded = {p.rsplit("/", 1)[0] for p in changed if p.endswith(".dist-info")}
    cleared["installer"] = {
        p for p, k in flagged.items() if k == "D" and any(p.startswith(u + "/") for u in upgraded)
    }
    pycs, same = {}, {}
    for p, k in flagged.items():
        if k == "D":
            continue
        data = contents.get(p)
        if data is None:
            try:  # a link is not a file: nothing clears it
                data, _, more = await sb.read_file(p, 256 << 20)
            except FileOpError:
                continue
            if more:
                continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
        if records.get(p) == digest:
            cleared["installer"].add(p)
        if p.endswith(".pyc"):
            pycs[p] = data
        if k == "C":
            same[p] = data
    cleared["pyc"], cleared["same"] = await loads.pristine_checks(pool, image, spec, task.id, m, pycs, same)
    return loads_reason(findings, cleared)


async def _packaged(sb: NativeSandbox, changed: list[str]) -> frozenset[str]:
    """Which of these files hold what dpkg recorded for them (an upgrade or install by the package manager,
    e.g. libc6 or python3.12 pulled in by apt-get install): read by the helper, md5 compared on the host."""
    import hashlib

    if not changed or sb.dead:
        return frozenset()
    info = "/var/lib/dpkg/info"
    ok: set[str] = set()
    try:
        links = {
            d
            for d, k in zip(
                ("/bin", "/sbin", "/lib", "/lib64"), await sb.kinds("/bin", "/sbin", "/lib", "/lib64")
            )
            if k == "l"
        }
        listing = await sb.list_files(info, max_files=50000) or {}
        sums = {}
        for name, meta in listing.items():
            if name.endswith(".md5sums") and meta[0] == "f":
                sums[name] = (await sb.read_file(f"{info}/{name}", 4 << 20))[0]
        recorded = dpkg_sums(sums, links)
        # conffiles (/etc/ld.so.conf.d/*.conf, /etc/bash.bashrc) are not in md5sums: dpkg's status has them
        try:
            status = (await sb.read_file("/var/lib/dpkg/status", 64 << 20))[0]
        except FileOpError:
            status = b""
        for line in status.decode("utf-8", "replace").splitlines():
            f = line.split()
            if line.startswith(" /") and len(f) >= 2 and len(f[1]) == 32:
                recorded.setdefault(f[0], f[1])
        for path in changed:
            if path not in recorded:
                continue
            try:  # a link or a file gone is not what dpkg recorded
                data, _, more = await sb.read_file(path, 256 << 20)
            except FileOpError:
                continue
            if not more and hashlib.md5(data).hexdigest() == recorded[path]:
                ok.add(path)
        return frozenset(ok)
    except (SandboxDied, FileOpError):
        return frozenset(ok)


# ------------------------------------------------------------------------------------------ multi-step tasks


def step_task(task, step):
    """The task as one of its steps sees it: the step's instruction, tests, solution and limits."""
    spec = task.harbor
    return dataclasses.replace(
        task,
        instruction=step.instruction,
        test_files=dict(step.test_files),
        solution_files=dict(step.solution_files),
        agent=dataclasses.replace(task.agent, timeout_sec=step.agent_timeout_sec or task.agent.timeout_sec),
        verifier_timeout_sec=step.verifier_timeout_sec or task.verifier_timeout_sec,
        harbor=dataclasses.replace(
            spec,
            steps=(),
            verifier_user=step.verifier_user or spec.verifier_user,
            verifier_env=spec.verifier_env + step.verifier_env,
            artifacts=spec.artifacts + step.artifacts,
        ),
    )


async def run_steps(task, policy, sb: NativeSandbox, pool: SandboxPool, image: str):
    """Harbor's multi-step trial: for each step, its workdir files (and setup.sh), the agent (or oracle) on
    its instruction in the same container, then its verifier; /tests and /logs/verifier are emptied before
    the next step's agent. A step below its min_reward (or tampering) ends the run of steps. The reward is
    the mean of the steps that were verified, or the final one's (multi_step_reward_strategy).
    Returns (verdict, the merged loop result or None, the kept files, the last step's changes)."""
    verdicts, results, kept = [], [], {}
    changes = Changes()
    errors = []
    for i, step in enumerate(task.harbor.steps):
        st, last = step_task(task, step), i == len(task.harbor.steps) - 1
        sb.kept_files = {}
        if step.workdir_files:
            wf = dict(step.workdir_files)
            await sb.put_files(wf, executable=_scripts(wf))
            if "setup.sh" in wf:
                r = await sb.exec(
                    ["bash", f"{sb.workdir.rstrip('/')}/setup.sh"], timeout=st.agent.timeout_sec
                )
                if r.exit_code != 0:
                    errors.append(f"step {step.name}: setup.sh exited {r.exit_code}: {r.output[-200:]}")
                    break
        await sb.mark_baseline()
        try:
            results.append(await policy(st, sb))
        except OracleFailed as e:
            errors.append(f"step {step.name}: {e}")
        files = dict(await after_agent(st, sb, end=last))
        changes = await capture(sb)
        v = await verify_agent(st, sb, pool, changes)
        if v is None:
            v = await grade_fresh(st, changes, pool, image, files)
        kept.update({f"steps/{step.name}/{k}": d for k, d in {**files, **v.files}.items()})
        verdicts.append((step.name, v))
        if sb.dead or v.reason == "tamper" or (step.min_reward is not None and v.reward < step.min_reward):
            break
        if not last:  # the next step's agent must not see this step's tests or results
            await sb.mkdirs("/tests", fresh=True)
            await sb.mkdirs(REWARD_DIR, mode=0o777, fresh=True)
    steps_text = ", ".join(f"{n}={v.reward:g} ({v.reason})" for n, v in verdicts)
    if not verdicts:
        v = Verdict(0.0, False, "no_report", detail="; ".join(errors) or "no step ran")
    elif any(v.reason == "tamper" for _, v in verdicts):
        name, bad = next((n, v) for n, v in verdicts if v.reason == "tamper")
        v = Verdict(0.0, False, "tamper", detail=f"step {name}: {bad.detail}")
    else:
        final = task.harbor.step_reward == "final"
        reward = verdicts[-1][1].reward if final else sum(v.reward for _, v in verdicts) / len(verdicts)
        which = "the final step's" if final else f"mean of {len(verdicts)} verified steps"
        v = Verdict(reward, reward >= 1.0, "pass" if reward >= 1.0 else "fail")
        v.detail = f"steps {steps_text}; task reward = {which}"
    v.output = clip("\n".join(f"== step {n} ==\n{sv.output}" for n, sv in verdicts), RECORD_OUTPUT_CHARS)
    if errors:
        v.detail = "; ".join(errors)[:300] + "; " + v.detail
    done = [r for r in results if r is not None]
    merged = None
    if done:
        steps = [s.model_copy(update={"index": k}) for k, s in enumerate(x for r in done for x in r.steps)]
        merged = dataclasses.replace(done[-1], steps=steps, messages=[m for r in done for m in r.messages])
    return v, merged, kept, changes


# ---------------------------------------------------------------------------------------------- verification


async def verify_agent(task, sb: NativeSandbox, pool: SandboxPool, changes: Changes):
    """After the capture, before the agent's container is released: the tamper checks, then verification in
    snapshot and shared mode. None in fresh mode without tampering (graded after the release)."""
    original = set(sb.capture.baseline or {}) | set(task.workspace_files)
    why = await check_tamper(task, sb, changes, original, pool)
    if why:
        return Verdict(0.0, False, "tamper", detail=why)
    if task.harbor.verifier_mode == "fresh":
        return None
    return await verify_in_place(task, sb, pool)


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


def task_image(task, log=print) -> str:
    """A Harbor task's image: its prebuilt docker_image, else its Dockerfile with environment/ as the build
    context, else (no Dockerfile: our convention) the base image."""
    if task.harbor.docker_image:
        return images.prebuilt_image(task.harbor.docker_image)
    return images.task_image(task.dockerfile, task.build_context, log)


def verifier_image(task, log=print) -> Optional[str]:
    """The image of a separate verifier environment ([verifier.environment] docker_image, or tests/Dockerfile
    with tests/ as its context); None -> the task's own image."""
    spec = task.harbor
    if spec.verifier_docker_image:
        return images.prebuilt_image(spec.verifier_docker_image)
    if spec.verifier_dockerfile:
        context = {p: d for p, d in task.test_files.items() if p != "Dockerfile"}
        return images.task_image(spec.verifier_dockerfile, context, log)
    return None


def offline(tasks: list) -> list:
    """--no-internet: every Harbor task's containers (the agent's and the verifier's) without network."""
    out = []
    for t in tasks:
        if t.harbor is not None and (t.environment.allow_internet or t.harbor.verifier_network):
            t = dataclasses.replace(
                t,
                environment=dataclasses.replace(t.environment, allow_internet=False),
                harbor=dataclasses.replace(
                    t.harbor,
                    verifier_network=False,
                    network_why="--no-internet (was: " + t.harbor.network_why + ")",
                ),
            )
        out.append(t)
    return out


def network_line(tasks: list) -> str:
    """One line for a run: which Harbor tasks have network and why ("" without Harbor tasks)."""
    hb = [t for t in tasks if t.harbor is not None]
    if not hb:
        return ""
    groups: dict[str, list[str]] = {}
    for t in hb:
        on = t.environment.allow_internet or t.harbor.verifier_network
        groups.setdefault(f"{'network' if on else 'no network'}: {t.harbor.network_why}", []).append(t.id)
    parts = []
    for why, ids in sorted(groups.items()):
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        parts.append(f"{len(ids)} ({shown}) {why}")
    return "Harbor tasks: " + "; ".join(parts)


async def grade_fresh(task, changes: Changes, pool: SandboxPool, image: str, artifacts=None):
    """fresh mode: a new container of the verifier's image with the working folder's captured changes and
    the collected artifacts at their own paths (as Harbor's separate verifier gets them)."""
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
        for name, data in (artifacts or {}).items():
            if name.startswith("artifacts/") and not name.endswith("NOT-COLLECTED.txt"):
                await sb.write_file(name[len("artifacts") :], data)
        v = await run_verifier(task, sb)
    v.seconds = time.monotonic() - t0
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
        await sb.put_files(task.test_files, dest="/tests", user="root", executable=_scripts(task.test_files))
    except (FileOpError, SandboxDied) as e:
        return Verdict(
            0.0, False, "no_report", detail=f"the verifier could not be set up in the container: {e}"
        )
    timeout = task.verifier_timeout_sec
    refused = await pids_refused(sb)
    try:
        r, out = await _run_script(sb, "/tests/test.sh", timeout, env=dict(spec.verifier_env), user=user)
    except SandboxDied as e:  # the code under test or a process the agent left ended the container
        if await asyncio.to_thread(sb.death_cause) == "oom":
            return Verdict(0.0, False, "oom", detail="the memory limit was used up while test.sh ran")
        return Verdict(
            0.0, False, "no_report", detail=f"the container stopped while test.sh ran ({e}); nothing was read"
        )
    files = {"verifier/test-stdout.txt": out}
    budget = [KEEP_BYTES]
    try:
        left = await _collect(sb, REWARD_DIR, "verifier", budget)
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


async def _run_script(
    sb: NativeSandbox, script: str, timeout: float, env: dict, user: str
) -> tuple[ExecResult, bytes]:
    """Runs a task script as Harbor does (`bash -c "(script) > log 2>&1"`: by its #! line, bash for one
    without), with stdout and stderr together; `sh` where the image has no bash. Returns the result and its
    output (head and tail, bytes)."""
    for shell in ("bash", "sh"):
        r = await sb.exec([shell, "-c", f"{script} 2>&1"], timeout, cap=OUTPUT_CAP, user=user, env=env)
        if not (r.spawn_error and r.exit_code == 127 and shell == "bash"):
            break
    cut = f"\n[... {r.out.dropped} bytes of output cut here ...]\n".encode() if r.out.dropped else b""
    return r, r.out.head + cut + r.out.tail + r.err.data


async def _collect(sb: NativeSandbox, path: str, prefix: str, budget: list[int]) -> dict[str, bytes]:
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


def verdict(reward_txt: Optional[bytes], reward_json: Optional[bytes], tail: str = ""):
    """The verdict from Harbor's reward files (evaluators/grading/verdict.py, reward_files_verdict)."""
    return rules.reward_files_verdict(reward_txt, reward_json, REWARD_DIR, tail, max_bytes=MAX_REWARD_BYTES)


def _scripts(files: dict[str, bytes]) -> list[str]:
    """Which files get the executable bit (task folders are read as bytes, without modes): scripts by name or
    by a #! line, as they would be in a checkout."""
    return [p for p, d in files.items() if p.endswith(".sh") or d.startswith(b"#!")]


class HarborKind(Kind):
    """Harbor's runtime contract and verifier modes (this module's docstring): the task's own limits, users
    and working folder, its environment prepared and health-checked, its oracle, its steps, the artifacts
    collected after the agent, and verification in place (snapshot, shared) or fresh."""

    name = "harbor"
    in_place = True

    def limits(self, task):
        return limits(task)

    def containers(self, task):
        return 1 + (task.harbor.verifier_mode == "fresh")  # snapshot and shared verify in the agent's own

    async def prepare(self, task, sb):
        await prepare(task, sb)

    async def oracle(self, task, sb):
        await oracle(task, sb)

    def has_steps(self, task):
        return bool(task.harbor.steps)

    async def run_steps(self, task, policy, sb, pool, image):
        return await run_steps(task, policy, sb, pool, image)

    async def after_agent(self, task, sb):
        return await after_agent(task, sb)

    async def capture(self, task, sb):
        return await capture(sb)  # its processes live on: one of them may end the container meanwhile

    async def verify_in_place(self, task, sb, pool, changes):
        return await verify_agent(task, sb, pool, changes)

    async def grade_fresh(self, task, changes, pool, image, kept=None, stations=None):
        return await grade_fresh(task, changes, pool, image, kept)

    def not_regradable(self, task):
        mode = task.harbor.verifier_mode
        return "" if mode == "fresh" else f"verified in the agent's container ({mode})"

    def span(self, task):
        return {"harness.verifier.mode": task.harbor.verifier_mode}

    def image_key(self, task):
        spec = task.harbor
        return repr((spec.docker_image, spec.verifier_docker_image, spec.verifier_dockerfile))

    def build_image(self, task, log):
        image = task_image(task, log)
        verifier_image(task, log)  # built now, found by grading later
        return image

    def own_image(self, task):
        return "a Harbor image"

    def sandbox_needs(self, task):
        needs = {
            "own_images": "has its own image (a Harbor image)",
            "harbor": "runs under Harbor's runtime contract",
        }
        if task.harbor.verifier_mode != "fresh":  # commit (snapshot) and diff (both) of the agent's container
            needs["diff"] = f"is verified in the agent's container ({task.harbor.verifier_mode})"
        return needs

    def offline(self, task):
        return offline([task])[0]

    def network_line(self, tasks):
        return network_line(tasks)

    def no_variant(self, task):
        return "a Harbor-format task (its verifier is not ours to change)"

    def export(self, task):
        raise UserError(
            f"task {task.id}: a harbor task is already in Harbor's format (copy its folder instead)"
        )


KIND = HarborKind()
