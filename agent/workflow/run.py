"""run_workflow: the agent works on a copy in a sandbox; --verify runs on what --apply would leave in the
folder (protected paths as the user's originals); the changes come back as a diff."""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
from pathlib import Path
from typing import Callable, Iterable, Optional

from agent.config import DEFAULT_MAX_COPY_MB, LoopConfig
from agent.loop import run_loop
from agent.models import get_model
from agent.sandbox import DEFAULT, Changes, SandboxSpec, sandbox_backend
from agent.workflow.apply import plan_changes
from agent.workflow.paths import CI_GLOBS, _read_original
from agent.workflow.protect import default_protect, test_machinery
from agent.workflow.result import WorkflowChanges, WorkflowResult
from agent.workflow.selection import Selection, _batches, select_files
from results.schema import Step

MAX_CHANGE_BYTES = 64 << 20  # what run_workflow captures of the agent's changes


async def run_workflow(
    model: str,
    workspace: Path,
    instruction: str,
    *,
    verify: list[str] = (),
    cfg: Optional[LoopConfig] = None,
    limits: SandboxSpec = SandboxSpec(),
    image: Optional[str] = None,
    model_options: Optional[dict] = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    secret: Iterable[str] = (),
    protect: Optional[Iterable[str]] = None,
    allow_hooks: bool = False,
    max_copy_mb: int = DEFAULT_MAX_COPY_MB,
    selection: Optional[Selection] = None,
    sandbox: str = DEFAULT,
    sandbox_options: Optional[dict] = None,
    on_step: Optional[Callable[[Step], None]] = None,
) -> WorkflowResult:
    """Copies the selected files of `workspace` (select_files) into a sandbox and runs the agent loop there;
    then runs the verification commands in a fresh sandbox holding exactly what --apply would leave in the
    folder (the user's files plus the changes apply_changes would write: protected paths stay the user's
    originals), and returns the changes as a diff. The folder itself is not touched (see apply_changes).
    `selection`: select_files' answer when the caller has it already (the CLI prints it first). `sandbox`:
    the backend (agent/sandbox/registry.py) whose pool makes the two sandboxes; `image` then names an image
    that backend runs (default, on a backend with own_images: the base image, built here). `on_step` sees
    each step as it ends."""
    workspace = Path(workspace)
    sel = selection or select_files(
        workspace, include=include, exclude=exclude, secret=secret, max_bytes=max_copy_mb << 20
    )
    cfg = cfg or LoopConfig()
    backend = sandbox_backend(sandbox)
    if image is None:
        backend.require("own_images", "`harness run` without an image")
        from agent.sandbox.backends.docker.images import ensure_base_image

        image = await asyncio.to_thread(ensure_base_image)
    the_model = get_model(model, **(model_options or {}))
    mb = sel.total_bytes >> 20
    limits = dataclasses.replace(
        limits,
        workspace_mb=max(limits.workspace_mb, 2 * mb + 256),
        memory_mb=max(limits.memory_mb, mb + 1024),  # the workspace is a tmpfs: its pages count as memory
    )
    max_files = len(sel.files) + 5000
    pool_class = backend.pool(sandbox_options)
    async with pool_class(warm=0, max_containers=2) as pool:
        async with pool.sandbox(image, limits, task="workflow") as sb:
            await _copy_in(sb, _batches(sel), sel.executable)
            await sb.mark_baseline(max_files=max_files)
            loop = await run_loop(the_model, sb, instruction, cfg, on_step=on_step)
            changes = await sb.changes(max_bytes=MAX_CHANGE_BYTES, max_files=max_files)
        protect = list(default_protect(verify, sel.files) if protect is None else protect)
        protect += list(CI_GLOBS) + test_machinery(changes, sel.files)
        changes = WorkflowChanges(**vars(changes), protect=protect, copied=sel.files)
        plan = plan_changes(workspace, changes, protect=protect, allow_hooks=allow_hooks, copied=sel.files)
        checks = []
        if verify:
            async with pool.sandbox(image, limits, task="workflow-verify") as sb:
                written = {p for p in plan.plan if p in changes.files}
                exe = (sel.executable - written) | (changes.executable & written)
                await _copy_in(sb, _patched(sel, changes, plan.plan), exe)
                env = await _python_on_path(sb)
                checks = [(cmd, await sb.exec(cmd, timeout=cfg.command_timeout, env=env)) for cmd in verify]
    diff = unified_diff(workspace, changes, flagged=dict(plan))
    return WorkflowResult(loop, changes, diff, checks, sel, protect, plan)


async def _python_on_path(sb) -> Optional[dict]:
    """The verify commands' environment: where the image has `python3` but no `python` (Debian's), a folder
    of ours first on PATH makes `python` that python3, so `--verify "python -m pytest"` means what it says
    on the user's machine. None (the sandbox's own environment) when nothing is missing or can help."""
    probe = await sb.exec(
        "command -v python >/dev/null && exit 0; p=$(command -v python3) || exit 3; "
        'mkdir -p /tmp/.harness-bin && ln -sf "$p" /tmp/.harness-bin/python && env -0',
        timeout=30,
    )
    pairs = [kv.partition("=") for kv in probe.stdout.split("\0") if "=" in kv]
    env = {k: v for k, _, v in pairs}  # the commands' own environment (a request's env replaces it whole)
    if probe.exit_code != 0 or "PATH" not in env:
        return None
    return {**env, "PATH": f"/tmp/.harness-bin:{env['PATH']}"}


async def _copy_in(sb, batches, executable: set[str]):
    for batch in batches:
        await sb.put_files(batch, executable=executable & set(batch))


def _patched(sel: Selection, changes: Changes, plan: list[str]):
    """The folder as apply_changes would leave it, in batches: the user's files with the planned changes."""
    planned = set(plan)
    for batch in _batches(sel):
        yield {
            p: changes.files[p] if p in planned and p in changes.files else data
            for p, data in batch.items()
            if not (p in planned and p not in changes.files)  # a planned deletion
        }
    new = {p: changes.files[p] for p in plan if p in changes.files and p not in sel.files}
    if new:
        yield new


def unified_diff(workspace: Path, changes: Changes, flagged: Optional[dict[str, str]] = None) -> str:
    """The changes as a unified diff against the user's files (text; a binary file is named only). A path in
    `flagged` is preceded by a `# not applied: path (why)` line (git apply skips such lines)."""
    flagged = flagged or {}
    parts = []
    for p in changes.paths:
        original = _read_original(Path(workspace), p)
        before, after = original or b"", changes.files.get(p, b"")
        if p in flagged:
            parts.append(f"# not applied: {p} ({flagged[p]})\n")
        a_name = f"a/{p}" if original is not None else "/dev/null"
        b_name = "/dev/null" if p not in changes.files else f"b/{p}"
        if b"\0" in before[:8000] or b"\0" in after[:8000]:
            parts.append(f"Binary files {a_name} and {b_name} differ\n")
            continue
        a = before.decode("utf-8", "replace").splitlines(keepends=True)
        b = after.decode("utf-8", "replace").splitlines(keepends=True)
        for line in difflib.unified_diff(a, b, a_name, b_name):
            parts.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(parts)
