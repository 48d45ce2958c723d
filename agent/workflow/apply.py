"""plan_changes and apply_changes: every change is checked first, then all of them are applied or none."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Iterable, Optional

from agent.sandbox import Changes
from agent.workflow.allow import holds
from agent.workflow.paths import (
    CI_GLOBS,
    SECRET_GLOBS,
    VCS_REASONS,
    _any,
    _limits,
    ignored_paths,
    limit_reason,
    refuse_reason,
)
from agent.workflow.result import ApplyResult, WorkflowChanges, WorkflowResult


def plan_changes(
    workspace: Path,
    changes: Changes,
    *,
    protect: Iterable[str] = CI_GLOBS,
    allow_hooks: bool = False,
    copied: Optional[dict[str, tuple[int, int, int]]] = None,
) -> ApplyResult:
    """apply_changes' checks, writing nothing: the plan, what is held back, what is refused."""
    root = Path(workspace).resolve()
    res = ApplyResult()
    protect = list(protect)
    writes = changes.files
    deleting = {p for p in changes.deleted if p not in writes}
    for why in changes.rejected:  # symlinks and special files the agent made, caps: never in `files`
        for prefix, reason in (
            ("symlink ", "a symlink the agent made; links are never applied"),
            ("special or unreadable file ", "a special or unreadable file the agent made; never applied"),
        ):
            if why.startswith(prefix):
                res.held_back.append((why[len(prefix) :], reason))
                break
        else:
            res.held_back.append((why, "not captured from the sandbox"))
    candidates = sorted(set(writes) | deleting)
    clean = [p for p in candidates if not refuse_reason(p)]
    held = holds(
        root, {p: writes[p] for p in clean if p in writes}, deleting & set(clean), allow_hooks=allow_hooks
    )
    ignored = ignored_paths(root, [p for p in clean if p in writes and (copied is None or p not in copied)])
    name_max, path_max = _limits(root)
    for rel in candidates:
        why = refuse_reason(rel)
        if why in VCS_REASONS:
            res.held_back.append((rel, why))
        elif why:
            res.refused.append((rel, why))
        elif _any(rel, protect):
            res.held_back.append((rel, "protected: shown, never applied"))
        elif rel in held:
            res.held_back.append((rel, held[rel]))
        elif rel in ignored:
            res.held_back.append((rel, "ignored by .gitignore (a build output or cache)"))
        else:
            why = limit_reason(root, rel, name_max, path_max) or _check_target(
                root, rel, rel in writes, copied, deleting
            )
            if why.startswith("held:"):
                res.held_back.append((rel, why[5:]))
            elif why:
                res.refused.append((rel, why))
            else:
                res.plan.append(rel)
    res._finish()
    return res


def apply_changes(
    workspace: Path,
    changes,
    *,
    protect: Optional[Iterable[str]] = None,
    allow_hooks: bool = False,
    copied: Optional[dict[str, tuple[int, int, int]]] = None,
) -> ApplyResult:
    """Writes the agent's changes back into the folder (the CLI's --apply): regular files of the working tree
    only, all of them or none. `changes` is a run's WorkflowResult or its changes (the run's protected paths
    and copied files are used), or any Changes. Every change is checked first (plan_changes):
    version-control metadata, protected paths, what allow.holds does not allow (unless allow_hooks: files
    that run by themselves, configuration, compiled files, new files in dot-folders or named by an existing
    configuration file), paths git ignores and existing files that were not copied are held back and
    listed; a bad name (control or format characters), a path over the platform's limits, a link on the
    way or a special file in the way refuses the whole patch, as does an I/O error while writing (what was
    done is undone). Never follows or creates a link, never writes outside the folder, never removes
    anything but a regular file; an existing file keeps its mode (640 stays 640)."""
    if isinstance(changes, WorkflowResult):
        changes = changes.changes
    if isinstance(changes, WorkflowChanges):
        protect = changes.protect if protect is None else protect
        copied = changes.copied if copied is None else copied
    root = Path(workspace).resolve()
    res = plan_changes(
        root,
        changes,
        protect=CI_GLOBS if protect is None else protect,
        allow_hooks=allow_hooks,
        copied=copied,
    )
    if res.plan:
        try:
            _transaction(root, res.plan, changes.files, changes.executable)
            res.applied = list(res.plan)
        except OSError as e:
            where = os.path.relpath(e.filename, root) if isinstance(e.filename, str) else "?"
            res.refused.append((where, f"could not be written: {e.strerror or e}"))
            res._finish()
    return res


def _check_target(root: Path, rel: str, write: bool, copied, deleting: set[str]) -> str:
    """Why rel cannot be written (or deleted) in the folder as it is now; "held:why" for a policy hold."""
    folder = root
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        folder = folder / part
        st = _lstat(folder, write, part)
        if isinstance(st, str):
            return st
        if stat.S_ISLNK(st.st_mode):
            return "a symlink on the way"
        if not stat.S_ISDIR(st.st_mode):
            if write and "/".join(parts[: i + 1]) in deleting and stat.S_ISREG(st.st_mode):
                return ""  # the agent replaced that file by a folder: removed first
            return "a file where a folder would go"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "its folder is not writable"
    st = _lstat(root / rel, write, "it")
    if isinstance(st, str):
        return st
    if stat.S_ISDIR(st.st_mode):
        return "a folder is there"
    if not stat.S_ISREG(st.st_mode):
        return "a symlink or special file is there"
    if copied is None and write and _any(rel, SECRET_GLOBS):
        return "held:an existing file that looks like a secret (kept out of the sandbox)"
    if copied is not None:
        if rel not in copied:
            return "held:exists in your folder but was not copied into the sandbox"
        size, _, mtime = copied[rel]
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return "changed in your folder during the run"
    return ""


def _lstat(path: Path, write: bool, what: str) -> os.stat_result | str:
    """The entry at path (not followed), or _check_target's answer when there is none: "" (a write makes it)
    or a hold (a deletion finds it gone), or a refusal when it cannot be looked at."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return "" if write else "held:already gone from your folder"
    except OSError as e:
        return f"cannot look at {what}: {e.strerror}"


def _transaction(root: Path, plan: list[str], writes: dict[str, bytes], executable: set[str]):
    """Applies a checked plan: files to remove are moved aside first, new contents are staged next to their
    targets (folders made as needed), then renamed into place; a failure undoes everything done so far
    (folders it made included) and re-raises. The moved-aside originals are removed at the end."""
    made_dirs: list[Path] = []
    staged: dict[str, Path] = {}
    aside: list[tuple[Path, Path]] = []  # (original name, where it was moved)
    placed: list[Path] = []
    n = 0

    def scratch(parent: Path) -> Path:
        nonlocal n
        n += 1
        return parent / f".harness-{os.getpid()}-{n}.tmp"

    def move_aside(target: Path):
        backup = scratch(target.parent)
        os.rename(target, backup)  # the name itself: never through a link
        aside.append((target, backup))

    try:
        for rel in plan:
            if rel not in writes and os.path.lexists(root / rel):
                move_aside(root / rel)
        for rel in plan:
            if rel not in writes:
                continue
            target = root / rel
            for parent in reversed(target.parents):
                if parent == root or root not in parent.parents:
                    continue
                if not os.path.lexists(parent):  # (a file the plan deletes is already moved aside)
                    os.mkdir(parent, 0o755)
                    made_dirs.append(parent)
            mode = _mode(target, rel in executable)
            tmp = scratch(target.parent)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(tmp, flags, 0o600 if mode else (0o777 if rel in executable else 0o666))
            staged[rel] = tmp
            with os.fdopen(fd, "wb") as f:
                f.write(writes[rel])
                if mode is not None:
                    os.fchmod(f.fileno(), mode[0])
                    with contextlib.suppress(OSError):
                        os.fchown(f.fileno(), -1, mode[1])
        for rel, tmp in list(staged.items()):
            target = root / rel
            if os.path.lexists(target):
                move_aside(target)
            os.rename(tmp, target)
            del staged[rel]
            placed.append(target)
    except BaseException:
        for target in reversed(placed):
            with contextlib.suppress(OSError):
                os.remove(target)
        for tmp in staged.values():
            with contextlib.suppress(OSError):
                os.remove(tmp)
        for d in reversed(made_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        for target, backup in reversed(aside):
            with contextlib.suppress(OSError):
                os.rename(backup, target)
        raise
    for _, backup in aside:
        with contextlib.suppress(OSError):
            os.remove(backup)


def _mode(target: Path, executable: bool) -> Optional[tuple[int, int]]:
    """(mode, gid) for the new content of an existing file: its own permission bits (640 stays 640; never
    setuid/setgid), the executable bits following the agent's change. None for a new file."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    mode = stat.S_IMODE(st.st_mode) & 0o777
    if executable and not mode & 0o111:
        mode |= (mode & 0o444) >> 2
    elif not executable:
        mode &= ~0o111
    return mode, st.st_gid
