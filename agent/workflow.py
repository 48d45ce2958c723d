"""The Python API for using the agent outside an evaluation.

from agent.workflow import run_workflow
result = asyncio.run(run_workflow("openai/gpt-4o-mini", Path("repo"), "fix the failing test",
                                  verify=["python3 -m pytest -q"]))
print(result.diff)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from agent.config import LoopConfig
from agent.loop import LoopResult, run_loop
from agent.models import get_model
from agent.sandbox import Changes, ExecResult, Limits, SandboxPool
from agent.sandbox.images import ensure_base_image
from results.errors import UserError

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


async def run_workflow(
    model: str,
    workspace: Path,
    instruction: str,
    *,
    verify: list[str] = (),
    cfg: Optional[LoopConfig] = None,
    limits: Limits = Limits(),
    image: Optional[str] = None,
    model_options: Optional[dict] = None,
) -> WorkflowResult:
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
            checks = [
                (cmd, await sb.exec(cmd, timeout=(cfg or LoopConfig()).command_timeout)) for cmd in verify
            ]
            changes = await sb.changes()
            diff = await sb.diff()
    return WorkflowResult(loop, changes, diff, checks)


# Version-control metadata: a checkout runs what these say (core.fsmonitor, hooks, filters, submodule URLs),
# so nothing from a sandbox is ever written into them. Compared in lower case (case-insensitive file systems).
VCS_DIRS = {".git", ".hg", ".svn", ".bzr", "_darcs", "cvs", ".jj", ".pijul", ".fossil-settings"}
VCS_FILES = {
    ".gitattributes",
    ".gitmodules",
    ".gitconfig",
    ".hgrc",
    ".hgsub",
    ".hgsubstate",
    ".fslckout",
    "_fossil_",
    ".bzrrules",
}


def refuse_reason(rel: str) -> str:
    """Why a path from the sandbox may not be written into the user's folder, or ""."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path"
    if any(ch < " " or ch == "\x7f" for ch in rel):
        return "control characters in the name"
    lowered = [p.lower() for p in parts]
    if any(p in VCS_DIRS for p in lowered):
        return "version-control metadata"
    if lowered[-1] in VCS_FILES:
        return "a version-control configuration file"
    return ""


def apply_changes(workspace: Path, changes: Changes) -> list[tuple[str, str]]:
    """Writes the agent's changes back into the folder (the CLI's --apply): regular files of the working
    tree only. Never writes version-control metadata or config, never follows or creates a symlink, never
    writes outside the folder, never removes anything but a regular file. Returns (path, why) for each
    change it refused."""
    root = Path(workspace).resolve()
    refused: list[tuple[str, str]] = []
    for rel in sorted(changes.files):
        why = refuse_reason(rel) or _write_regular(root, rel, changes.files[rel], rel in changes.executable)
        if why:
            refused.append((rel, why))
    for rel in sorted(changes.deleted):
        why = refuse_reason(rel)
        if not why:
            parent = _parent(root, rel, create=False)
            if isinstance(parent, str):
                why = parent
            elif parent is not None:
                target = parent / rel.rsplit("/", 1)[-1]
                try:
                    st = os.lstat(target)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    why = "not a regular file here"
                else:
                    os.remove(target)
        if why:
            refused.append((rel, why))
    return refused


def _parent(root: Path, rel: str, create: bool):
    """The folder rel goes in: a real folder under root, reached without links (created when asked);
    None when it does not exist, or the reason it cannot be used."""
    folder = root
    for part in rel.split("/")[:-1]:
        folder = folder / part
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(folder, 0o755)
            continue
        if stat.S_ISLNK(st.st_mode):
            return "a symlink on the way"
        if not stat.S_ISDIR(st.st_mode):
            return "a file where a folder would go"
    return folder


def _write_regular(root: Path, rel: str, data: bytes, executable: bool) -> str:
    parent = _parent(root, rel, create=True)
    if isinstance(parent, str):
        return parent
    target = parent / rel.rsplit("/", 1)[-1]
    try:
        st = os.lstat(target)
        if not stat.S_ISREG(st.st_mode):
            return "a symlink or special file is there"
    except FileNotFoundError:
        pass
    tmp = parent / f".{target.name}.harness-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if executable else 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)  # replaces the name itself: never writes through a link
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return ""


def escape_terminal(text: str) -> str:
    """Text from a sandbox made safe to print: control and format characters (escape sequences, bidi
    overrides) are shown as \\x.. / \\u.... escapes; newlines and tabs stay."""
    out = []
    for ch in text:
        if ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp"):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)
