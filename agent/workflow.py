"""The Python API for using the agent outside an evaluation.

    from agent.workflow import run_task, run_workflow
    attempt = asyncio.run(run_task("local:smollm2-135m", task))
    result = asyncio.run(run_workflow("openai/gpt-4o-mini", Path("repo"), "fix the failing test",
                                      verify=["python3 -m pytest -q"]))
    print(result.diff)
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from agent.errors import UserError
from agent.images import ensure_base_image
from agent.loop import LoopConfig, LoopResult, run_loop
from agent.models import get_model
from agent.sandbox import Changes, ExecResult, Limits, SandboxPool
from results.schema import Attempt
from tasks.model import Task

MAX_WORKSPACE_BYTES = 64 << 20


@dataclass
class WorkflowResult:
    loop: LoopResult
    changes: Changes
    diff: str
    verification: list[tuple[str, ExecResult]] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return all(r.exit_code == 0 for _, r in self.verification)


def read_workspace(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        raise UserError(f"--workspace {folder}: not a folder")
    files, total = {}, 0
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if ".git" in rel.split("/") or not path.is_file() or path.is_symlink():
            continue
        files[rel] = path.read_bytes()
        total += len(files[rel])
        if total > MAX_WORKSPACE_BYTES:
            raise UserError(f"--workspace {folder}: more than {MAX_WORKSPACE_BYTES >> 20} MB of files")
    return files


async def run_workflow(model: str, workspace: Path, instruction: str, *, verify: list[str] = (),
                       cfg: Optional[LoopConfig] = None, limits: Limits = Limits(),
                       image: Optional[str] = None, model_options: Optional[dict] = None) -> WorkflowResult:
    """Copies `workspace` into a sandbox, runs the agent loop, runs the verification commands,
    and returns the changes as a diff. The folder itself is not touched (see apply_changes)."""
    files = read_workspace(workspace)
    image = image or await asyncio.to_thread(ensure_base_image)
    the_model = get_model(model, **(model_options or {}))
    async with SandboxPool(warm=0, max_containers=2) as pool:
        async with pool.sandbox(image, limits, task="workflow") as sb:
            await sb.put_files(files)
            await sb.mark_baseline()
            loop = await run_loop(the_model, sb, instruction, cfg or LoopConfig())
            checks = [(cmd, await sb.exec(cmd, timeout=(cfg or LoopConfig()).command_timeout)) for cmd in verify]
            changes = await sb.changes()
            diff = await sb.diff()
    return WorkflowResult(loop, changes, diff, checks)


def apply_changes(workspace: Path, changes: Changes):
    """Writes the agent's changes back into the folder (the CLI's --apply)."""
    root = workspace.resolve()
    for rel, data in changes.files.items():
        target = (root / rel).resolve()
        if root not in target.parents:
            raise UserError(f"refusing to write outside {root}: {rel}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for rel in changes.deleted:
        target = (root / rel).resolve()
        if root in target.parents and target.is_file():
            os.remove(target)


async def run_task(model: str, task: Task, *, sample: int = 0, temperature: float = 0.0,
                   cfg: Optional[LoopConfig] = None, model_options: Optional[dict] = None) -> Attempt:
    """One graded attempt of one task, without a run folder."""
    from agent.runner import build_images, loop_policy, run_attempt

    images = await build_images([task])
    the_model = get_model(model, **(model_options or {}))
    cfg = cfg or LoopConfig(temperature=temperature)
    async with SandboxPool(warm=0, max_containers=3) as pool:
        return await run_attempt(task, loop_policy(the_model, cfg, asyncio.Semaphore(1), sample), pool,
                                 images[task.id], run_id=pool.run_id, model_name=model, sample=sample,
                                 temperature=temperature)
