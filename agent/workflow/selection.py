"""What goes into the sandbox: select_files (what git would commit: tracked plus untracked files that are not
ignored; secrets never, unless --include'd; within a size), and the copy in batches."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from agent.config import DEFAULT_MAX_COPY_MB
from agent.workflow.paths import (
    DEPENDENCY_DIRS,
    SECRET_GLOBS,
    _any,
    _git,
    _git_view,
    _iter_files,
    _z,
    escape_terminal,
)
from results.errors import UserError

MAX_WORKSPACE_BYTES = DEFAULT_MAX_COPY_MB << 20


BATCH_BYTES = 8 << 20  # the copy streams: one tar of at most this much (or one file) at a time


@dataclass
class LeftOut:
    path: str  # a file, or a folder ending in "/"
    files: int
    bytes: int
    why: str


@dataclass
class Selection:
    """What select_files chose: the files copied into the sandbox, and what it left out and why."""

    root: Path
    files: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # path -> (size, mode, mtime_ns)
    left_out: list[LeftOut] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # kept out because they look like secrets
    private: list[str] = field(default_factory=list)  # untracked and readable only by their owner: kept out
    in_git: bool = False

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _, _ in self.files.values())

    @property
    def executable(self) -> set[str]:
        return {p for p, (_, mode, _) in self.files.items() if mode & 0o100}

    def summary(self) -> list[str]:
        """Lines for the terminal: what was copied, left out (how much), kept out as secrets."""
        lines = [
            f"copied {_count(len(self.files))} ({_size(self.total_bytes)}) into the sandbox"
            + (" (what git tracks plus untracked files not ignored)" if self.in_git else "")
        ]
        if self.left_out:
            n, b = sum(x.files for x in self.left_out), sum(x.bytes for x in self.left_out)
            lines.append(f"left out: {_count(n)} ({_size(b)}); --include GLOB copies them")
            by_size = sorted(self.left_out, key=lambda x: (-x.bytes, x.path))
            for x in by_size[:12]:
                lines.append(f"  {escape_terminal(x.path)}: {_count(x.files)}, {_size(x.bytes)} ({x.why})")
            if len(by_size) > 12:
                lines.append(f"  ... and {len(by_size) - 12} more")
        if self.private:
            lines.append(
                "kept out as private (untracked, readable only by you; --include GLOB copies one): "
                + ", ".join(escape_terminal(s) for s in self.private[:20])
                + (f" and {len(self.private) - 20} more" if len(self.private) > 20 else "")
            )
        if self.secrets:
            lines.append(
                "kept out as secrets (never shown to the model; --include GLOB copies one): "
                + ", ".join(escape_terminal(s) for s in self.secrets[:20])
                + (f" and {len(self.secrets) - 20} more" if len(self.secrets) > 20 else "")
            )
        return lines


def _count(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _lsize(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _walk_size(path: Path, cap: int = 200_000) -> tuple[int, int]:
    """(files, bytes) under a folder, without following links; stops counting after cap entries."""
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                files += 1
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
        if files >= cap:
            break
    return files, size


def select_files(
    folder: Path,
    *,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    secret: Iterable[str] = (),
    max_bytes: int = MAX_WORKSPACE_BYTES,
) -> Selection:
    """The files of `folder` that go into the sandbox: what git tracks plus untracked files that are not
    ignored (`git ls-files --cached --others --exclude-standard`; outside a repository its .gitignore files
    still apply), less --exclude and secret-looking files, plus what --include names. Only regular files;
    links, submodules and unreadable files are left out and listed. UserError over max_bytes."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"--workspace {folder}: not a folder")
    include, exclude, secret = list(include), list(exclude), list(SECRET_GLOBS) + list(secret)
    sel = Selection(root=folder)
    with _git_view(folder) as (git_dir, in_git):
        sel.in_git = in_git
        if git_dir is False:  # no git on this machine: every file but version-control metadata
            candidates = [p.relative_to(folder).as_posix() for p in _iter_files(folder, skip_deps=False)]
            ignored = []
        else:
            # Outside git nothing says that a venv is not the project's: the usual dependency folders count
            # as ignored there.
            deps = [] if in_git else [f"--exclude={d}/" for d in sorted(DEPENDENCY_DIRS)]
            listed = _git(
                folder, "ls-files", "--cached", "--others", "--exclude-standard", *deps, "-z", git_dir=git_dir
            )
            if listed is None:
                raise UserError(f"--workspace {folder}: `git ls-files` failed there (run it to see why)")
            candidates = _z(listed)
            ignored_cmd = ("ls-files", "--others", "--ignored", "--exclude-standard", *deps)
            ignored = _z(_git(folder, *ignored_cmd, "--directory", "-z", git_dir=git_dir))  # folders whole
            if include:  # the ignored files --include names come back in
                every = _z(_git(folder, *ignored_cmd, "-z", git_dir=git_dir))
                candidates += [p for p in every if _any(p, include)]
    brought = set(candidates) if include else set()
    for entry in ignored:
        why = "ignored by .gitignore"
        if not in_git and entry.rstrip("/").rsplit("/", 1)[-1] in DEPENDENCY_DIRS:
            why = "a dependency or cache folder (outside git these are left out)"
        if any(b == entry or b.startswith(entry) for b in brought):
            why += " (partly copied: --include)"
        n, b = _walk_size(folder / entry) if entry.endswith("/") else (1, _lsize(folder / entry))
        sel.left_out.append(LeftOut(entry, n, b, why))
    stats = {}
    for rel in sorted(set(candidates)):
        with contextlib.suppress(OSError):  # (a tracked file deleted in the working tree)
            stats[rel] = os.lstat(folder / rel)
    # An untracked file that only its owner may read was made private on purpose, unless every file here is
    # (a umask of 077): kept out like a secret.
    tracked = set(_z(_git(folder, "ls-files", "--cached", "-z"))) if in_git else set()
    usual = [st for rel, st in stats.items() if stat.S_ISREG(st.st_mode) and (rel in tracked or not in_git)]
    deliberate = sum(1 for st in usual if st.st_mode & 0o044) > len(usual) / 2
    for rel, st in stats.items():
        if stat.S_ISLNK(st.st_mode):
            sel.left_out.append(LeftOut(rel, 1, 0, "a symlink (not copied)"))
        elif stat.S_ISDIR(st.st_mode):
            n, b = _walk_size(folder / rel)
            sel.left_out.append(LeftOut(rel + "/", n, b, "a submodule or nested repository"))
        elif not stat.S_ISREG(st.st_mode):
            sel.left_out.append(LeftOut(rel, 1, 0, "not a regular file"))
        elif _any(rel, include):
            sel.files[rel] = (st.st_size, st.st_mode, st.st_mtime_ns)
        elif _any(rel, exclude):
            sel.left_out.append(LeftOut(rel, 1, st.st_size, "--exclude"))
        elif _any(rel, secret):
            sel.secrets.append(rel)
        elif deliberate and rel not in tracked and not st.st_mode & 0o044:
            sel.private.append(rel)
        else:
            sel.files[rel] = (st.st_size, st.st_mode, st.st_mtime_ns)
    if sel.total_bytes > max_bytes:
        largest = _largest_folders(sel.files)
        raise UserError(
            f"--workspace {folder}: the files to copy total {_size(sel.total_bytes)}, over the limit of "
            f"{_size(max_bytes)} (--max-copy-mb); largest: {largest}. Leave some out with --exclude GLOB "
            "(or .gitignore), or raise --max-copy-mb"
        )
    return sel


def _largest_folders(files: dict[str, tuple[int, int, int]]) -> str:
    totals: dict[str, int] = {}
    for p, (size, _, _) in files.items():
        top = p.split("/", 1)[0] + ("/" if "/" in p else "")
        totals[top] = totals.get(top, 0) + size
    top3 = sorted(totals.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{escape_terminal(k)} {_size(v)}" for k, v in top3)


def read_workspace(folder: Path) -> dict[str, bytes]:
    """The selected files' contents, all in memory (run_workflow streams them instead)."""
    sel = select_files(folder)
    return {p: (Path(folder) / p).read_bytes() for p in sel.files}


def _batches(sel: Selection):
    """The selected files in batches of at most BATCH_BYTES (or one larger file), read from disk as they are
    sent; a file that cannot be read is left out and listed."""
    batch: dict[str, bytes] = {}
    size = 0
    for rel in sorted(sel.files):
        try:
            data = (sel.root / rel).read_bytes()
        except OSError as e:
            if not any(x.path == rel for x in sel.left_out):
                sel.left_out.append(LeftOut(rel, 1, 0, f"unreadable: {e.strerror}"))
            continue
        if batch and size + len(data) > BATCH_BYTES:
            yield batch
            batch, size = {}, 0
        batch[rel] = data
        size += len(data)
    if batch:
        yield batch
    for x in sel.left_out:
        sel.files.pop(x.path, None)
