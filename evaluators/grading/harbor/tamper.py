"""Ours, stricter than Harbor: a Harbor attempt whose changes alter what its verifier loads (the model of
evaluators/grading/loads.py, over the pristine image) scores 0 as `tamper`, unless a package manager, the
image's own bytes or its interpreter account for each change."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
from typing import Optional

import docker.errors

from agent.sandbox import Changes, SandboxDied
from agent.sandbox.backends.docker.native import FileOpError, NativeSandbox
from evaluators.grading.harbor.environment import verifier_image
from evaluators.grading.harbor.runtime import kept_files, verifier_limits
from tasks.tamper import dpkg_sums


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
