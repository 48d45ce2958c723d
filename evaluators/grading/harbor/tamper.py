"""Ours, stricter than Harbor: a Harbor attempt whose verifier, traced while it graded, loaded what the
agent made in place of what its pristine runs loaded (traced.py's rule, over the task's load map from
loadmap.py) scores 0 as `tamper`, unless a package manager, the image's own bytes or its interpreter account
for each finding."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import types
from typing import Optional

import docker.errors

from agent.sandbox import Changes, SandboxDied
from agent.sandbox.backends.docker.native import FileOpError, NativeSandbox
from evaluators.grading.harbor.runtime import REWARD_DIR, verifier_limits
from evaluators.grading.verdict import Verdict
from tasks.tamper import dpkg_sums

FRESH_BEFORE_THE_VERIFIER = ("/tests/", REWARD_DIR + "/")  # emptied and refilled by run_verifier
Seen = tuple  # (changed: path -> "A"/"C"/"D", contents: path -> bytes, plain: added non-executable files)


def fresh_changes(task, changes: Changes, artifacts, workdir: str) -> Seen:
    """fresh mode: what reaches its verifier, the working folder's captured changes and the collected
    artifacts at their own paths (grade_fresh), as absolute paths."""
    wd = workdir.rstrip("/")
    original = set(task.workspace_files)
    changed = {f"{wd}/{p}": ("C" if p in original else "A") for p in changes.files}
    changed.update({f"{wd}/{p}": "D" for p in changes.deleted})
    contents = {f"{wd}/{p}": d for p, d in changes.files.items()}
    plain = {f"{wd}/{p}" for p in changes.files if p not in changes.executable}
    for name, data in (artifacts or {}).items():
        path = name[len("artifacts") :]
        if name.startswith("artifacts/") and not name.endswith("NOT-COLLECTED.txt"):
            changed.setdefault(path, "A")
            contents.setdefault(path, data)
            plain.add(path)
    return changed, contents, plain


async def attempt_changes(task, sb: NativeSandbox, changes: Changes, original: set[str]) -> Seen | str:
    """snapshot/shared: the working folder's captured changes plus every change the engine sees in the
    agent's container (docker diff), read before test.sh runs (what it installs itself is the verifier's).
    A string when the engine cannot list them (then nothing can be checked: tamper)."""
    wd = sb.workdir.rstrip("/")
    changed = {f"{wd}/{p}": ("C" if p in original else "A") for p in changes.files}
    changed.update({f"{wd}/{p}": "D" for p in changes.deleted})
    contents = {f"{wd}/{p}": d for p, d in changes.files.items()}
    plain = {f"{wd}/{p}" for p in changes.files if p not in changes.executable}
    try:  # the agent's own container, also after a revival (revive)
        diff = await asyncio.to_thread((sb.agent_container or sb.container).diff)
    except docker.errors.NotFound:
        return changed, contents, plain  # the container is gone: snapshot verification will say so
    except docker.errors.APIError as e:  # the engine cannot list what the agent made (paths over PATH_MAX)
        why = str(getattr(e, "explanation", None) or e)
        return (
            "the engine could not list the container's changes, so the verifier's toolchain cannot be "
            f"checked (docker diff: ...{why[-120:]})"
        )
    for d in diff or []:
        changed.setdefault(d.get("Path", ""), "CAD"[d.get("Kind", 0)] if d.get("Kind") in (0, 1, 2) else "C")
    changed.pop("", None)
    # what the harness makes anew before test.sh runs (the hidden tests, the reward folder) is not the agent's
    for p in [p for p in changed if p.startswith(FRESH_BEFORE_THE_VERIFIER) or p in ("/tests", REWARD_DIR)]:
        del changed[p]
    return changed, contents, plain


async def judge(
    task, v, pool, image: str, seen: Seen, original: set[str], sb: Optional[NativeSandbox], workdir: str
):
    """The verifier's verdict `v`, or `tamper` when its traced run (v.trace) loaded what the rule of
    traced.py forbids, compared with the task's pristine load map (loadmap.py); findings that a package
    manager, the image's own bytes or its interpreter account for are cleared (sb: the agent's container,
    for dpkg's and pip's records; None in fresh mode)."""
    from evaluators.grading.harbor import loadmap, traced

    changed, contents, plain = seen
    trace = getattr(v, "trace", None)
    wd = workdir.rstrip("/")
    mine = {p: k for p, k in changed.items() if k != "D"}
    if trace is None or not mine:
        return v  # nothing of the agent's can have been loaded
    if not trace.complete:  # the tracer did not finish: nothing says what the verifier loaded
        if v.reward > 0:
            why = "the verifier's trace was cut off (its tracer was killed or ran out of room)"
            return Verdict(0.0, False, "tamper", detail=f"{why}, so what it loaded cannot be checked")
        return v
    orig = {f"{wd}/{p}" for p in original}
    if trace.untraced:  # no tracer for this machine's architecture: the image's static model decides
        m, rejudge = await _static(task, pool, image, wd, changed, contents, plain, orig)
    else:
        m = await loadmap.get(task, pool, image, wd)
        rejudge = lambda: traced.findings(trace, changed, m, contents, orig)  # noqa: E731
    found = rejudge()
    if found and sb is not None and not sb.dead:
        try:
            found = await _clear(sb, pool, image, task, m.pythons, (changed, contents), found, rejudge)
        except (SandboxDied, FileOpError) as e:  # the agent ended its container meanwhile
            found = [(p, f"{why} (not checked further: {e})", "") for p, why, _ in found]
    elif found:  # fresh: the pristine image's own bytes and bytecode only
        pyc_ok, same_ok = await pristine_checks(pool, image, task, m.pythons, found, contents)
        found = [f for f in found if f[0] not in same_ok and not (f[2] == "pyc" and f[0] in pyc_ok)]
    if not found:
        return v
    path, why, _ = found[0]
    return Verdict(0.0, False, "tamper", detail=why, seconds=v.seconds, output=v.output, files=v.files)


async def _static(task, pool, image, wd, changed, contents, plain, orig):
    """Where the tracer cannot run (an architecture it does not know): the rule over the model of what the
    verifier loads, probed from the pristine image (loads.py, tasks.tamper.loads_findings): (its Python
    interpreters by cache tag, the findings as a function of what is known of the contents)."""
    from evaluators.grading import loads
    from tasks.tamper import loads_findings

    user = task.harbor.verifier_user or "root"
    spec = dataclasses.replace(verifier_limits(task), network=False)
    lm = await loads.model(task, pool, image, user, spec)
    pythons = types.SimpleNamespace(pythons={p.tag: p.exe for p in lm.pythons})
    return pythons, lambda: loads_findings(changed, lm, contents, orig, plain)


async def pristine_checks(pool, image, task, pythons, found, contents) -> tuple[set[str], set[str]]:
    """loads.pristine_checks for the findings: bytecode the image's interpreter makes from its own source,
    and files that hold exactly what the image has there."""
    from evaluators.grading import loads

    pycs = {p: contents[p] for p, _, c in found if c == "pyc" and p in contents}
    same = {p: contents[p] for p, _, _ in found if p in contents}
    spec = dataclasses.replace(verifier_limits(task), network=False)
    interpreters = [loads.Python(exe, tag, [], [], [], {}) for tag, exe in pythons.items()]
    return await loads.pristine_checks(pool, image, spec, task.id, loads.Loads("/", interpreters), pycs, same)


async def _clear(sb, pool, image, task, pythons, seen, found, rejudge) -> list:
    """snapshot/shared: the findings, judged again with the contents only the agent's container has (.pth,
    entry-point and config files), then cleared where dpkg's records, a distribution's RECORD, the pristine
    image's bytes or its interpreter account for them. Returns the findings left."""
    import hashlib

    changed, contents = seen
    for p, _, _ in found:
        if p not in contents and changed.get(p) != "D":
            with contextlib.suppress(FileOpError):
                data, _, more = await sb.read_file(p, 1 << 20)
                if not more:
                    contents[p] = data
    before = {p for p, _, _ in found}
    found = [f for f in rejudge() if f[0] in before]
    if not found:
        return []
    flagged = {p: changed[p] for p, _, _ in found}
    cleared: set[str] = set(await _packaged(sb, [p for p, k in flagged.items() if k != "D"]))
    # a distribution's RECORD (pip's installs and upgrades): its sha256 of each file it installed
    records: dict[str, str] = {}
    for rec in [p for p, k in changed.items() if k != "D" and p.endswith(".dist-info/RECORD")]:
        base = rec.rsplit("/", 2)[0]
        data = contents.get(rec) or (await sb.read_file(rec, 8 << 20))[0]
        for line in data.decode("utf-8", "replace").splitlines():
            rel, _, rest = line.partition(",")
            if rest.startswith("sha256="):
                records[os.path.normpath(f"{base}/{rel}")] = rest[7:].split(",")[0]
    for p in flagged:
        data = contents.get(p)
        if data is None:
            try:  # a link is not a file: nothing clears it
                data, _, more = await sb.read_file(p, 256 << 20)
            except FileOpError:
                continue
            if more:
                continue
            contents[p] = data
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
        if records.get(p) == digest:
            cleared.add(p)
    pyc_ok, same_ok = await pristine_checks(pool, image, task, pythons, found, contents)
    return [
        (p, why, c)
        for p, why, c in found
        if p not in same_ok and not (c and p in cleared) and not (c == "pyc" and p in pyc_ok)
    ]


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
